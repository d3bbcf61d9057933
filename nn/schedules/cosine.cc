// cosine, as torch.optim.lr_scheduler.CosineAnnealingLR(T_max=S, eta_min=X) over the S =
// T - W updates after the warmup:
//   lr_s = X + (lr - X) * (1 + cos(pi * s / S)) / 2
// from lr towards X (--lr-min, default 0): the last update, s = S - 1, is one step short of X.
// The rate depends on the run's length T.
#include <cmath>
#include <numbers>

#include "core/decimal.h"
#include "nn/schedule.h"

namespace shmtrain::nn {

extern const ScheduleDef kCosine = {
    .id = 2,
    .name = "cosine",
    .summary = "X + (lr-X)*(1+cos(pi*s/S))/2 (CosineAnnealingLR, T_max = S)",
    .takes = {{"--lr-min", "the rate at the end", false, 0}},
    .spans_run = true,
    .rate = [](const OptimConfig& c, int64_t s) {
      const int64_t span = c.total_steps - c.warmup_steps;
      const double phase = span > 0 ? static_cast<double>(s) / static_cast<double>(span) : 0.0;
      return c.lr_min + (c.lr - c.lr_min) * (1 + std::cos(std::numbers::pi * phase)) / 2;
    },
    .describe = [](const OptimConfig& c) {
      return "cosine schedule to " + ShortestDecimal(c.lr_min) + " over " +
             std::to_string(c.total_steps) + " steps";
    },
};

}  // namespace shmtrain::nn
