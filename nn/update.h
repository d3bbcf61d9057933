// The asynchronous update rules (DC-ASGD family), as pure functions over the shared
// parameters. Sync mode's optimizers are in nn/optimizer.h.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "shmtrain/options.h"

namespace shmtrain::nn {

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
//
// The delay-compensated rules compute c = lambda * g^2 for a chunk at a time from this
// worker's private arrays, in a loop the compiler vectorises (the square root and division of
// dc-asgd-a included); the pass over the shared w is then one load, a few arithmetic
// operations on L1-resident chunk buffers, and one store per element, so memory traffic is
// that of a single fused pass, as for plain ASGD. The step is evaluated as written,
// g + c * (w - w_bak): the rewrite a + c * w with a = g - c * w_bak saves an operation but
// loses g whenever c * |w| dwarfs |g| (at lambda 1e30 a -O1 build applied no update at all,
// and an FMA build only rounding noise); as written, w = w_bak is exactly SGD for any lambda.
template <class Access>
void ApplyRule(const RuleParams& rp, int64_t n, float* w, const float* w_bak, const float* g,
               float* ms) {
  const float lr = static_cast<float>(rp.lr);
  if (rp.rule == AsyncRule::kAsgd) {
    for (int64_t i = 0; i < n; ++i) Access::Store(w + i, Access::Load(w + i) - lr * g[i]);
    return;
  }
  constexpr int64_t kChunk = 512;
  alignas(64) float c[kChunk];
  const float lambda0 = static_cast<float>(rp.lambda0);
  const float decay = static_cast<float>(rp.ms_decay);
  const float eps = static_cast<float>(rp.epsilon);
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t k = std::min(kChunk, n - i0);
    const float* gc = g + i0;
    const float* bc = w_bak + i0;
    if (rp.rule == AsyncRule::kDcAsgdA) {
      float* mc = ms + i0;
      for (int64_t j = 0; j < k; ++j) {
        const float g2 = gc[j] * gc[j];
        const float m = decay * mc[j] + (1 - decay) * g2;
        mc[j] = m;
        c[j] = lambda0 / std::sqrt(m + eps) * g2;
      }
    } else {
      for (int64_t j = 0; j < k; ++j) c[j] = lambda0 * gc[j] * gc[j];
    }
    float* wc = w + i0;
    for (int64_t j = 0; j < k; ++j) {
      const float wi = Access::Load(wc + j);
      Access::Store(wc + j, wi - lr * (gc[j] + c[j] * (wi - bc[j])));
    }
  }
}

}  // namespace shmtrain::nn
