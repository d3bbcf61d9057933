#include "master/run/divergence.h"

#include <cmath>
#include <string>
#include <vector>

#include "master/log/log.h"

namespace shmtrain::master {
namespace {

// Above it, the product of two values overflows float (2^64 squared is 2^128 > FLT_MAX).
constexpr double kSurvivable = 18446744073709551616.0;  // 2^64

// The index of v's largest magnitude (v is not empty).
size_t Largest(const std::vector<float>& v) {
  size_t at = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (std::fabs(v[i]) > std::fabs(v[at])) at = i;
  }
  return at;
}

}  // namespace

DivergenceCause::DivergenceCause(const TrainOptions& o, const Checkpoint& resumed)
    : options_hint_(o.DivergenceHint()) {
  if (o.resume_path.empty() || resumed.params.empty()) return;
  resume_path_ = o.resume_path;
  first_step_ = resumed.step;
  // Named as LoadCheckpoint names a value it refuses: a checkpoint holds no model spec.
  const std::string of = " of " + std::to_string(resumed.params.size());
  const size_t p = Largest(resumed.params);
  largest_ = std::fabs(resumed.params[p]);
  largest_at_ = "parameter " + std::to_string(p) + of + " is " + Fmt("%g", resumed.params[p]);
  const std::string optimizer = resumed.optimizer.substr(0, resumed.optimizer.find(' '));
  for (size_t k = 0; k < resumed.states.size(); ++k) {
    const std::vector<float>& s = resumed.states[k];
    const size_t i = Largest(s);
    if (std::fabs(s[i]) <= largest_) continue;
    largest_ = std::fabs(s[i]);
    largest_at_ = "optimizer state " + std::to_string(k) + " of " +
                  std::to_string(resumed.states.size()) + " (" + optimizer + "), entry " +
                  std::to_string(i) + of + ", is " + Fmt("%g", s[i]);
  }
}

std::string DivergenceCause::At(int64_t step) const {
  if (resume_path_.empty()) return options_hint_;
  const std::string instead = "; resume from another checkpoint, or train afresh";
  if (step == first_step_) {
    return "it is the first step after resuming from " + resume_path_ +
           ", so the state resumed from it is what went non-finite (its largest value: " +
           largest_at_ + ")" + instead;
  }
  if (largest_ > kSurvivable) {
    return "the state resumed from " + resume_path_ +
           " holds values beyond what float arithmetic on them survives (" + largest_at_ +
           "; the product of two values above 2^64 = 1.8e19 overflows float)" + instead;
  }
  return options_hint_;
}

}  // namespace shmtrain::master
