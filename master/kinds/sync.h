// Sync, on one host: every step every rank computes the gradient of its share of the global
// batch, and the gradients are summed across barriers in rank order and applied once
// (worker/sync_loop.h). The base of sync across hosts (sync_hosts.cc).
#pragma once

#include "master/kinds/kind.h"

namespace shmtrain::master {

class SyncKind : public RunKind {
 public:
  Mode mode() const override { return Mode::kSync; }
  const char* name() const override { return "sync"; }

  Status Plan(const TrainOptions& o, int64_t total, int64_t eval_every, Logger& log,
              HostPlan* plan) const override;
  int64_t WorkerBatchRows(int64_t batch, int world) const override;
  int CheckpointStates(const OptimConfig& optim) const override;
  int64_t WorkersEvalEvery(int64_t eval_every) const override { return eval_every; }
  const char* RuleLabel(const TrainOptions& o) const override;

  int64_t Progress(const shm::Segment& seg) const override;
  std::vector<float> ParamsAfter(const shm::Segment& seg, int64_t step) const override;
  void ResumeInto(const Checkpoint& c, shm::Segment* seg) const override;

  bool CheckpointDue(int64_t progress, int64_t next) const override;
  bool AllPausedBefore(const shm::Segment& seg, int64_t step) const override;
  Checkpoint CopyState(const shm::Segment& seg, int64_t step) const override;
  bool RanksWaitForEvals() const override { return true; }
  bool TakeSnapshot(const shm::Segment& seg, int64_t index, int64_t every,
                    EvalSnapshot* out) const override;
  EarlyStopEnd StopAfter(int64_t k, int64_t every, int64_t total) const override;
  std::unique_ptr<DeathRules> MakeDeathRules(const shm::Segment& seg, SegmentWrites& writes,
                                             monitoring::WorkerStats& stats) const override;

  const char* StepsWord() const override { return "steps"; }
  double UsPerStep(const RunSummary& s) const override;
  StepSplit SplitPerStep(const RunSummary& s) const override;
  void AddJson(const RunSummary& s, JsonLine* j) const override;
};

}  // namespace shmtrain::master
