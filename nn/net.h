// A model of layers (nn/layer.h): an input shape, a sequence of layers and a loss, built once
// and run forward and backward over batches.
//
// The flat parameter vector is the concatenation of the layers' blocks in layer order. Losses
// are sums over the n samples, not means (nn/model.h); n = 0 is allowed. x holds n samples of the
// input shape in the data's order, (c, h, w) as PyTorch's NCHW writes a sample; the net turns it
// channels-last first when c > 1.
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

// What a Net of a spec holds for each sample of a pass, besides its layers' scratch
// (LayerType::scratch): the net sizes its buffers from this plan, and PassBytes adds it up.
struct NetPlan {
  explicit NetPlan(const ModelSpec& spec);  // spec must resolve (abort otherwise)
  // The plan of spec whose shapes (ResolveShapes') are known.
  NetPlan(const ModelSpec& spec, std::vector<Shape> shapes);
  std::vector<Shape> shapes;                // each layer's output
  // Images of c > 1 are turned channels-last into a buffer of the input's size first.
  bool reorder_input = false;
  int64_t delta = 0;  // each of the backward pass's two deltas: the largest layer input but
                      // the first, or the outputs
  // The first layer with parameters (the layer count if none): the backward pass stops there,
  // and computes no gradient of its input, as nothing below it has a parameter to learn
  // (`flatten,linear(...)`: the linear layer's input gradient would be a third of its
  // backward pass, thrown away).
  size_t first_params = 0;
};

// The bytes a Net<S> of `spec` (S of `scalar` bytes) holds after passes over up to n samples:
// forward only (Predict, LossSum), or forward and backward (LossAndGrad, backward = true). Its
// buffers and its layers' scratch, from the plan they are allocated by, so the figure the
// master checks against the memory before a worker starts (data/pipeline.h) is what the workers
// and the evaluator allocate (Eigen's own blocking buffers, bounded by the caches, aside).
// Saturates at UINT64_MAX; 0 for a spec that does not resolve.
uint64_t PassBytes(const ModelSpec& spec, int64_t n, bool backward, size_t scalar = sizeof(float));
// The same of a model resolved already (its shapes are not resolved again).
uint64_t PassBytes(const ResolvedModel& model, int64_t n, bool backward,
                   size_t scalar = sizeof(float));

template <class S>
class Net {
 public:
  // spec must resolve (ResolveShapes): a spec that does not is a bug here (abort).
  explicit Net(const ModelSpec& spec);
  // The net of a model resolved once (nn/layer.h): its shapes are not resolved again.
  explicit Net(const ResolvedModel& model);
  // The net of spec whose shapes (ResolveShapes') are known: they are not resolved again.
  Net(const ModelSpec& spec, std::vector<Shape> shapes);

  int64_t ParamCount() const { return param_count_; }
  int64_t Outputs() const { return outputs_; }
  const Layer<S>& layer(size_t i) const { return *layers_[i]; }
  size_t layers() const { return layers_.size(); }
  int64_t param_offset(size_t i) const { return offsets_[i]; }
  // Whether LossAndGrad runs layer i's backward pass, and whether it asks it for the gradient
  // of its input (NetPlan::first_params).
  bool RunsBackward(size_t i) const { return i >= plan_.first_params; }
  bool NeedsInputGradient(size_t i) const { return i > plan_.first_params; }

  double LossSum(const S* params, const S* x, const S* y, int64_t n, const PassInfo& pass);
  double LossAndGrad(const S* params, const S* x, const S* y, int64_t n, const PassInfo& pass,
                     S* grad);
  // Outputs (outputs x n): probabilities for xent, the outputs for mse. No dropout.
  void Predict(const S* params, const S* x, int64_t n, S* out);
  // The last layer's raw outputs z (outputs x n, sample j at z + j*Outputs()), as LossSum's
  // and Predict's losses see them (not training: no dropout, batch norm's running
  // statistics); valid until the next pass. One forward pass gives an evaluation both its loss
  // and its predictions (nn/metrics.cc).
  const S* RawOutputs(const S* params, const S* x, int64_t n) {
    return Forward(params, x, n, PassInfo{});
  }

 private:
  const S* Forward(const S* params, const S* x, int64_t n, const PassInfo& pass);

  ModelSpec spec_;
  NetPlan plan_;
  std::vector<std::unique_ptr<Layer<S>>> layers_;
  std::vector<int64_t> offsets_;  // each layer's first parameter
  int64_t param_count_ = 0;
  int64_t outputs_ = 0;
  AlignedVector<S> input_;
  std::vector<AlignedVector<S>> acts_;  // acts_[i]: layer i's output
  AlignedVector<S> delta_, delta_prev_;
};

}  // namespace shmtrain::nn
