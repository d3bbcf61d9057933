// The validation protocol of a training run, master side: which parameters are evaluated and
// when, the acks that let sync ranks reuse a snapshot, early stopping, and the model kept.
// The evaluations themselves run on master/run/evaluator.h's thread.
//
// Contract (docs/design.md, "Validation snapshots"):
//  - Sync. Before step t = k * eval_every, every rank copies its slice of W[t%2] into the
//    snapshot ring and publishes snap_eval = k. Poll() copies snapshot k out once every rank
//    has published it, hands the copy to the evaluator and acks k (shm::AckEval), so that
//    ranks may reuse its buffer. Without --early-stop the ack follows the copy at once. With
//    it (a ring of 2) snapshot k is acked only once it is evaluated, and when eval k decides
//    to stop, stop_eval = k + 2 is stored (shm::RequestStop) before that ack: no rank passes
//    the stop check of eval k + 2 before the master has decided on eval k, so the run stops
//    right before step (k + 2) * eval_every in every run.
//  - Async. Poll() copies W (the kind's TakeSnapshot) once its progress has reached the next
//    evaluation step; an early stop is stop_eval = 0, and the workers stop at their next
//    update.
//  - Every result is logged (`validation at step ...`, JSON `validation`) and published to
//    the metrics (ValidationStats::Set) in evaluation order.
//  - FinalEvaluation(): the outstanding evaluations, then the final parameters' one; with
//    --early-stop the parameters kept are the evaluated ones with the lowest validation loss.
//  - An evaluation that is not finite (outputs NaN or infinite on some held-out rows) is logged
//    with a warning naming the rows and is never the best (EarlyStop); a run whose kept model
//    has no finite validation loss ends kDiverged, so that no such model is saved.
//  - The protocol owns eval_ack and stop_eval in the segment header; it sets eval_ack for the
//    run's first step when it is constructed, before any worker starts.
//
// A unit of the run loop (master/run/run_loop.h): each round polls; a good end makes the final
// evaluation, keeps the parameters it names and puts the metrics into the summary.
//
// Threads: the run loop's only (the evaluator's thread sees copies, never the segment). The
// master never blocks on a worker here: Poll() only reads published words.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "master/log/log.h"
#include "master/run/evaluator.h"
#include "master/run/run_loop.h"
#include "master/unit/segment_writes.h"
#include "monitoring/run_stats.h"
#include "nn/layer.h"
#include "nn/metrics.h"
#include "shm/segment.h"
#include "shmtrain/model_spec.h"

namespace shmtrain::master {

class EvalRules;

struct ValidationPlan {
  int64_t eval_every = 0;       // steps (async: updates) between evaluations; 0 = none
  int64_t early_stop = 0;       // --early-stop patience; 0 = no early stopping
  int64_t first_step = 0;       // the step the run starts from
  int64_t total_steps = 0;      // the run's last step
  int64_t steps_per_epoch = 1;  // for the epoch the log lines name
  int64_t t_start_ns = 0;       // the run's start (MonotonicNs), for the events' elapsed_s
};

class ValidationProtocol final : public RunUnit {
 public:
  // rules (the run's kind's, master/kinds/kind.h), model, val, seg, log and stats (the
  // validation's part of the run's metrics) must outlive the protocol. The workers and the
  // parameter count are read from seg's header.
  ValidationProtocol(const EvalRules& rules, const ValidationPlan& plan,
                     const nn::ResolvedModel& model, const data::Dataset& val,
                     const shm::Segment& seg, SegmentWrites& writes, Logger& log,
                     monitoring::ValidationStats& stats);
  ValidationProtocol(const ValidationProtocol&) = delete;
  ValidationProtocol& operator=(const ValidationProtocol&) = delete;

  // Sync ranks may be waiting for a snapshot's ack: the supervisor should look every
  // millisecond (with early stopping: while an evaluation is out).
  bool wants_fast_poll() const;
  int PollMs() const override { return wants_fast_poll() ? 1 : kPollMs; }
  Verdict Tick(const RunView& view) override;
  void Collect(RunEnd& end) override;
  // Copies out the snapshots ready, hands them to the evaluator, and handles the results
  // back since the last call (logs, early stop, acks). Not ok when an evaluation failed.
  Status Poll();
  // An early stop has been asked of the workers.
  bool stop_requested() const { return stop_requested_; }

  // Once every worker has ended at end_step, with *params the parameters after it: waits for
  // the outstanding evaluations, evaluates *params on the held-out set (logged as an
  // evaluation when validating) and, with --early-stop, replaces *params by the best
  // evaluated ones. The validation metrics of the parameters left in *params into *out; not
  // ok when an outstanding evaluation failed, and kDiverged when those metrics are not finite.
  Status FinalEvaluation(int64_t end_step, std::vector<float>* params, nn::Metrics* out);
  // With --early-stop, after FinalEvaluation(): the step of the parameters kept.
  int64_t best_step() const { return best_.step(); }

 private:
  void SnapshotsToEvaluator();
  void HandleResults(std::vector<Evaluator::Result> results);
  void RequestEarlyStop(int64_t k);
  void LogValidation(int64_t step, const nn::Metrics& m, int64_t taken_ns);

  // step -> MonotonicNs() when its parameters were taken for evaluation.
  std::map<int64_t, int64_t> taken_ns_;

  ValidationPlan plan_;
  const nn::ResolvedModel& model_;
  const data::Dataset& val_;
  const shm::Segment& seg_;
  SegmentWrites& writes_;
  Logger& log_;
  monitoring::ValidationStats& stats_;
  const EvalRules& kind_;                 // the run's kind's (master/kinds/kind.h)
  std::unique_ptr<Evaluator> evaluator_;  // null without validation
  // Sync with --early-stop: snapshots are acked once evaluated, not once copied.
  bool ack_after_eval_;
  int64_t next_eval_;  // index of the next snapshot to copy out
  int64_t acked_;      // the last index acked
  EarlyStop best_;
  bool stop_requested_ = false;
  int64_t stop_eval_ = INT64_MAX;  // after an early stop: the last evaluation to take
};

}  // namespace shmtrain::master
