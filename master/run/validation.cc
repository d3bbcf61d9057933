#include "master/run/validation.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "master/kinds/kind.h"
#include "master/run/segment_reads.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shmtrain/options.h"

namespace shmtrain::master {
namespace {

// What is not finite in an evaluation that is not: "gives outputs that are not finite (NaN or
// infinite) in rows 1 and 3 (0-based) of the held-out rows".
std::string NonFiniteText(const nn::Metrics& m) {
  if (m.nonfinite.empty()) return "gives a validation loss that is not finite";
  return "gives outputs that are not finite (NaN or infinite) in " + m.nonfinite.Text() +
         " of the held-out rows";
}

}  // namespace

ValidationProtocol::ValidationProtocol(const EvalRules& rules, const ValidationPlan& plan,
                                       const nn::ResolvedModel& model, const data::Dataset& val,
                                       const shm::Segment& seg,
                                       SegmentWrites& writes, Logger& log,
                                       monitoring::ValidationStats& stats)
    : plan_(plan),
      model_(model),
      val_(val),
      seg_(seg),
      writes_(writes),
      log_(log),
      stats_(stats),
      kind_(rules),
      ack_after_eval_(kind_.RanksWaitForEvals() && plan.early_stop > 0),
      next_eval_(plan.first_step / std::max<int64_t>(plan.eval_every, 1) + 1),
      acked_(plan.first_step / std::max<int64_t>(plan.eval_every, 1)),
      best_(plan.early_stop) {
  if (plan_.eval_every <= 0) return;
  evaluator_ = std::make_unique<Evaluator>(model_, val_);
  writes_.SetFirstEvalAck(plan_.first_step / plan_.eval_every);
}

bool ValidationProtocol::wants_fast_poll() const {
  return plan_.eval_every > 0 && kind_.RanksWaitForEvals() &&
         (!ack_after_eval_ || acked_ < next_eval_ - 1);
}

Verdict ValidationProtocol::Tick(const RunView& /*view*/) { return Verdict::EndIf(Poll()); }

void ValidationProtocol::Collect(RunEnd& end) {
  if (!end.status.ok()) return;
  RunSummary& s = end.summary;
  // May stop early, too.
  if (Status f = FinalEvaluation(end.end_step, &end.params, &s.val); !f.ok()) {
    end.status = std::move(f);
    return;
  }
  s.early_stop = plan_.early_stop > 0;
  s.stopped_early = stop_requested_;
  s.best_step = s.early_stop ? best_.step() : -1;
  s.val_rows = val_.rows;
  s.classification = model_.spec.loss == Loss::kXent;
}

Status ValidationProtocol::Poll() {
  if (!evaluator_) return Status::Ok();
  SnapshotsToEvaluator();
  std::vector<Evaluator::Result> done;
  if (Status s = evaluator_->Take(&done); !s.ok()) return s;
  HandleResults(std::move(done));
  return Status::Ok();
}

// After an early stop, only the evaluations up to the one the workers stop at (sync: those
// may still find a better model; async: none).
void ValidationProtocol::SnapshotsToEvaluator() {
  const int64_t every = plan_.eval_every, total = plan_.total_steps;
  while (next_eval_ <= stop_eval_ && next_eval_ * every < total) {
    EvalSnapshot snap;
    if (!kind_.TakeSnapshot(seg_, next_eval_, every, &snap)) return;
    if (kind_.RanksWaitForEvals() && !ack_after_eval_) writes_.AckEval(next_eval_);
    // The run may have reached its end meanwhile (async): the final evaluation covers that.
    if (snap.step < total) {
      taken_ns_[snap.step] = shm::MonotonicNs();
      evaluator_->Submit(next_eval_, snap.step, std::move(snap.params));
    }
    next_eval_ = snap.step / every + 1;
  }
}

void ValidationProtocol::HandleResults(std::vector<Evaluator::Result> results) {
  for (Evaluator::Result& r : results) {
    const auto taken = taken_ns_.find(r.step);
    LogValidation(r.step, r.metrics, taken != taken_ns_.end() ? taken->second : shm::MonotonicNs());
    if (taken != taken_ns_.end()) taken_ns_.erase(taken);
    if (best_.Observe(r.step, r.metrics, std::move(r.params)) && !stop_requested_) {
      RequestEarlyStop(r.index);
    }
    if (ack_after_eval_) {
      writes_.AckEval(r.index);  // after any stop it decided on (RequestStop)
      acked_ = r.index;
    }
  }
}

void ValidationProtocol::RequestEarlyStop(int64_t k) {
  stop_requested_ = true;
  const EarlyStopEnd end = kind_.StopAfter(k, plan_.eval_every, plan_.total_steps);
  stop_eval_ = end.stop_eval;
  writes_.RequestStop(end.stop_eval);
  // Sync ranks still run to the eval step k + 2 (and async ones finish their updates), and
  // those evaluations may still find a better model: the line says "so far", and the end of
  // the run names the model kept.
  const std::string& until = end.until;
  const std::string best = best_.has_best() ? "best so far " + Fmt("%.6g", best_.loss()) +
                                                  " at step " + std::to_string(best_.step())
                                            : "none was finite";
  log_.Info("early stop: no better validation loss in " + std::to_string(plan_.early_stop) +
                " evaluations (" + best + "); training stops " + until,
            JsonLine("early_stop")
                .Int("best_step", best_.step())
                .Num("best_val_loss", best_.has_best() ? best_.loss() : NAN));  // none: -1 and null
}

// taken_ns: when the evaluated parameters were taken from the segment; the event's elapsed_s
// counts from the run's start to then (time-to-accuracy, bench/fashion_bench.cc), not to the
// end of the evaluation, which runs beside the training.
void ValidationProtocol::LogValidation(int64_t step, const nn::Metrics& m, int64_t taken_ns) {
  const bool xent = model_.spec.loss == Loss::kXent;
  const int64_t per_epoch = plan_.steps_per_epoch;
  const double epoch = static_cast<double>(step) / per_epoch;
  const std::string epoch_text =
      step % per_epoch == 0 ? std::to_string(step / per_epoch) : Fmt("%.2f", epoch);
  // The gauges first: a reader of the log line finds them already set.
  stats_.Set(step, m.loss, xent ? m.accuracy : m.rmse);
  JsonLine j("validation");
  j.Int("step", step).Num("epoch", epoch).Num("val_loss", m.loss);
  xent ? j.Num("val_accuracy", m.accuracy) : j.Num("val_rmse", m.rmse);
  j.Num("elapsed_s", (taken_ns - plan_.t_start_ns) / 1e9);
  log_.Line("validation at step " + std::to_string(step) + " (epoch " + epoch_text +
                "): val loss " + Fmt("%.6g", m.loss) +
                (xent ? ", val accuracy " + Fmt("%.4f", m.accuracy)
                      : ", val rmse " + Fmt("%.6g", m.rmse)),
            j);
  if (m.finite()) return;
  std::vector<uint64_t> first(m.nonfinite.first.begin(), m.nonfinite.first.end());
  log_.Info("warning: the model of step " + std::to_string(step) + " " + NonFiniteText(m) +
                ": it is never the model a run keeps",
            JsonLine("validation_nonfinite")
                .Int("step", step)
                .Int("rows", m.nonfinite.count)
                .Ints("first_rows", first));
}

Status ValidationProtocol::FinalEvaluation(int64_t end_step, std::vector<float>* params,
                                           nn::Metrics* out) {
  const int64_t end_ns = shm::MonotonicNs();
  if (evaluator_) {
    std::vector<Evaluator::Result> done;
    if (Status s = evaluator_->Finish(&done); !s.ok()) return s;
    HandleResults(std::move(done));
  }
  nn::Metrics& m = *out;
  m = nn::Evaluate(model_, params->data(), val_.x.data(), val_.y.data(), val_.rows);
  if (!evaluator_) return Status::Ok();
  LogValidation(end_step, m, end_ns);
  best_.Observe(end_step, m, {});
  // With --early-stop the model kept is the one with the best validation loss.
  if (plan_.early_stop > 0 && best_.has_best() && best_.step() != end_step) {
    *params = best_.params();
    m = best_.metrics();
  }
  if (!m.finite()) {
    return Status::Diverged(std::string("validation: ") +
                            (plan_.early_stop > 0 ? "no evaluated model had a finite validation "
                                                    "loss, and "
                                                  : "") +
                            "the model after step " + std::to_string(end_step) + " " +
                            NonFiniteText(m) + "; no model was saved");
  }
  if (stop_requested_) {
    log_.Info("early stop: keeping the model of step " + std::to_string(best_.step()) +
                  " (val loss " + Fmt("%.6g", best_.loss()) + "), the best evaluated",
              JsonLine("early_stop_model")
                  .Int("best_step", best_.step())
                  .Num("best_val_loss", best_.loss()));
  }
  return Status::Ok();
}

}  // namespace shmtrain::master
