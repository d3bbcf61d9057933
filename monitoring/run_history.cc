#include "monitoring/run_history.h"

namespace shmtrain::monitoring {
namespace {

void CopyPoint(const Curve& c, size_t i, Curve* out) {
  out->step.push_back(c.step[i]);
  out->a.push_back(c.a[i]);
  if (!c.b.empty()) out->b.push_back(c.b[i]);
}

}  // namespace

void RunHistory::Add(CurveId id, int64_t step, double a, const double* b) {
  std::lock_guard<std::mutex> lock(mu_);
  Curve& c = curves_[static_cast<int>(id)];
  c.step.push_back(step);
  c.a.push_back(a);
  if (b != nullptr) c.b.push_back(*b);
}

Curve RunHistory::Since(CurveId id, size_t from) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Curve& c = curves_[static_cast<int>(id)];
  Curve out;
  for (size_t i = from; i < c.size(); ++i) CopyPoint(c, i, &out);
  return out;
}

Curve RunHistory::Thinned(CurveId id, size_t max_points) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Curve& c = curves_[static_cast<int>(id)];
  const size_t n = c.size();
  Curve out;
  if (n <= max_points || max_points < 2) {
    for (size_t i = 0; i < n; ++i) CopyPoint(c, i, &out);
    return out;
  }
  // Point k of max_points: index round(k * (n - 1) / (max_points - 1)), so 0 and n - 1 are in.
  for (size_t k = 0; k < max_points; ++k) {
    CopyPoint(c, (k * (n - 1) + (max_points - 1) / 2) / (max_points - 1), &out);
  }
  return out;
}

size_t RunHistory::size(CurveId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return curves_[static_cast<int>(id)].size();
}

}  // namespace shmtrain::monitoring
