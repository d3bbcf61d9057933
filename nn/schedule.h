// Learning-rate schedules: pure functions of the update index, so a redone sync phase, a
// resumed run and the master's progress line all see the same rate for the same step.
//
// t is the 0-based index of the update being applied; W = warmup_steps, T = total_steps.
//   t < W:  lr_t = lr * (t + 1) / W      (PyTorch: LinearLR(start_factor=1/W, total_iters=W-1))
//   else    s = t - W, S = T - W, and
//     constant     lr
//     step         lr * gamma^floor(s / step_every)                       (StepLR)
//     exponential  lr * gamma^s                                            (ExponentialLR)
//     cosine       lr_min + (lr - lr_min) * (1 + cos(pi * s / S)) / 2      (CosineAnnealingLR,
//                                                                          T_max = S)
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "shmtrain/optim_config.h"

namespace shmtrain::nn {

double LearningRate(const OptimConfig& c, int64_t t);

std::optional<Schedule> ParseSchedule(std::string_view s);
const char* ToString(Schedule s);

}  // namespace shmtrain::nn
