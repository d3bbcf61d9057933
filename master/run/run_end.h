// The units at the end of RunTrain's list (master/run/run.h): the model a good end keeps and saves,
// and the summary line. Internal to the master.
#pragma once

#include <cstdint>

#include "master/log/log.h"
#include "master/files/output_write.h"
#include "master/run/divergence.h"
#include "master/run/run.h"
#include "master/run/run_loop.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

// The model a good end keeps (the last parameters, or those the validation kept): never one
// that is not finite, nor one whose outputs on the training rows are not, and saved with
// --save. Workers stop at the first non-finite loss or gradient; this guards what they cannot
// see (an update that overflowed at the very last step). Its loss over the training rows goes
// into the summary.
class FinalModel final : public RunUnit {
 public:
  FinalModel(const TrainOptions& o, const RunData& rd, const DivergenceCause& divergence,
             OutputReservation* reserved)
      : o_(o), rd_(rd), divergence_(divergence), reserved_(reserved) {}
  // The kept parameters checked, and their loss over the training rows.
  void Collect(RunEnd& end) override;
  // Written with --save, into the room reserved at the start.
  void Save(RunEnd& end) override;

 private:
  const TrainOptions& o_;
  const RunData& rd_;
  const DivergenceCause& divergence_;
  OutputReservation* reserved_;
};

// The summary line of a good end: what the run itself knows (mode, steps, wall time, the
// workers' counters) beside what the units before it put in (the kept model's loss over the
// training rows, restarts, validation, the cross-host combine).
class SummaryLine final : public RunUnit {
 public:
  SummaryLine(const TrainOptions& o, const RunKind& kind, int64_t first_step, int64_t rows,
              int64_t t_start_ns, Logger& log)
      : o_(o), kind_(kind), first_(first_step), rows_(rows), t_start_(t_start_ns), log_(log) {}
  void Report(RunEnd& end) override;

 private:
  const TrainOptions& o_;
  const RunKind& kind_;
  int64_t first_, rows_, t_start_;
  Logger& log_;
};

}  // namespace shmtrain::master
