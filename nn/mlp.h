// Pure maths of a dense MLP on Eigen: forward, loss, backward, initialisation.
//
// No shared memory, no processes: every function reads its inputs and writes its outputs
// through plain pointers, so the same code serves the workers, the master, the simulator and
// the tests. Templated on the scalar: float is what training uses, double is what the
// finite-difference tests use. Eigen runs single-threaded (one core per worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "shmtrain/model_spec.h"

namespace shmtrain::nn {

// 64-byte aligned storage. Eigen's vectorised kernels treat an unaligned head apart, so the
// same sums over buffers at other addresses can round differently; aligned scratch makes the
// results independent of where the allocator put them (determinism, redoable phases).
template <class T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
};
template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

// Scratch buffers reused across calls so the hot loop does not allocate. One per thread.
template <class S>
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Internal: per-layer activations and deltas, resized on demand.
  std::vector<AlignedVector<S>> acts;
  std::vector<AlignedVector<S>> deltas;
};

// x: n samples, row-major n x inputs (sample i at x + i*inputs), which is the column-major
// inputs x n matrix Eigen wants. y: n targets. For mse the target of sample i is y[i] (the
// model has one output). For xent y[i] is the class index 0..outputs-1 stored as a float
// (the loader guarantees an integer in range).
//
// Per-sample loss: mse = sum over outputs of (yhat - y)^2; xent = -log softmax(yhat)[y].
// Both functions return the SUM over the n samples of the per-sample loss (not the mean), and
// LossAndGrad writes the gradient of that sum into grad (ParamCount() entries, overwritten).
// Callers divide by the total sample count: summing first makes P shares add up exactly to
// the full batch. n = 0 is allowed: loss 0, grad all zero.
template <class S>
double LossSum(const ModelSpec& spec, const S* params, const S* x, const S* y, int64_t n,
               Workspace<S>& ws);

template <class S>
double LossAndGrad(const ModelSpec& spec, const S* params, const S* x, const S* y, int64_t n,
                   S* grad, Workspace<S>& ws);

// Raw outputs (n x outputs, row-major: sample i at out + i*outputs); for xent these are
// the softmax probabilities, for mse the linear outputs.
template <class S>
void Predict(const ModelSpec& spec, const S* params, const S* x, int64_t n, S* out,
             Workspace<S>& ws);

// Fills params (ParamCount() entries) deterministically from seed, on every platform:
//  kNormal: every weight and bias ~ N(0, 1) (tf.random_normal's default);
//  kXavier: W ~ N(0, 2 / (in + out)), b = 0;   kHe: W ~ N(0, 2 / in), b = 0.
//  kTorch: W and b ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's nn.Linear default; keeps tanh
//          units out of saturation for any fan-in, which N(0, 1) does not).
// Draws come from nn::Rng (rng.h) in parameter-vector order.
void InitParams(const ModelSpec& spec, Init init, uint64_t seed, float* params);

}  // namespace shmtrain::nn
