// multistep, as torch.optim.lr_scheduler.MultiStepLR(milestones=[M1, M2, ...], gamma=G) stepped
// once per update:
//   lr_s = lr * G^(the number of milestones Mi <= s)
// (PyTorch's closed form, lr * G^bisect_right(milestones, s)). M1 < M2 < ... (--lr-milestones,
// update counts >= 1, at most kMaxMilestones) are required; G (--lr-gamma) defaults to
// PyTorch's 0.1. PyTorch's own example, lr 0.05 with milestones 30 and 80: 0.05 for s < 30,
// 0.005 for 30 <= s < 80, 0.0005 from s = 80 on. As with step, s counts from the end of the
// warmup, and a milestone at or beyond the run's end never comes (a run may be extended from its
// checkpoint to reach it).
#include <cmath>

#include "core/decimal.h"
#include "nn/schedule.h"

namespace shmtrain::nn {
namespace {

// The milestones of c: those before the first 0.
int MilestoneCount(const OptimConfig& c) {
  int n = 0;
  while (n < kMaxMilestones && c.milestones[n] != 0) ++n;
  return n;
}

}  // namespace

extern const ScheduleDef kMultiStep = {
    .id = 4,
    .name = "multistep",
    .summary = "lr*G^(the number of Mi <= s) (MultiStepLR)",
    .takes = {{"--lr-milestones", "multiply the rate by --lr-gamma at each of these steps", true,
               0},
              {"--lr-gamma", "the factor applied at each of the --lr-milestones", false, 0.1}},
    .spans_run = false,
    .rate = [](const OptimConfig& c, int64_t s) {
      int passed = 0;
      for (int i = 0; i < MilestoneCount(c); ++i) passed += c.milestones[i] <= s;
      return c.lr * std::pow(c.gamma, static_cast<double>(passed));
    },
    .describe = [](const OptimConfig& c) {
      std::string at;
      for (int i = 0; i < MilestoneCount(c); ++i) {
        at += (i == 0 ? "" : ", ") + std::to_string(c.milestones[i]);
      }
      return "multistep schedule (x" + ShortestDecimal(c.gamma) + " at " + at + ")";
    },
};

}  // namespace shmtrain::nn
