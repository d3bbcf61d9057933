// Async, on one host: workers never wait for each other; each claims an update ticket,
// computes a gradient on a possibly stale copy of W and applies it lock-free by its DC-ASGD
// rule, counted by the global version (worker/async_loop.h). The base of async across hosts
// (async_hosts.cc).
#pragma once

#include "master/kinds/kind.h"

namespace shmtrain::master {

class AsyncKind : public RunKind {
 public:
  Mode mode() const override { return Mode::kAsync; }
  const char* name() const override { return "async"; }

  std::span<const char* const> OwnFlags() const override;
  Status CheckOptions(const TrainOptions& o) const override;
  Status CheckHosts(const TrainOptions& o) const override;
  Status Plan(const TrainOptions& o, int64_t total, int64_t eval_every, Logger& log,
              HostPlan* plan) const override;
  int64_t WorkerBatchRows(int64_t batch, int world) const override;
  int CheckpointStates(const OptimConfig& optim) const override;
  int64_t WorkersEvalEvery(int64_t /*eval_every*/) const override { return 0; }
  const char* RuleLabel(const TrainOptions& o) const override;
  bool ReportsStaleness() const override { return true; }

  int64_t Progress(const shm::Segment& seg) const override;
  std::vector<float> ParamsAfter(const shm::Segment& seg, int64_t step) const override;
  void ResumeInto(const Checkpoint& c, shm::Segment* seg) const override;

  bool CheckpointDue(int64_t progress, int64_t next) const override;
  bool AllPausedBefore(const shm::Segment& seg, int64_t step) const override;
  Checkpoint CopyState(const shm::Segment& seg, int64_t step) const override;
  bool RanksWaitForEvals() const override { return false; }
  bool TakeSnapshot(const shm::Segment& seg, int64_t index, int64_t every,
                    EvalSnapshot* out) const override;
  EarlyStopEnd StopAfter(int64_t k, int64_t every, int64_t total) const override;
  std::unique_ptr<DeathRules> MakeDeathRules(const shm::Segment& seg, SegmentWrites& writes,
                                             monitoring::WorkerStats& stats) const override;

  const char* StepsWord() const override { return "updates"; }
  double UsPerStep(const RunSummary& s) const override;
  void AddText(const RunSummary& s, std::string* text) const override;
  void AddJson(const RunSummary& s, JsonLine* j) const override;
};

}  // namespace shmtrain::master
