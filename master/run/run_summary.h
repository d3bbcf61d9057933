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

#include "master/log/log.h"
#include "master/kinds/kind.h"
#include "master/unit/run_figures.h"
#include "nn/metrics.h"
#include "shm/segment.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

// Sync: the mean per worker and step of each phase (the kind's SplitPerStep).
StepSplit SplitPerStep(const KindReport& kind, const RunSummary& s);

// Fills the workers' counters of *s from the segment. Once no worker runs.
void ReadWorkerCounters(const shm::Segment& seg, RunSummary* s);

// Microseconds per step, as the run's kind times them (KindReport::UsPerStep). Sync: between
// the ends of the run's first and last steps (NaN for fewer than two steps), which leaves the
// workers' start out. Async: the wall time over the updates applied.
double UsPerStep(const KindReport& kind, const RunSummary& s);
// "812.50 us/step", or why there is no such time (a one-step sync run): never "nan".
std::string UsPerStepText(const KindReport& kind, const RunSummary& s);

// Sync: `time per step and worker: compute 812 us (84%), reduce+update 66 us (7%), barrier
// wait 90 us (9%)`: what limits scaling. Empty for async runs.
std::string SplitText(const KindReport& kind, const RunSummary& s);
// `done: 2000 steps, final loss ...`
std::string SummaryText(const RunKind& kind, const RunSummary& s);
// {"event":"summary","steps":...}
JsonLine SummaryJson(const RunKind& kind, const RunSummary& s);
// The summary line in the logger's format.
void LogSummary(const RunKind& kind, const RunSummary& s, Logger& log);

}  // namespace shmtrain::master
