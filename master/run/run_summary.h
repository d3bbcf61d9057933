// The run summary: the last line of a finished training run, `done: ...` in text mode or the
// JSON `summary` event (docs/guide.md, "Logs"). Scripts and tests parse it: its fields, their
// order and their formats are API.
//
// Owns the figures a finished run reports and their formatting. The run loop fills a
// RunSummary from what it knows (steps, losses, timings, restarts, early stopping, held-out
// metrics) and from the workers' counters in the segment (ReadWorkerCounters, once no worker
// runs); SummaryText and SummaryJson are pure functions of it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "master/cli/log.h"
#include "nn/metrics.h"
#include "shm/segment.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

// Async across hosts (master/hosts/param_server.h): the run's figures that only the hosts together
// know, gathered at the end for host 0's summary line.
struct CrossHostTotals {
  std::vector<uint64_t> host_updates;  // each host's applied updates; empty: not such a run
  uint64_t samples = 0, staleness_sum = 0, dropped_local = 0;  // the workers', summed
  uint64_t sent = 0, applied = 0, dropped = 0, bytes = 0;      // the pushes, summed
  uint64_t tau_sum = 0, tau_max = 0;
  std::vector<uint64_t> tau_counts;  // applied pushes by tau (the last one: tau >= its index)
  // The smallest tau with at least a fraction q of the applied pushes at or below it.
  uint64_t TauQuantile(double q) const;
};

struct RunSummary {
  Mode mode = Mode::kSync;
  AsyncRule rule = AsyncRule::kAsgd;  // async only
  int workers = 1;  // per host
  int hosts = 1;
  int64_t first_step = 0;  // 0, or the resumed checkpoint's step
  int64_t end_step = 0;    // where training ended: total_steps, or earlier after an early stop
  double final_loss = 0;   // the kept parameters' loss over the whole training set
  double wall_s = 0;       // from the workers' start to their end
  int64_t restarts = 0;
  int64_t torn_updates = 0;
  std::vector<double> recoveries;  // seconds from each death to progress, any order

  // --early-stop
  bool early_stop = false;
  bool stopped_early = false;
  int64_t best_step = -1;  // the step of the model kept

  // Held-out data (val_rows > 0): the kept parameters' validation metrics.
  int64_t val_rows = 0;
  bool classification = false;  // accuracy (xent) or RMSE (mse)
  nn::Metrics val;

  // The workers' counters (ReadWorkerCounters).
  uint64_t samples = 0;
  uint64_t dropped = 0;                  // async: stale gradients dropped
  uint64_t staleness_sum = 0;            // async: the sum of every applied update's staleness
  std::vector<uint64_t> worker_updates;  // async: updates applied by each rank
  int64_t param_version = 0;             // async: the global version counter
  int64_t step1_end_ns = 0;              // sync: when the run's first step ended (the first
                                         // rank past it records it; CLOCK_MONOTONIC)
  int64_t last_end_ns = 0;               // sync: when its last step ended
  // Where the time went, summed over the ranks: computing gradients (async: whole updates),
  // the reduce + update phase (sync), and waiting at barriers (sync).
  uint64_t compute_ns = 0, reduce_ns = 0, barrier_ns = 0;
  // Sync with batch norm: the part of barrier_ns spent in batch norm's crossings.
  uint64_t crossing_ns = 0;
  // Several hosts: the cross-host combine's mean time per step (master/hosts/combiner.h), in us.
  double combine_us = NAN;
  // Several hosts with batch norm: the mean time of a crossing's exchange, in us.
  double crossing_us = NAN;
  // Async across hosts: the totals of every host (host 0 reports them).
  CrossHostTotals cross;
};

// Sync: the mean per worker and step of each phase, in microseconds.
struct StepSplit {
  double compute_us = NAN, reduce_us = NAN, barrier_us = NAN;
  double crossing_us = NAN;  // a part of barrier_us: batch norm's crossings (0 without)
};
StepSplit SplitPerStep(const RunSummary& s);

// Fills the workers' counters of *s from the segment. Once no worker runs.
void ReadWorkerCounters(const shm::Segment& seg, RunSummary* s);

// Microseconds per step, as the run's kind times them (RunKind::UsPerStep). Sync: between the ends of the run's first and last steps (NaN for
// fewer than two steps), which leaves the workers' start out. Async: the wall time over the
// updates applied.
double UsPerStep(const RunSummary& s);
// "812.50 us/step", or why there is no such time (a one-step sync run): never "nan".
std::string UsPerStepText(const RunSummary& s);

// Sync: `time per step and worker: compute 812 us (84%), reduce+update 66 us (7%), barrier
// wait 90 us (9%)`: what limits scaling. Empty for async runs.
std::string SplitText(const RunSummary& s);
// `done: 2000 steps, final loss ...`
std::string SummaryText(const RunSummary& s);
// {"event":"summary","steps":...}
JsonLine SummaryJson(const RunSummary& s);
// The summary line in the logger's format.
void LogSummary(const RunSummary& s, Logger& log);

}  // namespace shmtrain::master
