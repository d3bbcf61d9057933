// A model of layers (nn/layer.h): an input shape, a sequence of layers and a loss, built once
// and run forward and backward over batches.
//
// The flat parameter vector is the concatenation of the layers' blocks in layer order. Losses
// are sums over the n samples, not means (nn/model.h); n = 0 is allowed. x holds n samples of the input shape in the data's order,
// (c, h, w) as PyTorch's NCHW writes a sample; the net turns it channels-last first when c > 1.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <new>

#include "nn/layer.h"

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

template <class S>
class Net {
 public:
  // spec must resolve (ResolveShapes): a spec that does not is a bug here (abort).
  explicit Net(const ModelSpec& spec);

  int64_t ParamCount() const { return param_count_; }
  int64_t Outputs() const { return outputs_; }
  const Layer<S>& layer(size_t i) const { return *layers_[i]; }
  size_t layers() const { return layers_.size(); }
  int64_t param_offset(size_t i) const { return offsets_[i]; }

  double LossSum(const S* params, const S* x, const S* y, int64_t n, const PassInfo& pass);
  double LossAndGrad(const S* params, const S* x, const S* y, int64_t n, const PassInfo& pass,
                     S* grad);
  // Outputs (outputs x n): probabilities for xent, the outputs for mse. No dropout.
  void Predict(const S* params, const S* x, int64_t n, S* out);

 private:
  const S* Forward(const S* params, const S* x, int64_t n, const PassInfo& pass);

  ModelSpec spec_;
  std::vector<std::unique_ptr<Layer<S>>> layers_;
  std::vector<int64_t> offsets_;  // each layer's first parameter
  int64_t param_count_ = 0;
  int64_t outputs_ = 0;
  bool reorder_input_ = false;  // c > 1 images: the input is turned channels-last
  AlignedVector<S> input_;
  std::vector<AlignedVector<S>> acts_;  // acts_[i]: layer i's output
  AlignedVector<S> delta_, delta_prev_;
};

}  // namespace shmtrain::nn
