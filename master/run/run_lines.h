// What a training prints while it runs: the loss lines (LossLog) and the live line on a
// terminal (ProgressLine). Both are units of the run loop (master/run/run_loop.h) that only read
// the segment, through the round's view.
#pragma once

#include <cstdint>

#include "master/cli/log.h"
#include "master/run/run_loop.h"
#include "monitoring/run_history.h"

namespace shmtrain::master {

// Prints the loss records published since the last round: sync, by rank 0 for every logged
// step; async, by whichever worker's update got a logged version number. A resumed run's
// first record is that of the first logged step at or after the step it resumed from. At a
// good end: the records still unread, then how many the workers overwrote before the master
// read them (the ring holds shm::kLossRing), said once.
class LossLog final : public RunUnit {
 public:
  // log_every: the segment's (RunConfig::log_every); first_step: the step the run starts from;
  // history: where each printed loss is also appended (null: nowhere).
  LossLog(Logger& log, int64_t log_every, int64_t first_step,
          monitoring::RunHistory* history = nullptr);
  Verdict Tick(const RunView& view) override;
  void Report(RunEnd& end) override;

 private:
  void Drain(const shm::Segment& seg);
  void ReportLost() const;

  Logger& log_;
  monitoring::RunHistory* history_;
  int64_t next_ = 0;
  int64_t lost_ = 0;
};

// The live line on a terminal: step, loss, learning rate, samples/s and ETA, refreshed every
// 200 ms; cleared when the run ends.
class ProgressLine final : public RunUnit {
 public:
  ProgressLine(Logger& log, int64_t first_step, int64_t total_steps, int64_t t_start_ns);
  Verdict Tick(const RunView& view) override;
  void Stop(RunEnd& end) override;

 private:
  Logger& log_;
  int64_t first_, total_, t_start_;
  int64_t next_ns_;
};

}  // namespace shmtrain::master
