// What a training prints while it runs: the loss lines (LossLog) and the live line on a
// terminal (ProgressLine). Both are units of the run loop (master/run/run_loop.h) that only read
// the segment, through the round's view.
#pragma once

#include <cstdint>

#include "master/log/log.h"
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

// Progress, one line per epoch (Logger::Progress, ProgressDone). On a terminal, the live line:
// epoch x/N, step, loss, learning rate, samples/s, ETA and the latest validation, refreshed
// every 200 ms; at each epoch's end it stays as that epoch's line (samples/s and seconds since
// the line before) and a new one starts; at most one such line a second, epochs shorter than
// that folding into the next, and the last epoch's always. When stderr is not a terminal, only
// those lines, plain.
class ProgressLine final : public RunUnit {
 public:
  // steps_per_epoch: as the run's plan counts them; history: where the validations are.
  ProgressLine(Logger& log, int64_t first_step, int64_t total_steps, int64_t steps_per_epoch,
               int64_t t_start_ns, const monitoring::RunHistory& history, bool xent);
  Verdict Tick(const RunView& view) override;
  void Stop(RunEnd& end) override;

 private:
  // "epoch x/N  step s/T  loss L" and the rest of the live line (live: epoch is the epochs
  // done) or of the line that stays for the epochs after epoch_ up to `epoch`.
  std::string Text(const RunView& view, int64_t epoch, bool live) const;
  std::string LastValidation() const;

  Logger& log_;
  int64_t first_, total_, per_epoch_, t_start_;
  const monitoring::RunHistory& history_;
  bool xent_;
  int64_t next_ns_;
  int64_t epoch_;               // epochs done when the last line stayed (0-based: the live one)
  int64_t crossed_;             // epochs done at the last round
  int64_t epoch_ns_;             // when it stayed (or the run started)
  uint64_t epoch_samples_ = 0;   // samples done then
};

}  // namespace shmtrain::master
