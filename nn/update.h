// Update rules as pure functions over slices of the parameter vector.
//
// The sync reduction calls these on the slice each worker owns; tests call them directly.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>

#include "shmtrain/options.h"

namespace shmtrain::nn {

// SGD with momentum (PyTorch's convention): v' = mu*v + g; w' = w - lr*v'. mu = 0 is plain
// SGD (v is then neither read nor written and may be null). g is the mean gradient, in double
// because it is the sum of P float gradients divided by the sample count. All arrays have n
// entries; w_out/v_out may not alias w_in/v_in (the segment double-buffers them).
void SgdMomentum(int64_t n, const float* w_in, const float* v_in, const double* g, double lr,
                 double mu, float* w_out, float* v_out);

// ---- Asynchronous rules (Zheng et al., ICML 2017, "Asynchronous SGD with Delay
// Compensation"). A worker read w_bak, computed the mean minibatch gradient g there, and
// applies it to the current w, which others have moved meanwhile:
//   asgd:       w <- w - lr * g
//   dc-asgd-c:  w <- w - lr * (g + lambda0 * g*g * (w - w_bak))
//   dc-asgd-a:  ms <- m*ms + (1-m)*g*g;  lambda = lambda0 / sqrt(ms + eps);
//               w <- w - lr * (g + lambda * g*g * (w - w_bak))
// element by element. ms (MeanSquare) belongs to the caller (each worker keeps its own).
struct RuleParams {
  AsyncRule rule = AsyncRule::kDcAsgdA;
  double lr = 0;
  double lambda0 = 2;    // dc-asgd-c: the constant lambda (paper: 0.04); -a: lambda0 (2)
  double ms_decay = 0.95;
  double epsilon = 1e-7;
};

// Plain memory: the simulator and the tests.
struct PlainAccess {
  static float Load(const float* p) { return *p; }
  static void Store(float* p, float v) { *p = v; }
};
// The shared parameter buffer of async mode, which other processes read and write at the same
// time: relaxed atomic loads and stores per element (a racy plain += would be undefined
// behaviour). Relaxed suffices: no other data is published through a parameter, and each
// element is one aligned 32-bit word, which cannot tear.
struct SharedAccess {
  static float Load(const float* p) {
    return std::atomic_ref<float>(*const_cast<float*>(p)).load(std::memory_order_relaxed);
  }
  static void Store(float* p, float v) {
    std::atomic_ref<float>(*p).store(v, std::memory_order_relaxed);
  }
};

// Applies one rule to n elements. ms is read and written only for kDcAsgdA.
template <class Access>
void ApplyRule(const RuleParams& rp, int64_t n, float* w, const float* w_bak, const float* g,
               float* ms) {
  const double lr = rp.lr;
  switch (rp.rule) {
    case AsyncRule::kAsgd:
      for (int64_t i = 0; i < n; ++i) {
        Access::Store(w + i, static_cast<float>(Access::Load(w + i) - lr * g[i]));
      }
      return;
    case AsyncRule::kDcAsgdC:
      for (int64_t i = 0; i < n; ++i) {
        const double wi = Access::Load(w + i);
        const double gi = g[i];
        const double step = gi + rp.lambda0 * gi * gi * (wi - w_bak[i]);
        Access::Store(w + i, static_cast<float>(wi - lr * step));
      }
      return;
    case AsyncRule::kDcAsgdA:
      for (int64_t i = 0; i < n; ++i) {
        const double gi = g[i];
        const double m = rp.ms_decay * ms[i] + (1 - rp.ms_decay) * gi * gi;
        ms[i] = static_cast<float>(m);
        const double lambda = rp.lambda0 / std::sqrt(m + rp.epsilon);
        const double wi = Access::Load(w + i);
        const double step = gi + lambda * gi * gi * (wi - w_bak[i]);
        Access::Store(w + i, static_cast<float>(wi - lr * step));
      }
      return;
  }
}

}  // namespace shmtrain::nn
