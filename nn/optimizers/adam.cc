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

template <bool kDecoupled>
void Update(const double* hp, const UpdateArgs& a) {
  const double k = static_cast<double>(a.t + 1);
  const double bc1 = 1 - std::pow(hp[kBeta1], k);
  const double bc2 = 1 - std::pow(hp[kBeta2], k);
  const float step = static_cast<float>(a.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1 / std::sqrt(bc2));
  // 1 - beta in double, then rounded: as PyTorch passes it, and 1 - 0.999f would be 1.3e-5 off.
  const float b1 = static_cast<float>(hp[kBeta1]);
  const float b2 = static_cast<float>(hp[kBeta2]);
  const float c1 = static_cast<float>(1 - hp[kBeta1]);
  const float c2 = static_cast<float>(1 - hp[kBeta2]);
  const float eps = static_cast<float>(hp[kEps]);
  const float wd = static_cast<float>(a.weight_decay);
  const float decay = static_cast<float>(1 - a.lr * a.weight_decay);  // adamw
  const int64_t n = a.n;
  const float* __restrict w = a.w_in;
  const float* __restrict g = a.g;
  const float* __restrict m = a.s_in[0];
  const float* __restrict v = a.s_in[1];
  float* __restrict wo = a.w_out;
  float* __restrict mo = a.s_out[0];
  float* __restrict vo = a.s_out[1];
  for (int64_t i = 0; i < n; ++i) {
    const float gi = kDecoupled ? g[i] : g[i] + wd * w[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    mo[i] = mi;
    vo[i] = vi;
    const float wi = kDecoupled ? w[i] * decay : w[i];
    wo[i] = wi - step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

std::vector<HyperParam> Params() {
  return {{"--beta1", "B1", "adam/adamw: decay of the gradient's running mean, in [0, 1) (default 0.9)",
           0.9, 0, 1, false, true},
          {"--beta2", "B2",
           "adam/adamw: decay of the squared gradient's running mean, in [0, 1) (default 0.999)",
           0.999, 0, 1, false, true},
          {"--eps", "E", "adam/adamw: added to the denominator, > 0 (default 1e-8)", 1e-8, 0,
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
