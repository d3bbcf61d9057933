// A model of layers (nn/layer.h): an input shape, a sequence of layers and a loss, built once
// and run forward and backward over batches.
//
// The flat parameter vector is the concatenation of the layers' blocks in layer order. The
// functions mirror nn/mlp.h's (sums over the n samples, not means; n = 0 allowed), with a
// PassInfo for what dropout needs. x holds n samples of the input shape in the data's order,
// (c, h, w) as PyTorch's NCHW writes a sample; the net turns it channels-last first when c > 1.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "nn/layer.h"
#include "nn/mlp.h"

namespace shmtrain::nn {

struct NetSpec {
  Shape input;
  std::vector<LayerSpec> layers;
  Loss loss = Loss::kXent;
};

// The size of the flat parameter vector; the spec must resolve (ResolveShapes).
int64_t ParamCount(const NetSpec& spec);

// Fills params deterministically from seed: one Rng, each layer's blocks in turn.
void InitParams(const NetSpec& spec, Init init, uint64_t seed, float* params);

template <class S>
class Net {
 public:
  // spec must resolve (ResolveShapes): a spec that does not is a bug here (abort).
  explicit Net(const NetSpec& spec);

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

  NetSpec spec_;
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
