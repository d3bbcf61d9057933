// constant: lr at every update after the warmup (the default).
#include "nn/schedule.h"

namespace shmtrain::nn {

extern const ScheduleDef kConstant = {
    .id = 0,
    .name = "constant",
    .summary = "lr",
    .takes = {},
    .spans_run = false,
    .rate = [](const OptimConfig& c, int64_t) { return c.lr; },
    .describe = [](const OptimConfig&) { return std::string(); },
};

}  // namespace shmtrain::nn
