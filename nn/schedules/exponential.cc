// exponential, as torch.optim.lr_scheduler.ExponentialLR(gamma=G):
//   lr_s = lr * G^s
// G (--lr-gamma) is required: PyTorch has no default for it either.
#include <cmath>

#include "core/decimal.h"
#include "nn/schedule.h"

namespace shmtrain::nn {

extern const ScheduleDef kExponential = {
    .id = 3,
    .name = "exponential",
    .summary = "lr*G^s (ExponentialLR)",
    .takes = {{"--lr-gamma", "the factor applied every step", true, 0}},
    .spans_run = false,
    .rate = [](const OptimConfig& c, int64_t s) {
      return c.lr * std::pow(c.gamma, static_cast<double>(s));
    },
    .describe = [](const OptimConfig& c) {
      return "exponential schedule (x" + ShortestDecimal(c.gamma) + " per step)";
    },
};

}  // namespace shmtrain::nn
