// SGD with momentum and Nesterov momentum, as torch.optim.SGD (dampening 0):
//   g <- g + wd * w
//   momentum M > 0:  v <- M * v + g          (v starts at 0, so the first v is g)
//                    g <- g + M * v if nesterov, else g <- v
//   w <- w - lr_t * g
// State: v when M > 0 (K = 1), none otherwise (K = 0: plain SGD, also usable in async mode).
#include "nn/optimizer.h"

namespace shmtrain::nn {
namespace {

enum { kMomentum = 0, kNesterov = 1 };

int States(const double* hp) { return hp[kMomentum] > 0 ? 1 : 0; }

Status Check(const double* hp) {
  if (hp[kNesterov] != 0 && hp[kMomentum] == 0) {
    return Status::Usage(
        "--nesterov: needs --momentum M > 0 (Nesterov momentum without momentum is plain SGD)");
  }
  return Status::Ok();
}

// Arithmetic in float: one multiply-add per term, vectorised; the differences from double
// arithmetic are rounding, far below the 1e-5 the reference tests allow.
void Update(const double* hp, const UpdateArgs& a) {
  const int64_t n = a.n;
  const float* __restrict w = a.w_in;
  const float* __restrict g = a.g;
  float* __restrict wo = a.w_out;
  const float lr = static_cast<float>(a.lr);
  const float wd = static_cast<float>(a.weight_decay);
  const float mu = static_cast<float>(hp[kMomentum]);
  if (hp[kMomentum] == 0) {
    for (int64_t i = 0; i < n; ++i) wo[i] = w[i] - lr * (g[i] + wd * w[i]);
    return;
  }
  const float* __restrict v = a.s_in[0];
  float* __restrict vo = a.s_out[0];
  if (hp[kNesterov] != 0) {
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * w[i];
      const float vi = mu * v[i] + gi;
      vo[i] = vi;
      wo[i] = w[i] - lr * (gi + mu * vi);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float vi = mu * v[i] + (g[i] + wd * w[i]);
    vo[i] = vi;
    wo[i] = w[i] - lr * vi;
  }
}

}  // namespace

extern const OptimizerDef kSgd = {
    .id = 0,
    .name = "sgd",
    .summary =
        "SGD (torch.optim.SGD): v <- M*v + g; w <- w - lr*v (Nesterov: w <- w - lr*(g + M*v))",
    .params = {{"--momentum", "M", "momentum in [0, 1) (default 0: plain SGD)", 0, 0, 1, false,
                true},
               {"--nesterov", nullptr, "Nesterov momentum, needs --momentum > 0 (default off)", 0,
                0, 1, false, false}},
    .default_weight_decay = 0,
    .states = States,
    .check = Check,
    .update = Update,
};

}  // namespace shmtrain::nn
