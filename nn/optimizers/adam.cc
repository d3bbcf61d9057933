// Adam and AdamW, as torch.optim.Adam and torch.optim.AdamW (amsgrad off):
//   adam:   g <- g + wd * w
//   adamw:  w <- w * (1 - lr_t * wd)               (decoupled weight decay)
//   both:   m <- b1 * m + (1 - b1) * g;  v <- b2 * v + (1 - b2) * g^2   (m, v start at 0)
//           k = t + 1;  w <- w - (lr_t / (1 - b1^k)) * m / (sqrt(v) / sqrt(1 - b2^k) + eps)
// (PyTorch's arrangement: eps outside the square root, added after the bias correction of v.)
// State: m and v (K = 2). Not usable in async mode (nn/optimizer.cc says why).
#include <cmath>

#include "nn/optimizer.h"

namespace shmtrain::nn {
namespace {

enum { kBeta1 = 0, kBeta2 = 1, kEps = 2 };

int States(const double*) { return 2; }

// The element loop, on restrict-qualified parameters so that GCC vectorises it (8 lanes of
// sqrt and division: locals copied from a struct were not enough for it to prove the arrays
// apart).
void AdamLoop(int64_t n, const float* __restrict w, const float* __restrict g,
              const float* __restrict m, const float* __restrict v, float* __restrict wo,
              float* __restrict mo, float* __restrict vo, float b1, float c1, float b2, float c2,
              float eps, float step, float inv_sqrt_bc2, float wd, float decay) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * w[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    mo[i] = mi;
    vo[i] = vi;
    wo[i] = w[i] * decay - step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

// Adam adds the weight decay to the gradient (decay factor 1); AdamW shrinks the weights by
// 1 - lr * wd and leaves the gradient alone (wd 0 inside the loop).
template <bool kDecoupled>
void Update(const double* hp, const UpdateArgs& a) {
  const double k = static_cast<double>(a.t + 1);
  const double bc1 = 1 - std::pow(hp[kBeta1], k);
  const double bc2 = 1 - std::pow(hp[kBeta2], k);
  // 1 - beta in double, then rounded: as PyTorch passes it, and 1 - 0.999f would be 1.3e-5 off.
  AdamLoop(a.n, a.w_in, a.g, a.s_in[0], a.s_in[1], a.w_out, a.s_out[0], a.s_out[1],
           static_cast<float>(hp[kBeta1]), static_cast<float>(1 - hp[kBeta1]),
           static_cast<float>(hp[kBeta2]), static_cast<float>(1 - hp[kBeta2]),
           static_cast<float>(hp[kEps]), static_cast<float>(a.lr / bc1),
           static_cast<float>(1 / std::sqrt(bc2)),
           kDecoupled ? 0.0f : static_cast<float>(a.weight_decay),
           kDecoupled ? static_cast<float>(1 - a.lr * a.weight_decay) : 1.0f);
}

std::vector<HyperParam> Params() {
  return {{"--beta1", "B1", "decay of the gradient's running mean, in [0, 1) (default 0.9)",
           0.9, 0, 1, false, true},
          {"--beta2", "B2",
           "decay of the squared gradient's running mean, in [0, 1) (default 0.999)",
           0.999, 0, 1, false, true},
          {"--eps", "E", "added to the denominator, > 0 (default 1e-8)", 1e-8, 0,
           HUGE_VAL, true, true}};
}

}  // namespace

extern const OptimizerDef kAdam = {
    .id = 1,
    .name = "adam",
    .summary = "Adam (torch.optim.Adam): bias-corrected moments, eps outside the square root; "
               "weight decay added to the gradient",
    .params = Params(),
    .default_weight_decay = 0,
    .states = States,
    .check = nullptr,
    .update = Update<false>,
};

extern const OptimizerDef kAdamW = {
    .id = 2,
    .name = "adamw",
    .summary = "AdamW (torch.optim.AdamW): Adam with decoupled weight decay w <- w*(1 - lr*wd)",
    .params = Params(),
    .default_weight_decay = 0.01,
    .states = States,
    .check = nullptr,
    .update = Update<true>,
};

}  // namespace shmtrain::nn
