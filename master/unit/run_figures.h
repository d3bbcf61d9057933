// The figures a finished training run reports, each put in by the unit or the kind that knows
// it at the run's end (master/unit/run_unit.h, RunEnd); the summary line formats them
// (master/run/run_summary.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/metrics.h"
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

}  // namespace shmtrain::master
