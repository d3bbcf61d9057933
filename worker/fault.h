// Fault injection for tests: a worker dies at an exact point of its loop.
//
// Configured from the segment (RunConfig.fault_*; the master's hidden --fault-* flags). The
// worker SIGKILLs itself, so what the supervisor sees is a real SIGKILL at that instant, with
// whatever half-written state the point leaves behind (kMidGradient and kMidUpdate first
// scribble NaNs over half of what they were writing (kMidUpdate: of the parameters and of
// every optimizer state vector), to prove the redo overwrites it).
// kExit instead exits with kWorkerInjectedFault, a clean non-zero exit.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdint>

#include "shm/layout.h"

namespace shmtrain::worker {

enum class FaultPoint : uint32_t {
  kNone = 0,
  kExit = 1,            // exit(kWorkerInjectedFault) at the start of the step
  kBeforeCompute = 2,   // sync: before the gradient
  kMidGradient = 3,     // sync: half of the slot written
  kAtBarrier1 = 4,      // sync: gradient published, before waiting
  kMidUpdate = 5,       // sync: half of this rank's parameter slice written
  kAtBarrier2 = 6,      // sync: update published, before waiting
  kMidApply = 7,        // async: half of the shared parameters updated (a torn update)
  kAtNorm = 8,          // sync with --clip-norm: this rank's norm share published, before
                        // waiting for the others'
  kMidHostSum = 9,      // several hosts: half of this rank's slice of the host sum written
  kAtHostSum = 10,      // several hosts: host-sum slice published, before waiting for GS
  kAtStats = 11,        // sync with batch norm: the step's second crossing's sums published,
                        // before waiting for them to cross (worker/stats_crossing.cc)
};

// Whether the hook fires here for this rank, step and incarnation.
inline bool FaultAt(const shm::RunConfig& c, FaultPoint p, int rank, int64_t step,
                    uint32_t incarnation) {
  return c.fault_point == static_cast<uint32_t>(p) && c.fault_rank == rank &&
         c.fault_step == step && incarnation < c.fault_incarnations;
}

[[noreturn]] inline void DieNow() {
  kill(getpid(), SIGKILL);
  for (;;) pause();
}

}  // namespace shmtrain::worker
