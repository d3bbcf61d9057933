// step, as torch.optim.lr_scheduler.StepLR(step_size=N, gamma=G):
//   lr_s = lr * G^floor(s / N)
// N (--lr-step-every) is required; G (--lr-gamma) defaults to PyTorch's 0.1.
#include <cmath>

#include "core/decimal.h"
#include "nn/schedule.h"

namespace shmtrain::nn {

extern const ScheduleDef kStep = {
    .id = 1,
    .name = "step",
    .summary = "lr*G^floor(s/N) (StepLR)",
    .takes = {{"--lr-step-every", "multiply the rate by --lr-gamma every N steps", true, 0},
              {"--lr-gamma", "the factor applied every --lr-step-every steps", false, 0.1}},
    .spans_run = false,
    .rate = [](const OptimConfig& c, int64_t s) {
      return c.lr * std::pow(c.gamma, static_cast<double>(s / c.step_every));
    },
    .describe = [](const OptimConfig& c) {
      return "step schedule (x" + ShortestDecimal(c.gamma) + " every " +
             std::to_string(c.step_every) + ")";
    },
};

}  // namespace shmtrain::nn
