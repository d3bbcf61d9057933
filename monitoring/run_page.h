// The live page's data: GET /api/run on the master's HTTP address (monitoring/exporter.h),
// which the page at / (monitoring/page/live.html) polls every second.
//
// One JSON object, read at request time from the segment and the master's RunStats (as a
// scrape is):
//   version, mode, rule, hosts, loss ("xent"|"mse"), metric ("accuracy"|"rmse"),
//   total_steps, steps_per_epoch, state ("running"|"ended")
//   progress  {step, epoch, epochs, loss, lr, samples_per_s, eta_s}
//   train     {step: [...], loss: [...]}              the printed training losses
//   val       {step: [...], loss: [...], metric: [...]} the validations
//   rate      {step: [...], samples_per_s: [...]}      about a point a second
//   workers   [{host, worker, up, restarts, pid, heartbeat_age_s, samples}, ...]
//   staleness null (sync) | {le: [0, 1, 2, 4, ..., 512, null], counts: [...]} (async; per
//             bucket, not cumulative; null: +Inf)
//   relaunch  null (not a relaunch) | {relaunches, reason, reasons: {host_died, host_silent},
//             lost: [...], step, label, line}: SHMTRAIN_RELAUNCH (shmtrain/relaunch.h), with the
//             charts' mark ("relaunch 2: host 1 (node-b) lost") and the log's line
// A curve holds at most kPagePoints points (evenly thinned, the first and last kept:
// RunHistory::Thinned). A value that is not finite (a diverged loss, an ETA before the first
// step) is null.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "monitoring/run_stats.h"
#include "monitoring/run_view.h"
#include "shm/segment.h"
#include "shmtrain/options.h"

namespace shmtrain::monitoring {

inline constexpr size_t kPagePoints = 4000;

// What the page needs of the run that the segment does not hold.
struct RunFacts {
  int64_t steps_per_epoch = 0;  // steps (sync) or updates (async) an epoch
  int64_t first_step = 0;       // where this run started (a resumed run: not 0)
  int64_t t_start_ns = 0;       // shm::MonotonicNs() at the run's start
};

// This host's workers, read from their P blocks in the segment (shm::Segment::block(0) on)
// and the supervisor's counters.
std::vector<WorkerState> LocalWorkerStates(const shm::WorkerBlock* blocks, int P,
                                           const RunStats& stats, int host);

// The JSON of /api/run. `ended`: the run's workers are done (the segment is read one last time).
// kind: what the run's kind decides (monitoring/run_view.h).
std::string RunPageJson(const shm::Segment& seg, const RunKindView& kind, const RunStats& stats,
                        const TrainOptions& opts, const RunFacts& facts, bool ended);

}  // namespace shmtrain::monitoring
