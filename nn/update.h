// Update rules as pure functions over slices of the parameter vector.
//
// The sync reduction calls these on the slice each worker owns; tests call them directly.
#pragma once

#include <cstdint>

namespace shmtrain::nn {

// SGD with momentum (PyTorch's convention): v' = mu*v + g; w' = w - lr*v'. mu = 0 is plain
// SGD (v is then neither read nor written and may be null). g is the mean gradient, in double
// because it is the sum of P float gradients divided by the sample count. All arrays have n
// entries; w_out/v_out may not alias w_in/v_in (the segment double-buffers them).
void SgdMomentum(int64_t n, const float* w_in, const float* v_in, const double* g, double lr,
                 double mu, float* w_out, float* v_out);

}  // namespace shmtrain::nn
