#include "nn/update.h"

namespace shmtrain::nn {

// Arithmetic is in double and only the stored results are rounded to float; the weight step
// uses the unrounded v'. mu == 0 is tested exactly: it selects plain SGD, where v_in/v_out
// may be null, rather than being a numerical special case.
void SgdMomentum(int64_t n, const float* w_in, const float* v_in, const double* g, double lr,
                 double mu, float* w_out, float* v_out) {
  if (mu == 0.0) {
    for (int64_t i = 0; i < n; ++i) {
      w_out[i] = static_cast<float>(static_cast<double>(w_in[i]) - lr * g[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = mu * static_cast<double>(v_in[i]) + g[i];
    v_out[i] = static_cast<float>(v);
    w_out[i] = static_cast<float>(static_cast<double>(w_in[i]) - lr * v);
  }
}

}  // namespace shmtrain::nn
