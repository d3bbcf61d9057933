// The segment layout is a contract between builds: these tests pin it, and prove that a
// worker meeting a segment it does not understand exits with its documented code and leaves
// every byte of the segment as it was.
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shm/layout.h"
#include "shm/segment.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

extern char** environ;

namespace shmtrain::shm {
namespace {

// A change to any of these numbers changes the bytes other builds read: bump kAbiVersion and
// update the numbers together.
TEST(Layout, PinsTheHeader) {
  EXPECT_EQ(kAbiVersion, 6u);
  EXPECT_EQ(std::memcmp(&kMagic, "SHMTRAIN", 8), 0);
  EXPECT_EQ(sizeof(Header), 66624u);
  EXPECT_EQ(sizeof(RunConfig), 464u);
  EXPECT_EQ(sizeof(WorkerBlock), 640u);
  EXPECT_EQ(sizeof(SlotHeader), 64u);
  EXPECT_EQ(sizeof(LossRecord), 16u);
  EXPECT_EQ(offsetof(Header, abi_version), 8u);
  EXPECT_EQ(offsetof(Header, total_size), 32u);
  EXPECT_EQ(offsetof(Header, creator_pid), 40u);
  EXPECT_EQ(offsetof(Header, blocks_offset), 56u);
  EXPECT_EQ(offsetof(Header, slot_stride), 120u);
  EXPECT_EQ(offsetof(Header, config), 144u);
  EXPECT_EQ(offsetof(Header, abort_epoch), 640u);
  EXPECT_EQ(offsetof(Header, wake_seq), 704u);
  EXPECT_EQ(offsetof(Header, waiters), 708u);
  EXPECT_EQ(offsetof(Header, released_step), 712u);
  EXPECT_EQ(offsetof(Header, param_version), 768u);
  EXPECT_EQ(offsetof(Header, claimed), 832u);
  EXPECT_EQ(offsetof(Header, last_loss), 960u);
  EXPECT_EQ(offsetof(Header, step1_end_ns), 1024u);
  EXPECT_EQ(offsetof(Header, loss_ring), 1040u);
  EXPECT_EQ(offsetof(RunConfig, layers), 16u);
  EXPECT_EQ(offsetof(RunConfig, workers), 272u);
  EXPECT_EQ(offsetof(RunConfig, param_count), 280u);
  EXPECT_EQ(offsetof(RunConfig, lr), 336u);
  EXPECT_EQ(offsetof(RunConfig, fault_step), 384u);
  EXPECT_EQ(offsetof(RunConfig, rule), 392u);
  EXPECT_EQ(offsetof(RunConfig, max_staleness), 424u);
  EXPECT_EQ(offsetof(RunConfig, checkpoint_every), 432u);
  EXPECT_EQ(offsetof(RunConfig, first_step), 440u);
  EXPECT_EQ(offsetof(RunConfig, eval_every), 448u);
  EXPECT_EQ(offsetof(RunConfig, snapshots), 456u);
  EXPECT_EQ(offsetof(Header, snapshot_stride), 136u);
  EXPECT_EQ(offsetof(Header, snapshot_offset), 128u);
  EXPECT_EQ(offsetof(Header, eval_ack), 896u);
  EXPECT_EQ(offsetof(Header, stop_eval), 904u);
  EXPECT_EQ(offsetof(WorkerBlock, snap_eval), 32u);
  EXPECT_EQ(offsetof(WorkerBlock, heartbeat_ns), 8u);
  EXPECT_EQ(offsetof(WorkerBlock, incarnation), 24u);
  EXPECT_EQ(offsetof(WorkerBlock, steps_total), 64u);
  EXPECT_EQ(offsetof(WorkerBlock, compute_ns_total), 88u);
  EXPECT_EQ(offsetof(WorkerBlock, commit), 96u);
  EXPECT_EQ(offsetof(WorkerBlock, staleness_hist), 128u);
  EXPECT_EQ(offsetof(WorkerBlock, loss_ema), 224u);
  EXPECT_EQ(offsetof(WorkerBlock, batches), 232u);
  EXPECT_EQ(offsetof(WorkerBlock, grad_sq), 240u);
  EXPECT_EQ(offsetof(WorkerBlock, barrier_wait_hist), 256u);
  EXPECT_EQ(offsetof(WorkerBlock, step_duration_hist), 416u);
  EXPECT_EQ(offsetof(WorkerBlock, step_duration_ns_total), 576u);
}

Header MakeProto(int workers, double momentum) {
  Header h{};
  RunConfig& c = h.config;
  c.num_layers = 3;
  c.layers[0] = 1;
  c.layers[1] = 5;
  c.layers[2] = 1;
  c.workers = static_cast<uint32_t>(workers);
  c.param_count = ModelSpec{{1, 5, 1}}.ParamCount();
  c.rows = 50;
  c.features = 1;
  c.total_steps = 10;
  c.lr = 0.01;
  c.momentum = momentum;
  c.barrier_timeout_s = 5;
  c.master_pid = getpid();
  c.fault_rank = -1;
  c.fault_step = -1;
  c.fault_incarnations = 0;
  h.creator_pid = getpid();
  ComputeLayout(&h);
  return h;
}

TEST(Layout, RegionsAreAlignedAndDisjoint) {
  for (double mom : {0.0, 0.9}) {
    const Header h = MakeProto(7, mom);
    std::vector<std::pair<uint64_t, uint64_t>> regions = {
        {0, sizeof(Header)},
        {h.blocks_offset, sizeof(WorkerBlock) * 7},
        {h.x_offset, 50 * sizeof(float)},
        {h.y_offset, 50 * sizeof(float)},
        {h.params_offset[0], 16 * sizeof(float)},
        {h.params_offset[1], 16 * sizeof(float)},
        {h.slots_offset, h.slot_stride * 7},
    };
    if (mom > 0) {
      regions.push_back({h.momentum_offset[0], 16 * sizeof(float)});
      regions.push_back({h.momentum_offset[1], 16 * sizeof(float)});
    } else {
      EXPECT_EQ(h.momentum_offset[0], 0u);
    }
    for (size_t i = 0; i < regions.size(); ++i) {
      EXPECT_EQ(regions[i].first % kCacheLine, 0u) << "region " << i;
      EXPECT_LE(regions[i].first + regions[i].second, h.total_size) << "region " << i;
      for (size_t j = i + 1; j < regions.size(); ++j) {
        const bool apart = regions[i].first + regions[i].second <= regions[j].first ||
                           regions[j].first + regions[j].second <= regions[i].first;
        EXPECT_TRUE(apart) << "regions " << i << " and " << j << " overlap";
      }
    }
    EXPECT_EQ(h.slot_stride % kCacheLine, 0u);
  }
}

TEST(Layout, ValidateAcceptsItsOwnLayout) {
  const Header h = MakeProto(3, 0.9);
  std::string why;
  EXPECT_EQ(Segment::Validate(h, h.total_size, &why), kWorkerOk) << why;
  EXPECT_EQ(Segment::Validate(h, h.total_size + 64, &why), kWorkerBadLayout);
  Header bad = h;
  bad.x_offset += 64;
  EXPECT_EQ(Segment::Validate(bad, h.total_size, &why), kWorkerBadLayout);
  bad = h;
  bad.config.param_count += 1;
  EXPECT_EQ(Segment::Validate(bad, h.total_size, &why), kWorkerBadLayout);
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
  seg_.header()->magic ^= 1;
  ExpectRefusal(kWorkerBadMagic);
}

TEST_F(WorkerRefuses, WrongAbiVersion) {
  seg_.header()->abi_version = kAbiVersion + 1;
  ExpectRefusal(kWorkerBadAbi);
}

TEST_F(WorkerRefuses, WrongStructSize) {
  seg_.header()->worker_block_size += 8;
  ExpectRefusal(kWorkerBadLayout);
}

TEST_F(WorkerRefuses, WrongTotalSize) {
  seg_.header()->total_size += 4096;
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
  Segment again;
  const Status dup = Segment::Create(name, MakeProto(1, 0), &again);
  EXPECT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find(name), std::string::npos) << dup.message();
  s = Segment();  // destruction unlinks
  EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0);
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
