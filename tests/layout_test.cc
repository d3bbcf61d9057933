// The segment layout is a contract between builds: these tests pin it, and prove that a
// worker meeting a segment it does not understand exits with its documented code and leaves
// every byte of the segment as it was.
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shm/layout.h"
#include "shm/segment.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"
#include "tests/parabola_layout.h"
#include "worker/run_model.h"

extern char** environ;

namespace shmtrain::shm {
namespace {

// A change to any of these numbers changes the bytes other builds read: bump kAbiVersion and
// update the numbers together. Every field of every shared struct is pinned, by offset and by
// size, in declaration order: two fields of one size that trade places, or a field that moves
// or changes type, fail here. A new field needs a line here.
#define PIN(S, field, offset, size)                                        \
  do {                                                                     \
    EXPECT_EQ(offsetof(S, field), size_t{offset}) << #S "::" #field;       \
    EXPECT_EQ(sizeof(S::field), size_t{size}) << "sizeof " #S "::" #field; \
  } while (0)

TEST(Layout, PinsEveryField) {
  EXPECT_EQ(kAbiVersion, 17u);
  EXPECT_EQ(std::memcmp(&kMagic, "SHMTRAIN", 8), 0);
  EXPECT_EQ(kLossRing, 4096);
  EXPECT_EQ(kMaxModelText, 4096u);
  EXPECT_EQ(kStalenessBuckets, 12);
  EXPECT_EQ(kDurationBuckets, 20);
  EXPECT_EQ(sizeof(Header), 70784u);
  PIN(Header, magic, 0, 8);
  PIN(Header, abi_version, 8, 4);
  PIN(Header, header_size, 12, 4);
  PIN(Header, worker_block_size, 16, 4);
  PIN(Header, slot_header_size, 20, 4);
  PIN(Header, config_size, 24, 4);
  PIN(Header, dtype, 28, 4);
  PIN(Header, total_size, 32, 8);
  PIN(Header, creator_pid, 40, 8);
  PIN(Header, creator_start_time, 48, 8);
  PIN(Header, config_fingerprint, 56, 8);
  PIN(Header, blocks_offset, 64, 8);
  PIN(Header, x_offset, 72, 8);
  PIN(Header, y_offset, 80, 8);
  PIN(Header, params_offset, 88, 16);
  PIN(Header, state_offset, 104, 64);
  PIN(Header, slots_offset, 168, 8);
  PIN(Header, slot_stride, 176, 8);
  PIN(Header, snapshot_offset, 184, 8);
  PIN(Header, snapshot_stride, 192, 8);
  PIN(Header, host_sum_offset, 200, 8);
  PIN(Header, global_sum_offset, 208, 8);
  PIN(Header, global_stats_offset, 216, 8);
  PIN(Header, config, 224, 4512);
  PIN(Header, abort_epoch, 4736, 4);
  PIN(Header, wake_seq, 4800, 4);
  PIN(Header, waiters, 4804, 4);
  PIN(Header, released_step, 4808, 8);
  PIN(Header, param_version, 4864, 8);
  PIN(Header, claimed, 4928, 8);
  PIN(Header, eval_ack, 4992, 8);
  PIN(Header, stop_eval, 5000, 8);
  PIN(Header, diverged_step, 5008, 8);
  PIN(Header, combined_step, 5056, 8);
  PIN(Header, combined_samples, 5064, 8);
  PIN(Header, combined_loss, 5072, 8);
  PIN(Header, stats_combined_seq, 5080, 8);
  PIN(Header, last_loss, 5120, 8);
  PIN(Header, last_grad_norm, 5128, 8);
  PIN(Header, step1_end_ns, 5184, 8);
  PIN(Header, last_end_ns, 5192, 8);
  PIN(Header, loss_ring, 5200, 65536);
  EXPECT_EQ(sizeof(RunConfig), 4512u);
  PIN(RunConfig, mode, 0, 4);
  PIN(RunConfig, loss, 4, 4);
  PIN(RunConfig, input_shape, 8, 24);
  PIN(RunConfig, model, 32, 4096);
  PIN(RunConfig, workers, 4128, 4);
  PIN(RunConfig, hosts, 4132, 4);
  PIN(RunConfig, host_index, 4136, 4);
  PIN(RunConfig, precision, 4140, 4);
  PIN(RunConfig, param_count, 4144, 8);
  PIN(RunConfig, rows, 4152, 8);
  PIN(RunConfig, features, 4160, 8);
  PIN(RunConfig, batch, 4168, 8);
  PIN(RunConfig, total_steps, 4176, 8);
  PIN(RunConfig, log_every, 4184, 8);
  PIN(RunConfig, seed, 4192, 8);
  PIN(RunConfig, barrier_timeout_s, 4200, 8);
  PIN(RunConfig, spin_ns, 4208, 8);
  PIN(RunConfig, master_pid, 4216, 8);
  PIN(RunConfig, fault_rank, 4224, 4);
  PIN(RunConfig, fault_point, 4228, 4);
  PIN(RunConfig, fault_step, 4232, 8);
  PIN(RunConfig, rule, 4240, 4);
  PIN(RunConfig, fault_incarnations, 4244, 4);
  PIN(RunConfig, lambda, 4248, 8);
  PIN(RunConfig, ms_decay, 4256, 8);
  PIN(RunConfig, epsilon, 4264, 8);
  PIN(RunConfig, max_staleness, 4272, 8);
  PIN(RunConfig, checkpoint_every, 4280, 8);
  PIN(RunConfig, first_step, 4288, 8);
  PIN(RunConfig, eval_every, 4296, 8);
  PIN(RunConfig, snapshots, 4304, 8);
  PIN(RunConfig, optim, 4312, 176);
  PIN(RunConfig, augment, 4488, 16);
  PIN(RunConfig, stats_count, 4504, 8);
  EXPECT_EQ(sizeof(WorkerBlock), 768u);
  PIN(WorkerBlock, phase, 0, 8);
  PIN(WorkerBlock, heartbeat_ns, 8, 8);
  PIN(WorkerBlock, pid, 16, 8);
  PIN(WorkerBlock, incarnation, 24, 4);
  PIN(WorkerBlock, attached, 28, 4);
  PIN(WorkerBlock, snap_eval, 32, 8);
  PIN(WorkerBlock, steps_total, 64, 8);
  PIN(WorkerBlock, samples_total, 72, 8);
  PIN(WorkerBlock, barrier_wait_ns_total, 80, 8);
  PIN(WorkerBlock, compute_ns_total, 88, 8);
  PIN(WorkerBlock, reduce_ns_total, 96, 8);
  PIN(WorkerBlock, commit, 104, 8);
  PIN(WorkerBlock, dropped_total, 112, 8);
  PIN(WorkerBlock, staleness_sum, 120, 8);
  PIN(WorkerBlock, ticket, 128, 8);
  PIN(WorkerBlock, staleness_hist, 192, 96);
  PIN(WorkerBlock, loss_ema, 288, 8);
  PIN(WorkerBlock, batches, 296, 8);
  PIN(WorkerBlock, grad_sq, 304, 8);
  PIN(WorkerBlock, grad_sq_step, 312, 8);
  PIN(WorkerBlock, host_sum_step, 320, 8);
  PIN(WorkerBlock, stats_seq, 328, 8);
  PIN(WorkerBlock, crossing_wait_ns_total, 336, 8);
  PIN(WorkerBlock, barrier_wait_hist, 384, 160);
  PIN(WorkerBlock, step_duration_hist, 544, 160);
  PIN(WorkerBlock, step_duration_ns_total, 704, 8);
  EXPECT_EQ(sizeof(SlotHeader), 64u);
  PIN(SlotHeader, step, 0, 8);
  PIN(SlotHeader, samples, 8, 8);
  PIN(SlotHeader, loss_sum, 16, 8);
  EXPECT_EQ(sizeof(OptimConfig), 176u);
  PIN(OptimConfig, optimizer, 0, 4);
  PIN(OptimConfig, num_states, 4, 4);
  PIN(OptimConfig, hyper, 8, 64);
  PIN(OptimConfig, lr, 72, 8);
  PIN(OptimConfig, weight_decay, 80, 8);
  PIN(OptimConfig, clip_norm, 88, 8);
  PIN(OptimConfig, schedule, 96, 4);
  PIN(OptimConfig, reserved, 100, 4);
  PIN(OptimConfig, warmup_steps, 104, 8);
  PIN(OptimConfig, step_every, 112, 8);
  PIN(OptimConfig, gamma, 120, 8);
  PIN(OptimConfig, lr_min, 128, 8);
  PIN(OptimConfig, total_steps, 136, 8);
  PIN(OptimConfig, milestones, 144, 32);
  EXPECT_EQ(sizeof(LossRecord), 16u);
  PIN(LossRecord, tag, 0, 8);
  PIN(LossRecord, loss, 8, 8);
}


#undef PIN

Header MakeProto(int workers, uint32_t states) {
  return test::ParabolaLayout(Mode::kSync, workers, states);
}

// Regions (offset, bytes) of a segment of `total` bytes: each starts on a cache line, ends
// inside the segment and overlaps no other.
void ExpectAlignedAndApart(const std::vector<std::pair<uint64_t, uint64_t>>& regions,
                           uint64_t total) {
  for (size_t i = 0; i < regions.size(); ++i) {
    EXPECT_EQ(regions[i].first % kCacheLine, 0u) << "region " << i;
    EXPECT_LE(regions[i].first + regions[i].second, total) << "region " << i;
    for (size_t j = i + 1; j < regions.size(); ++j) {
      const bool apart = regions[i].first + regions[i].second <= regions[j].first ||
                         regions[j].first + regions[j].second <= regions[i].first;
      EXPECT_TRUE(apart) << "regions " << i << " and " << j << " overlap";
    }
  }
}

TEST(Layout, RegionsAreAlignedAndDisjoint) {
  for (uint32_t states : {0u, 1u, 2u, static_cast<uint32_t>(kMaxStates)}) {
    const Header h = MakeProto(7, states);
    std::vector<std::pair<uint64_t, uint64_t>> regions = {
        {0, sizeof(Header)},
        {h.blocks_offset, sizeof(WorkerBlock) * 7},
        {h.x_offset, 50 * sizeof(float)},
        {h.y_offset, 50 * sizeof(float)},
        {h.params_offset[0], 16 * sizeof(float)},
        {h.params_offset[1], 16 * sizeof(float)},
        {h.slots_offset, h.slot_stride * 7},
    };
    for (uint32_t k = 0; k < static_cast<uint32_t>(kMaxStates); ++k) {
      for (int b = 0; b < 2; ++b) {
        if (k < states) {
          regions.push_back({h.state_offset[k][b], 16 * sizeof(float)});
        } else {
          EXPECT_EQ(h.state_offset[k][b], 0u) << "state " << k << " of " << states;
        }
      }
    }
    ExpectAlignedAndApart(regions, h.total_size);
    EXPECT_EQ(h.slot_stride % kCacheLine, 0u);
  }
}

// The regions that only validation and several hosts lay out, under the same rule (layout.h:
// every region 64-byte aligned, none overlapping), and HS with one worker a host: slot 0's
// gradient itself, no region of its own. GStats only with several hosts and batch norm.
TEST(Layout, SnapshotRingAndHostSumsAreAlignedAndApart) {
  for (int workers : {1, 3}) {
    for (uint32_t hosts : {1u, 2u}) {
      for (uint64_t stats : {0u, 9u}) {
        SCOPED_TRACE("P " + std::to_string(workers) + ", hosts " + std::to_string(hosts) +
                     ", statistics " + std::to_string(stats));
        Header h = test::ParabolaLayout(Mode::kSync, workers, 1, /*eval_every=*/5);
        h.config.hosts = hosts;
        h.config.snapshots = 3;
        h.config.stats_count = stats;
        ASSERT_TRUE(ComputeLayout(&h));
        if (hosts > 1 && stats > 0) {
          EXPECT_NE(h.global_stats_offset, 0u);
        } else {
          EXPECT_EQ(h.global_stats_offset, 0u);
        }
        const uint64_t vec = 16 * sizeof(float);
        std::vector<std::pair<uint64_t, uint64_t>> regions = {
            {0, sizeof(Header)},
            {h.blocks_offset, sizeof(WorkerBlock) * workers},
            {h.params_offset[0], vec},
            {h.params_offset[1], vec},
            {h.state_offset[0][0], vec},
            {h.state_offset[0][1], vec},
            {h.slots_offset, h.slot_stride * workers},
        };
        EXPECT_EQ(h.snapshot_stride % kCacheLine, 0u);
        for (uint64_t k = 0; k < 3; ++k) {
          regions.push_back({h.snapshot_offset + k * h.snapshot_stride, vec});
        }
        if (hosts == 1) {
          EXPECT_EQ(h.host_sum_offset, 0u);
          EXPECT_EQ(h.global_sum_offset, 0u);
        } else {
          regions.push_back({h.global_sum_offset, vec});
          if (workers == 1) {
            EXPECT_EQ(h.host_sum_offset, h.slots_offset + sizeof(SlotHeader));
            EXPECT_EQ(h.host_sum_offset % kCacheLine, 0u);
          } else {
            regions.push_back({h.host_sum_offset, vec});
          }
        }
        if (h.global_stats_offset != 0) regions.push_back({h.global_stats_offset, stats * sizeof(double)});
        ExpectAlignedAndApart(regions, h.total_size);
      }
    }
  }
}

TEST(Layout, ValidateAcceptsItsOwnLayout) {
  const Header h = MakeProto(3, 1);
  const shm::SegmentCheck ok = Segment::Validate(h, h.total_size);
  EXPECT_EQ(ok.worker_exit, kWorkerOk) << ok.status.message();
  EXPECT_EQ(Segment::Validate(h, h.total_size + 64).worker_exit, kWorkerBadLayout);
  Header bad = h;
  bad.x_offset += 64;
  EXPECT_EQ(Segment::Validate(bad, h.total_size).worker_exit, kWorkerBadLayout);
  bad = h;
  bad.config.param_count += 1;
  EXPECT_EQ(Segment::Validate(bad, h.total_size).worker_exit, kWorkerBadLayout);
}

// A worker's checks of header h laid out again from its config (where that fits in 64 bits;
// else with the offsets it has), its fingerprint sealed, and mapped at exactly its
// total_size: Validate, then the worker's read of the model (worker::ReadRunModel). The
// reason of a refusal, or "accepted". So only the config can be what is wrong.
std::string Refusal(Header h) {
  if (Header again = h; ComputeLayout(&again)) h = again;
  h.config_fingerprint = ConfigFingerprint(h.config);
  const shm::SegmentCheck check = Segment::Validate(h, h.total_size);
  if (check.worker_exit != kWorkerOk) {
    EXPECT_EQ(check.worker_exit, kWorkerBadLayout) << check.status.message();
    return check.status.message();
  }
  worker::RunModel model;
  const Status read = worker::ReadRunModel(h.config, &model);
  return read.ok() ? "accepted" : read.message();
}

#define EXPECT_REFUSED_FOR(h, what)                                        \
  do {                                                                     \
    const std::string why_ = Refusal(h);                                   \
    EXPECT_NE(why_.find(what), std::string::npos) << "refusal: " << why_; \
  } while (0)

TEST(Layout, ValidateRefusesAnEmptySnapshotRing) {
  // Segment::snapshot() takes the eval index modulo the ring's length.
  for (int64_t snapshots : std::initializer_list<int64_t>{0, -1, 1, INT64_MIN}) {
    Header h = test::ParabolaLayout(Mode::kSync, 2, 0, /*eval_every=*/5);
    h.config.snapshots = snapshots;
    EXPECT_REFUSED_FOR(h, "validation snapshots every 5 steps in a ring of " +
                              std::to_string(snapshots));
  }
  Header h = test::ParabolaLayout(Mode::kSync, 2, 0, /*eval_every=*/-5);
  EXPECT_REFUSED_FOR(h, "validation every -5 steps");
  // No validation: the ring's length means nothing.
  h = test::ParabolaLayout(Mode::kSync, 2, 0, /*eval_every=*/0);
  h.config.snapshots = 0;
  ComputeLayout(&h);
  EXPECT_EQ(Refusal(h), "accepted");
}

// A size that wraps past 2^64 into the very layout of a small run: the header's offsets and
// total_size are those of the parabola's, but its config says regions of exabytes.
TEST(Layout, ValidateRefusesSizesThatWrap) {
  const Header ok = test::ParabolaLayout(Mode::kSync, 2, 0, /*eval_every=*/5);
  ASSERT_EQ(Refusal(ok), "accepted");
  const uint64_t vec = ok.snapshot_stride;
  ASSERT_GT(vec, 0u);

  Header h = ok;  // vec * snapshots == vec * 2 (mod 2^64)
  h.config.snapshots = static_cast<int64_t>(2 + (~uint64_t{0} / vec + 1));
  ASSERT_EQ(vec * static_cast<uint64_t>(h.config.snapshots), vec * 2);
  EXPECT_REFUSED_FOR(h, "more than 2^64 bytes");

  h = ok;  // rows * 4 == 50 * 4 (mod 2^64), for X (1 feature) and Y alike
  h.config.rows = 50 + (int64_t{1} << 62);
  EXPECT_REFUSED_FOR(h, "more than 2^64 bytes");

  // The parameter count must be the model's.
  h = ok;
  h.config.param_count = 17;
  EXPECT_REFUSED_FOR(h, "param_count 17 is not the layers' count (16)");
}

TEST(Layout, ComputeLayoutSaysWhenItDoesNotFit) {
  Header h = test::ParabolaLayout(Mode::kSync, 2, 0, /*eval_every=*/5);
  EXPECT_TRUE(ComputeLayout(&h));
  h.config.snapshots = INT64_MAX;
  EXPECT_FALSE(ComputeLayout(&h));
  EXPECT_EQ(h.total_size, 0u);
  h.config.snapshots = 2;
  h.config.rows = -1;
  EXPECT_FALSE(ComputeLayout(&h));
  Segment s;
  const Status st = Segment::Create(MakeSegmentName(), h, &s);
  EXPECT_EQ(st.code(), Status::Code::kResource);
  EXPECT_NE(st.message().find("does not fit in 64 bits"), std::string::npos) << st.message();
}

TEST(Layout, ValidateRefusesModelsAWorkerCannotRun) {
  const Header ok = test::ParabolaLayout(Mode::kSync, 2, 0);
  Header h = ok;
  std::snprintf(h.config.model, sizeof h.config.model, "%s", "linear(5),tanx,linear(1)");
  EXPECT_REFUSED_FOR(h, "model: layer 2 'tanx': unknown layer 'tanx'");
  // The master writes the canonical text (nn::ModelText); any other spelling is not its.
  h = ok;
  std::snprintf(h.config.model, sizeof h.config.model, "%s", "linear( 5 ),tanh,linear(1)");
  EXPECT_REFUSED_FOR(h,
                     "model: model text 'linear( 5 ),tanh,linear(1)' is not in the canonical "
                     "form that shmtrain writes ('linear(5),tanh,linear(1)')");
  h = ok;
  std::memset(h.config.model, 'x', sizeof h.config.model);  // no end
  EXPECT_REFUSED_FOR(h, "model: a model text without its end");
  h = ok;
  h.config.input_shape[1] = 0;
  EXPECT_REFUSED_FOR(h, "model: input 1x0x1 has a dimension of 0 (each must be 1 to 65536)");
  h = ok;
  h.config.input_shape[1] = 3;  // 1x3x1 into a linear layer
  EXPECT_REFUSED_FOR(h, "model: linear #1 (layer 1): input 1x3x1 is not flat");
  // The first layer reads the model's inputs from each row of X, which has `features`.
  h = ok;
  h.config.features = 2;
  EXPECT_REFUSED_FOR(h, "2 features for a model input of 1 (1 values)");
}

std::string Bytes(const Segment& s) { return std::string(s.base(), s.size()); }

int RunWorker(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string exe = SHMTRAIN_WORKER_BIN;
  argv.push_back(exe.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  int st = 0;
  EXPECT_EQ(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

class WorkerRefuses : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Segment::Create(MakeSegmentName(), MakeProto(2, 0), &seg_).ok());
  }
  // Runs worker 0 on the segment: it must exit with `code` and write nothing.
  void ExpectRefusal(int code, const std::string& rank = "0", const std::string& inc = "0") {
    const std::string before = Bytes(seg_);
    EXPECT_EQ(RunWorker({seg_.name(), rank, inc}), code);
    EXPECT_TRUE(Bytes(seg_) == before) << "the worker wrote into a segment it refused";
  }
  Segment seg_;
};

TEST_F(WorkerRefuses, WrongMagic) {
  seg_.mutable_header()->magic ^= 1;
  ExpectRefusal(kWorkerBadMagic);
}

TEST_F(WorkerRefuses, WrongAbiVersion) {
  seg_.mutable_header()->abi_version = kAbiVersion + 1;
  ExpectRefusal(kWorkerBadAbi);
}

TEST_F(WorkerRefuses, WrongStructSize) {
  seg_.mutable_header()->worker_block_size += 8;
  ExpectRefusal(kWorkerBadLayout);
}

TEST_F(WorkerRefuses, WrongTotalSize) {
  seg_.mutable_header()->total_size += 4096;
  ExpectRefusal(kWorkerBadLayout);
}

TEST_F(WorkerRefuses, SegmentSmallerThanItsHeader) {
  const int fd = shm_open(seg_.name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  EXPECT_EQ(RunWorker({seg_.name(), "0", "0"}), kWorkerBadLayout);
}

TEST_F(WorkerRefuses, RankOutOfRange) { ExpectRefusal(kWorkerBadRank, "5"); }

TEST_F(WorkerRefuses, StaleIncarnation) { ExpectRefusal(kWorkerBadRank, "1", "7"); }

// Attach's refusal is a Status that names the segment, with the exit code a worker reports it
// by: kData for a segment of another layout, kResource for one that cannot be opened.
TEST_F(WorkerRefuses, AttachNamesTheSegmentAndTheExitCode) {
  seg_.mutable_header()->abi_version = kAbiVersion + 1;
  Segment attached;
  const SegmentCheck check = Segment::Attach(seg_.name(), &attached);
  EXPECT_EQ(check.worker_exit, kWorkerBadAbi);
  EXPECT_EQ(check.status.code(), Status::Code::kData);
  EXPECT_EQ(check.status.message(), "segment " + seg_.name() + ": segment ABI version " +
                                        std::to_string(kAbiVersion + 1) + ", this worker speaks " +
                                        std::to_string(kAbiVersion));
  EXPECT_FALSE(attached.valid());
  const SegmentCheck none = Segment::Attach("/shmtrain-no-such-segment", &attached);
  EXPECT_EQ(none.worker_exit, kWorkerNoSegment);
  EXPECT_EQ(none.status.code(), Status::Code::kResource);
  EXPECT_EQ(none.status.message(),
            "cannot open segment /shmtrain-no-such-segment: No such file or directory");
  seg_.mutable_header()->abi_version = kAbiVersion;
  const SegmentCheck ok = Segment::Attach(seg_.name(), &attached);
  EXPECT_TRUE(ok.ok()) << ok.status.message();
  EXPECT_EQ(ok.worker_exit, kWorkerOk);
  EXPECT_TRUE(attached.valid());
}

TEST(WorkerArgs, MissingOrBad) {
  EXPECT_EQ(RunWorker({}), kWorkerBadArgs);
  EXPECT_EQ(RunWorker({"/x", "zero", "0"}), kWorkerBadArgs);
  EXPECT_EQ(RunWorker({"/shmtrain-no-such-segment", "0", "0"}), kWorkerNoSegment);
}

TEST(Segment, CreateIsExclusiveAndPrivate) {
  const mode_t old = umask(0);  // even a permissive umask must not widen the mode
  Segment s;
  const std::string name = MakeSegmentName();
  ASSERT_TRUE(Segment::Create(name, MakeProto(1, 0), &s).ok());
  umask(old);
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, getuid());
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), s.size());
  // A clash is refused with the system's reason and leaves the existing segment as it was:
  // its name, size and bytes (a differently laid out proto would rewrite the header).
  s.mutable_header()->creator_pid = 4242;
  const std::string before = Bytes(s);
  Segment again;
  const Status dup = Segment::Create(name, MakeProto(3, 2), &again);
  EXPECT_FALSE(dup.ok());
  EXPECT_FALSE(again.valid());
  EXPECT_NE(dup.message().find("cannot create shared memory segment " + name + ": " +
                               std::strerror(EEXIST)),
            std::string::npos)
      << dup.message();
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0) << "a refused create removed " << name;
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), s.size());
  EXPECT_TRUE(Bytes(s) == before) << "a refused create wrote into the existing segment";
  s = Segment();  // destruction unlinks
  EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0);
}

// posix_fallocate makes a /dev/shm too small for the segment an error at creation (not a
// SIGBUS mid-run), with a message that says so. The size asked for exceeds the whole of
// /dev/shm, which tmpfs refuses before reserving a page: other runs never see it full.
TEST(Segment, BiggerThanDevShmFailsAtCreation) {
  struct statvfs vfs {};
  ASSERT_EQ(statvfs("/dev/shm", &vfs), 0);
  if (vfs.f_blocks == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  Header proto = MakeProto(1, 0);
  proto.total_size = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize + (uint64_t{1} << 20);
  const std::string name = MakeSegmentName();
  Segment s;
  const Status st = Segment::Create(name, proto, &s);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(s.valid());
  EXPECT_NE(
      st.message().find("cannot reserve space in /dev/shm (segment " + name + ", " +
                        std::to_string(proto.total_size) + " bytes): " + std::strerror(ENOSPC)),
      std::string::npos)
      << st.message();
  struct stat file {};
  EXPECT_NE(stat(("/dev/shm" + name).c_str(), &file), 0) << "a failed create left " << name;
}

// The stale check reads the creator from the header of a read-only mapping; RemoveSegment
// takes names as ListSegments spells them (no leading '/') and as MakeSegmentName does.
TEST(Segment, ListedWithItsCreatorAndRemovedByName) {
  for (const bool slash : {false, true}) {
    Segment s;
    const std::string name = MakeSegmentName();
    Header proto = MakeProto(1, 0);
    proto.creator_pid = getpid();
    proto.creator_start_time = ProcessStartTime(getpid());
    ASSERT_TRUE(Segment::Create(name, proto, &s).ok());
    bool listed = false;
    for (const SegmentInfo& info : ListSegments()) {
      if ("/" + info.name != name) continue;
      listed = true;
      EXPECT_EQ(info.bytes, s.size());
      EXPECT_EQ(info.creator_pid, getpid());
      EXPECT_TRUE(info.live) << info.why;
    }
    EXPECT_TRUE(listed) << name;
    EXPECT_TRUE(RemoveSegment(slash ? name : name.substr(1))) << name;
    struct stat st {};
    EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0) << name;
    EXPECT_FALSE(RemoveSegment(name)) << "removed twice: " << name;
    EXPECT_EQ(s.header()->creator_pid, getpid()) << "the mapping outlives the name";
  }
}

// A thread that cannot be stopped may still read a segment the master gives up on its way out,
// and so may the rest of the run's end.
TEST(Segment, LeaveMappedRemovesTheNameButNeverUnmaps) {
  Segment s;
  const std::string name = MakeSegmentName();
  ASSERT_TRUE(Segment::Create(name, MakeProto(1, 0), &s).ok());
  const Header* h = s.header();
  s.LeaveMapped();
  ASSERT_TRUE(s.valid());
  EXPECT_EQ(s.header(), h) << "the object must still lead to the mapping";
  struct stat st {};
  EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0) << name;
  s = Segment();  // neither the move nor the destructor may unmap it now
  EXPECT_EQ(std::memcmp(&h->magic, &kMagic, sizeof kMagic), 0);
}

TEST(Segment, NamesAreUniqueAndOurs) {
  const std::string a = MakeSegmentName(), b = MakeSegmentName();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("/" + SegmentPrefixForUser() + std::to_string(getpid()) + "-", 0), 0u) << a;
}

TEST(Segment, ProcessStartTimeIdentifiesUs) {
  EXPECT_GT(ProcessStartTime(getpid()), 0u);
  EXPECT_EQ(ProcessStartTime(getpid()), ProcessStartTime(getpid()));
  EXPECT_EQ(ProcessStartTime(0x7fffffff), 0u);
}

}  // namespace
}  // namespace shmtrain::shm
