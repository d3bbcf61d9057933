// TrainingReport: tells `shmtrain launch` (master/log/report.h) that this host master trains,
// once its first step is done: the launcher's measure of a relaunch's end (from the loss of a
// host to training again). A unit of the run loop (master/run/run_loop.h) that only reads the
// round's progress; without a launcher the report goes nowhere.
#pragma once

#include <cstdint>

#include "master/log/log.h"
#include "master/unit/run_unit.h"

namespace shmtrain::master {

class TrainingReport final : public RunUnit {
 public:
  // first: the step the run starts at (its resumed checkpoint's, or 0).
  TrainingReport(Logger& log, int64_t first) : log_(log), first_(first) {}
  Verdict Tick(const RunView& view) override {
    if (!sent_ && view.progress > first_) {
      sent_ = true;
      log_.Report(JsonLine("training").Int("step", view.progress));
    }
    return Verdict::GoOn();
  }

 private:
  Logger& log_;
  int64_t first_;
  bool sent_ = false;
};

}  // namespace shmtrain::master
