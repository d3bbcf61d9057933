// shmtrain-worker <segment> <rank> <incarnation>
//
// Started by the master only. Everything else it needs is in the segment header. Exit codes
// are API (include/shmtrain/status.h).
#include <sys/prctl.h>
#include <unistd.h>

#include <Eigen/Core>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "shm/futex.h"
#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"
#include "worker/async_loop.h"
#include "worker/sync_loop.h"

namespace {

bool ParseInt(const char* s, long long* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtoll(s, &end, 10);
  return errno == 0 && end != s && *end == '\0';
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shmtrain;
  const pid_t parent = getppid();
  // A dead master must never leave workers behind: the kernel kills us when it dies. The
  // parent may have died before prctl took effect, hence the re-check after attaching.
  prctl(PR_SET_PDEATHSIG, SIGKILL);

  long long rank = -1, incarnation = -1;
  if (argc != 4 || !ParseInt(argv[2], &rank) || !ParseInt(argv[3], &incarnation)) {
    std::fprintf(stderr, "usage: shmtrain-worker <segment> <rank> <incarnation>\n");
    return kWorkerBadArgs;
  }
  shm::Segment seg;
  std::string why;
  if (const int code = shm::Segment::Attach(argv[1], &seg, &why); code != kWorkerOk) {
    std::fprintf(stderr, "shmtrain-worker[%lld]: %s\n", rank, why.c_str());
    return code;
  }
  const shm::RunConfig& c = seg.header()->config;
  if (rank < 0 || rank >= static_cast<long long>(c.workers)) {
    std::fprintf(stderr, "shmtrain-worker: rank %lld outside 0..%u\n", rank, c.workers - 1);
    return kWorkerBadRank;
  }
  shm::WorkerBlock* self = seg.block(static_cast<int>(rank));
  if (shm::LoadAcquire(self->incarnation) != static_cast<uint32_t>(incarnation)) {
    std::fprintf(stderr, "shmtrain-worker[%lld]: incarnation %lld is stale\n", rank, incarnation);
    return kWorkerBadRank;
  }
  if (parent != static_cast<pid_t>(c.master_pid) || getppid() != parent) {
    return kWorkerOrphaned;
  }
  Eigen::setNbThreads(1);
  shm::StoreRelaxed<int64_t>(self->pid, getpid());
  shm::StoreRelaxed(self->heartbeat_ns, shm::MonotonicNs());
  shm::StoreRelease<uint32_t>(self->attached, 1);

  switch (static_cast<Mode>(c.mode)) {
    case Mode::kSync:
      return worker::RunSync(seg, static_cast<int>(rank), static_cast<uint32_t>(incarnation));
    case Mode::kAsync:
      return worker::RunAsync(seg, static_cast<int>(rank), static_cast<uint32_t>(incarnation));
  }
  return kWorkerBadLayout;
}
