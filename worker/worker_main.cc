// The worker's process, whatever its kind of run (worker/worker_kinds.h): its arguments, the
// master's watch, the segment attached and checked (its ABI, layout and configuration
// fingerprint), its model read once, then the kind's loop, handed that model. Started by the
// master only. Everything else it needs is in the segment header. Exit codes are API
// (include/shmtrain/status.h).
#include <sys/prctl.h>
#include <unistd.h>

#include <Eigen/Core>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "data/pipeline.h"
#include "nn/gemm.h"
#include "shm/futex.h"
#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"
#include "worker/run_model.h"
#include "worker/worker_kinds.h"

namespace {

// The master's death (PR_SET_PDEATHSIG delivers kMasterDied): a SIGKILLed master cannot remove
// its segment, so its workers do, on their way out. The kernel sends the signal as the master's
// spawning thread exits, with si_pid = the master (while its other threads may still be
// exiting, so getppid() cannot tell); a stray signal from anyone else ends this worker alone,
// like a kill (it is then replaced).
constexpr int kMasterDied = SIGUSR2;
char g_segment_file[300];  // "/dev/shm/<name>"
pid_t g_master = 0;

void OnMasterDied(int, siginfo_t* info, void*) {
  if (info != nullptr && info->si_pid == g_master && g_segment_file[0] != '\0') {
    unlink(g_segment_file);  // async-signal-safe
  }
  _exit(shmtrain::kWorkerOrphaned);
}

bool ParseInt(const char* s, long long* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtoll(s, &end, 10);
  return errno == 0 && end != s && *end == '\0';
}

// A dead master must never leave workers behind, nor its segment: the kernel signals us when
// it dies (OnMasterDied). The parent may have died before prctl took effect, hence the
// re-check after attaching (CheckIdentity).
void WatchMaster(pid_t parent, int argc, char** argv) {
  g_master = parent;
  if (argc > 1 && std::string_view(argv[1]).starts_with("/shmtrain-")) {
    std::snprintf(g_segment_file, sizeof g_segment_file, "/dev/shm%s", argv[1]);
  }
  struct sigaction sa = {};
  sa.sa_sigaction = OnMasterDied;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(kMasterDied, &sa, nullptr);
  prctl(PR_SET_PDEATHSIG, kMasterDied);
}

// This process is the one the master started for `rank` (its current incarnation) and its
// parent that master: kWorkerOk, else the exit code, said on stderr where a user can act.
int CheckIdentity(const shmtrain::shm::Segment& seg, long long rank, long long incarnation,
                  pid_t parent) {
  using namespace shmtrain;
  const shm::RunConfig& c = seg.header()->config;
  if (rank < 0 || rank >= static_cast<long long>(c.workers)) {
    std::fprintf(stderr, "shmtrain-worker: rank %lld outside 0..%u\n", rank, c.workers - 1);
    return kWorkerBadRank;
  }
  const shm::WorkerBlock* self = seg.block(static_cast<int>(rank));
  if (shm::LoadAcquire(self->incarnation) != static_cast<uint32_t>(incarnation)) {
    std::fprintf(stderr, "shmtrain-worker[%lld]: incarnation %lld is stale\n", rank, incarnation);
    return kWorkerBadRank;
  }
  if (parent != static_cast<pid_t>(c.master_pid)) return kWorkerOrphaned;
  if (getppid() != parent) {  // died before prctl: as if its signal had come
    siginfo_t info = {};
    info.si_pid = parent;
    OnMasterDied(kMasterDied, &info, nullptr);
  }
  return kWorkerOk;
}

// The worker's computing set up for the run: one thread, the products' inputs, its priority.
int PrepareCompute(const shmtrain::shm::RunConfig& c, long long rank) {
  using namespace shmtrain;
  Eigen::setNbThreads(1);
  // The products' inputs (--precision); the master's check of the configuration refused bf16
  // where this CPU (as SHMTRAIN_CPU shows it, the master's environment) lacks it.
  if (!nn::SetProductInputs(static_cast<ComputeType>(c.precision))) {
    std::fprintf(stderr, "shmtrain-worker[%lld]: --precision %s: this CPU has no avx512_bf16\n",
                 rank, ToString(static_cast<ComputeType>(c.precision)));
    return kWorkerInternal;
  }
  return kWorkerOk;
}

}  // namespace

namespace shmtrain::worker {
namespace {

// The segment's model, read once (ReadRunModel), and what the run asks of this CPU
// (data::CheckRunOptions: the master checked it on its own, which may differ).
Status ReadModel(const shm::RunConfig& c, RunModel* model) {
  if (Status s = ReadRunModel(c, model); !s.ok()) return s;
  if (const shm::ConfigCheck check = data::CheckRunOptions(c); !check.ok()) return check.status;
  return Status::Ok();
}

}  // namespace

int WorkerMain(int argc, char** argv, std::span<const WorkerKind> kinds) {
  const pid_t parent = getppid();
  WatchMaster(parent, argc, argv);

  long long rank = -1, incarnation = -1;
  if (argc != 4 || !ParseInt(argv[2], &rank) || !ParseInt(argv[3], &incarnation)) {
    std::fprintf(stderr, "usage: shmtrain-worker <segment> <rank> <incarnation>\n");
    return kWorkerBadArgs;
  }
  shm::Segment seg;
  if (const shm::SegmentCheck check = shm::Segment::Attach(argv[1], &seg); !check.ok()) {
    std::fprintf(stderr, "shmtrain-worker[%lld]: %s\n", rank, check.status.message().c_str());
    return check.worker_exit;
  }
  const shm::RunConfig& c = seg.header()->config;
  RunModel model;
  if (const Status s = ReadModel(c, &model); !s.ok()) {
    std::fprintf(stderr, "shmtrain-worker[%lld]: segment %s: run configuration: %s\n", rank,
                 argv[1], s.message().c_str());
    return kWorkerBadLayout;
  }
  if (const int e = CheckIdentity(seg, rank, incarnation, parent); e != kWorkerOk) return e;
  if (const int e = PrepareCompute(c, rank); e != kWorkerOk) return e;
  shm::WorkerBlock* self = seg.mutable_block(static_cast<int>(rank));
  shm::StoreRelaxed<int64_t>(self->pid, getpid());
  shm::StoreRelaxed(self->heartbeat_ns, shm::MonotonicNs());
  shm::StoreRelease<uint32_t>(self->attached, 1);

  // The worker's side of the run's kind (master/kinds/kind.h): its loop.
  for (const WorkerKind& k : kinds) {
    if (static_cast<uint32_t>(k.mode) != c.mode) continue;
    return k.loop(seg, model, static_cast<int>(rank), static_cast<uint32_t>(incarnation));
  }
  return kWorkerBadLayout;
}

}  // namespace shmtrain::worker
