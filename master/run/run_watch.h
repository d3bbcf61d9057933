// RunWatch: the run's curves for those who watch it (monitoring/run_history.h), and the
// TensorBoard event file (--tensorboard DIR, monitoring/tfevents.h). A unit of the run loop
// (master/run/run_loop.h) that only reads the segment.
//
// Each round, at most once a second, it appends samples/s over the last second to the history
// (and a last point at the end). With an event file,
// at most every kFlushMs it writes what the history gained since the last flush, and the
// run's state at that moment, then flushes: a TensorBoard pointed at DIR follows the run, and a
// run killed at any moment leaves whole records up to its last flush. Tags, at the run's step
// (sync) or update (async):
//   train/loss, train/learning_rate   every printed loss (--log-every), the rate of that step
//   train/samples_per_s               once a second
//   val/loss, val/accuracy|val/rmse   each validation
//   async/staleness_mean, async/dropped_updates   at each flush, async runs only
//   workers/restarts                  at each flush: workers replaced so far
//   hosts/relaunches                  a relaunched job (shmtrain/relaunch.h) only: once, the
//                                     relaunch's count at the step it continues from, buffered
//                                     by the start (master/run/start.cc) before this unit runs
// At the end (Report, after every unit that still adds a point), the last points and a flush;
// a run that failed before any scalar was written removes its file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "master/log/log.h"
#include "master/run/run_loop.h"
#include "monitoring/run_stats.h"
#include "monitoring/tfevents.h"

namespace shmtrain::master {

class RunWatch final : public RunUnit {
 public:
  // kind: the run's (its progress, and whether its workers record staleness). file: the
  // run's event file, or null (no --tensorboard, or a host other than host 0).
  RunWatch(const RunKind& kind, monitoring::RunStats& stats,
           std::unique_ptr<monitoring::EventFile> file, int64_t t_start_ns, bool xent,
           Logger& log);
  Verdict Tick(const RunView& view) override;
  void Report(RunEnd& end) override;

 private:
  void AddRate(const shm::Segment& seg, int64_t progress, int64_t now_ns);
  void Write(const shm::Segment& seg, int64_t progress);
  void Flush();

  const RunKind& kind_;
  monitoring::RunStats& stats_;
  std::unique_ptr<monitoring::EventFile> file_;
  int64_t next_rate_ns_, next_flush_ns_;
  int64_t rate_step_ = -1, rate_ns_ = 0;  // the last samples/s point: its step and time
  uint64_t rate_samples_ = 0;             // and the samples done then
  bool xent_;
  Logger& log_;
  size_t sent_[3] = {};      // points of each curve written to the file
  int64_t scalars_ = 0;      // scalars written
  bool failed_ = false;      // a write failed: said once, no more writes
};

}  // namespace shmtrain::master
