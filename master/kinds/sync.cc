#include "master/kinds/sync.h"

#include <algorithm>
#include <cmath>

#include "master/kinds/step_state.h"

namespace shmtrain::master {
namespace {

// A sync rank's part is over when its phase word says it completed the run's last step: the
// run's, or the one an early stop ends it at (the eval step stop_eval x eval_every).
class SyncDeaths final : public DeathRules {
 public:
  explicit SyncDeaths(const shm::Segment& seg) : seg_(seg) {}
  bool FinishedItsPart(int r) const override {
    const shm::RunConfig& c = seg_.header()->config;
    const int64_t stop = shm::LoadAcquire(seg_.header()->stop_eval);
    const int64_t last = stop != shm::kNoStop && c.eval_every > 0
                             ? std::min(c.total_steps, stop * c.eval_every)
                             : c.total_steps;
    return shm::LoadPhase(*seg_.block(r)) == 2 * static_cast<uint64_t>(last);
  }
  // A replacement redoes the phase its block names: nothing to settle, nothing owed.
  Status AllFinished(std::vector<int>* owed) override {
    owed->clear();
    return Status::Ok();
  }

 private:
  const shm::Segment& seg_;
};

}  // namespace

Status SyncKind::Plan(const TrainOptions& o, int64_t total, int64_t eval_every, Logger& /*log*/,
                      HostPlan* plan) const {
  *plan = {.steps = total, .eval_every = eval_every, .checkpoint_every = o.checkpoint_every};
  return Status::Ok();
}

// Each rank computes ceil(batch / world) rows at most (data/batch_plan.h).
int64_t SyncKind::WorkerBatchRows(int64_t batch, int world) const {
  return (batch + world - 1) / world;
}

int SyncKind::CheckpointStates(const OptimConfig& optim) const {
  return static_cast<int>(optim.num_states);
}

const char* SyncKind::RuleLabel(const TrainOptions& /*o*/) const { return ""; }

// The lowest step every rank has completed: a rank's phase word is 2 x its steps done.
int64_t SyncKind::Progress(const shm::Segment& seg) const {
  const shm::RunConfig& c = seg.header()->config;
  uint64_t lo = UINT64_MAX;
  for (uint32_t r = 0; r < c.workers; ++r) lo = std::min(lo, shm::LoadPhase(*seg.block(r)));
  return static_cast<int64_t>(lo / 2);
}

std::vector<float> SyncKind::ParamsAfter(const shm::Segment& seg, int64_t step) const {
  const float* w = seg.params(step);
  return std::vector<float>(w, w + seg.header()->config.param_count);
}

// W and the optimizer state into the buffers of step c.step, and every rank's phase at its
// start; the version words stay 0 (sync does not use them).
void SyncKind::ResumeInto(const Checkpoint& c, shm::Segment* seg) const {
  RestoreStepState(c, c.step, seg);
  for (uint32_t r = 0; r < seg->header()->config.workers; ++r) {
    seg->mutable_block(static_cast<int>(r))->phase = 2 * static_cast<uint64_t>(c.step);
  }
  shm::Header* h = seg->mutable_header();
  h->param_version = 0;
  h->claimed = 0;
  h->released_step = c.step;
}

// The ranks pause exactly before the checkpoint's step, so progress stops on it.
bool SyncKind::CheckpointDue(int64_t progress, int64_t next) const { return progress == next; }

bool SyncKind::AllPausedBefore(const shm::Segment& seg, int64_t step) const {
  const uint64_t at = 2 * static_cast<uint64_t>(step);
  for (uint32_t r = 0; r < seg.header()->config.workers; ++r) {
    if (shm::LoadPhase(*seg.block(static_cast<int>(r))) != at) return false;
  }
  return true;
}

// W[step % 2] and the optimizer state of that step: no rank overwrites them while every rank
// is paused before it (or none runs).
Checkpoint SyncKind::CopyState(const shm::Segment& seg, int64_t step) const {
  return CopyStepState(seg, step);
}

// Every rank has copied W into evaluation index's snapshot once its snap_eval reaches it.
bool SyncKind::TakeSnapshot(const shm::Segment& seg, int64_t index, int64_t every,
                            EvalSnapshot* out) const {
  const shm::RunConfig& c = seg.header()->config;
  for (uint32_t r = 0; r < c.workers; ++r) {
    if (shm::LoadAcquire(seg.block(static_cast<int>(r))->snap_eval) < index) return false;
  }
  const float* e = seg.snapshot(index);
  out->step = index * every;
  out->params.assign(e, e + c.param_count);
  return true;
}

// The ranks run on to evaluation k + 2: those already past k's ack (the snapshot ring holds
// two) stop at the same step, so every rank ends on one step.
EarlyStopEnd SyncKind::StopAfter(int64_t k, int64_t every, int64_t total) const {
  return {k + 2, "at step " + std::to_string(std::min(total, (k + 2) * every))};
}

std::unique_ptr<DeathRules> SyncKind::MakeDeathRules(const shm::Segment& seg,
                                                     SegmentWrites& /*writes*/,
                                                     monitoring::WorkerStats& /*stats*/) const {
  return std::make_unique<SyncDeaths>(seg);
}

// Timed from the end of the first step to the end of the last, so the workers' start-up is
// not counted: NaN under 2 steps.
double SyncKind::UsPerStep(const RunSummary& s) const {
  const int64_t steps_run = std::max<int64_t>(s.end_step - s.first_step, 1);
  const int64_t s1 = s.step1_end_ns, sl = s.last_end_ns;
  return steps_run > 1 && s1 > 0 && sl >= s1 ? (sl - s1) / 1e3 / (steps_run - 1) : NAN;
}

StepSplit SyncKind::SplitPerStep(const RunSummary& s) const {
  StepSplit split;
  const int64_t steps_run = s.end_step - s.first_step;
  if (steps_run < 1 || s.workers < 1) return split;
  const double per = 1e-3 / static_cast<double>(steps_run) / s.workers;
  split.compute_us = static_cast<double>(s.compute_ns) * per;
  split.reduce_us = static_cast<double>(s.reduce_ns) * per;
  split.barrier_us = static_cast<double>(s.barrier_ns) * per;
  split.crossing_us = static_cast<double>(s.crossing_ns) * per;
  return split;
}

void SyncKind::AddJson(const RunSummary& s, JsonLine* j) const {
  const StepSplit p = SplitPerStep(s);
  j->Num("step_compute_us", p.compute_us)
      .Num("step_reduce_us", p.reduce_us)
      .Num("step_barrier_us", p.barrier_us)
      .Num("step_crossing_us", p.crossing_us);
}

}  // namespace shmtrain::master
