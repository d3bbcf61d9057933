// Validation during training, off the supervisor's thread.
//
// The run loop hands over copies of the parameters (a sync snapshot, or an async read of W)
// and goes back to supervising; one thread evaluates them in the order given. The work is
// bounded by the size of the held-out set and involves nothing a worker holds, so waiting for
// it at the end of a run keeps the rule that the master never blocks on a worker. The mutex
// and condition variable are private to the master process (its run loop and this thread);
// nothing here is shared with a worker, so a worker's death cannot leave them held.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "nn/metrics.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

class Evaluator {
 public:
  struct Result {
    int64_t index = 0;  // eval index k
    int64_t step = 0;   // the parameters after this many steps (sync) / updates (async)
    nn::Metrics metrics;
    std::vector<float> params;
  };

  // What an evaluation computes: nn::Evaluate, or a test's stand-in.
  using EvaluateFn = std::function<nn::Metrics(const nn::ResolvedModel& model, const float* params,
                                               const data::Dataset& val)>;
  // model and val must outlive the evaluator.
  Evaluator(const nn::ResolvedModel& model, const data::Dataset& val,
            EvaluateFn evaluate = nullptr);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  void Submit(int64_t index, int64_t step, std::vector<float> params);
  // The evaluations finished since the last call, in submission order, into *done. Not ok
  // when an evaluation failed on the evaluator's thread (an exception there, out of memory,
  // is converted at once: docs/errors.md): the run loop ends the run for it.
  Status Take(std::vector<Result>* done);
  // Waits until every submitted evaluation is finished, then returns them like Take().
  Status Finish(std::vector<Result>* done);

 private:
  void Loop();
  const nn::ResolvedModel& model_;
  const data::Dataset& val_;
  EvaluateFn evaluate_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Result> todo_;
  std::vector<Result> done_;
  int busy_ = 0;
  bool quit_ = false;
  Status error_;  // the first evaluation that failed
  std::thread thread_;
};

// --early-stop: the best validation loss so far (strictly lower counts as better), the
// parameters that had it, and how many evaluations since. An evaluation that is not finite
// (nn::Metrics::finite) is never the best: it counts as one without improvement.
class EarlyStop {
 public:
  explicit EarlyStop(int64_t patience) : patience_(patience) {}
  // Records an evaluation; true once `patience` evaluations in a row brought no improvement
  // (never when patience is 0). The parameters are kept only when patience > 0. has_best() is
  // false until a finite evaluation comes.
  bool Observe(int64_t step, const nn::Metrics& m, std::vector<float> params);
  bool has_best() const { return step_ >= 0; }
  double loss() const { return metrics_.loss; }
  int64_t step() const { return step_; }
  const nn::Metrics& metrics() const { return metrics_; }
  const std::vector<float>& params() const { return params_; }

 private:
  int64_t patience_;
  int64_t since_ = 0;
  int64_t step_ = -1;
  nn::Metrics metrics_;
  std::vector<float> params_;
};

}  // namespace shmtrain::master
