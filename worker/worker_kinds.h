// The workers' side of the kinds of run (the master's side: master/kinds/kind.h): each kind's
// loop, picked by the segment header's mode word (RunConfig::mode, which the master writes
// from the run's kind). A new kind is its loop's file and one line in kWorkerKinds.
#pragma once

#include <cstdint>
#include <span>

#include "shm/segment.h"
#include "shmtrain/options.h"
#include "worker/async_loop.h"
#include "worker/run_model.h"
#include "worker/sync_loop.h"

namespace shmtrain::worker {

struct WorkerKind {
  Mode mode;  // the header's mode word it runs (RunKind::mode on the master's side)
  // Runs rank `rank`'s loop to the end of the run on the segment's model, read once
  // (worker/run_model.h); returns a WorkerExit code.
  int (*loop)(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation);
};

// The kinds shmtrain-worker runs, one line each.
inline constexpr WorkerKind kWorkerKinds[] = {
    {Mode::kSync, RunSync},
    {Mode::kAsync, RunAsync},
};

// A worker process (worker/worker_main.cc): argv, the master's watch, the segment attached
// and checked, its model read, then the loop of the kind in `kinds` whose mode is the
// header's. Returns the process's exit code (kWorkerBadLayout when no kind has the header's
// mode).
int WorkerMain(int argc, char** argv, std::span<const WorkerKind> kinds);

}  // namespace shmtrain::worker
