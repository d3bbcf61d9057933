// The run's curves, as the master saw them go by: what the live page (/api/run,
// monitoring/run_page.h) draws and the event file (--tensorboard) records.
//   train  the training losses the master printed (LossLog: every --log-every steps)
//   val    each validation: loss and accuracy (xent) or RMSE (mse)
//   rate   samples/s since the run's start, about once a second (RunWatch)
// A curve is the steps and one or two values per step, in the order they came.
//
// Threads: appended on the run loop's thread; read by the page's requests on the HTTP
// server's threads. One mutex, held for an append or a copy, never across anything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace shmtrain::monitoring {

struct Curve {
  std::vector<int64_t> step;
  std::vector<double> a;  // train: loss; val: loss; rate: samples/s
  std::vector<double> b;  // val: accuracy or RMSE; empty for the others
  size_t size() const { return step.size(); }
};

enum class CurveId { kTrain = 0, kVal = 1, kRate = 2 };

class RunHistory {
 public:
  void AddLoss(int64_t step, double loss) { Add(CurveId::kTrain, step, loss, nullptr); }
  void AddValidation(int64_t step, double loss, double metric) {
    Add(CurveId::kVal, step, loss, &metric);
  }
  void AddRate(int64_t step, double samples_per_s) {
    Add(CurveId::kRate, step, samples_per_s, nullptr);
  }
  // The points of a curve from index `from` on (the event file's cursor), all of them.
  Curve Since(CurveId id, size_t from) const;
  // At most max_points of a curve for drawing (max_points >= 2): every point when it has no
  // more; else evenly spaced ones, the first and the last always among them.
  Curve Thinned(CurveId id, size_t max_points) const;
  size_t size(CurveId id) const;

 private:
  void Add(CurveId id, int64_t step, double a, const double* b);
  mutable std::mutex mu_;
  Curve curves_[3];
};

}  // namespace shmtrain::monitoring
