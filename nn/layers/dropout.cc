// dropout(p=0.5): PyTorch's nn.Dropout. In training each unit is zeroed with probability p
// and the others scaled by 1/(1-p); outside training (eval, predict, validation) it passes
// its input through.
//
// The mask is a pure function of (seed, step, the sample's global row, the unit), not a
// stream of draws: P workers drop exactly what one worker drops for the same minibatch, and a
// phase redone after a worker's death draws the same mask. Backward recomputes it.
#include <algorithm>

#include "nn/layer.h"
#include "nn/layers/type_of.h"
#include "nn/rng.h"

namespace shmtrain::nn {
namespace {

template <class S>
class Dropout final : public Layer<S> {
 public:
  Dropout(const LayerSpec& spec, Shape in, Shape out) : Layer<S>(in, out), p_(spec.args[0]) {}

  void Forward(const S*, const S* x, int64_t n, const PassInfo& pass, S* y) override {
    Apply(x, n, pass, y);
  }

  void Backward(const S*, const S*, const S*, const S* dy, int64_t n, const PassInfo& pass,
                S* dx, S*) override {
    if (dx != nullptr) Apply(dy, n, pass, dx);
  }

 private:
  // out = in * mask / (1 - p) in training, in otherwise.
  void Apply(const S* in, int64_t n, const PassInfo& pass, S* out) const {
    const int64_t size = this->in().Size();
    if (!pass.train || p_ == 0) {
      std::copy(in, in + n * size, out);
      return;
    }
    const S scale = static_cast<S>(1.0 / (1.0 - p_));
    const uint64_t step_seed = MixSeed(MixSeed(pass.seed, 0x64726f706f7574ULL),
                                       static_cast<uint64_t>(pass.step));
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t row_seed = MixSeed(step_seed, static_cast<uint64_t>(pass.Row(i)));
      for (int64_t u = 0; u < size; ++u) {
        const double draw =
            static_cast<double>(MixSeed(row_seed, static_cast<uint64_t>(u)) >> 11) * 0x1p-53;
        out[i * size + u] = draw < p_ ? S(0) : in[i * size + u] * scale;
      }
    }
  }

  const double p_;
};

// Inference: the identity, no node.
std::string ToOnnx(const LayerSpec&, Shape, Shape, const std::string&, const std::string& x,
                   OnnxGraph&) {
  return x;
}

}  // namespace

extern const LayerType kDropout = TypeOf<Dropout>({
    .name = "dropout",
    .torch = "Dropout",
    .summary = "in training, zeroes each unit with probability p and scales the rest by 1/(1-p)",
    .args = {{"p", false, 0.5, 0, 0.99, false}},
    .spatial = Spatial::kKeeps,
    .out_shape = SameShape,
    .to_onnx = ToOnnx,
});

}  // namespace shmtrain::nn
