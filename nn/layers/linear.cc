// linear(out): y = W x + b, PyTorch's nn.Linear over the flattened input.
//
// Parameters: W (out x in, column-major: W(i, j) at i + j*out), then b (out). PyTorch's weight
// is (out, in) row-major, so export transposes W. With the activation layers this is the MLP
// of --layers: the model the releases before layers trained (tests/fixtures/ holds one), to
// float rounding (their bits were Eigen's product's, which the AVX2 path no longer runs).
#include <Eigen/Core>
#include <cmath>
#include <type_traits>

#include "nn/gemm.h"
#include "nn/layer.h"
#include "nn/layers/type_of.h"
#include "nn/rng.h"

namespace shmtrain::nn {
namespace {

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;

template <class S>
class Linear final : public Layer<S> {
 public:
  Linear(const LayerSpec&, Shape in, Shape out)
      : Layer<S>(in, out), in_(in.Size()), out_(out.Size()) {}

  void Forward(const S* params, const S* x, int64_t n, const PassInfo&, S* y) override {
    Eigen::Map<const Vec<S>> b(params + out_ * in_, out_);
    Eigen::Map<Mat<S>> z(y, out_, n);
    if constexpr (std::is_same_v<S, float>) {
      Gemm(out_, n, in_, {params, out_}, {x, in_}, y, out_, false);
    } else {
      z.noalias() =
          Eigen::Map<const Mat<S>>(params, out_, in_) * Eigen::Map<const Mat<S>>(x, in_, n);
    }
    z.colwise() += b;
  }

  void Backward(const S* params, const S* x, const S*, const S* dy, int64_t n, const PassInfo&,
                S* dx, S* dparams) override {
    Eigen::Map<const Mat<S>> d(dy, out_, n);
    if constexpr (std::is_same_v<S, float>) {
      Gemm(out_, in_, n, {dy, out_}, {x, in_, true}, dparams, out_, false);
    } else {
      Eigen::Map<Mat<S>>(dparams, out_, in_).noalias() =
          d * Eigen::Map<const Mat<S>>(x, in_, n).transpose();
    }
    // Column by column: each element is summed over the samples in sample order, the same
    // rounding whatever the address of dparams (rowwise().sum() reduces the rows of an
    // unaligned head in another order).
    Eigen::Map<Vec<S>> grad_b(dparams + out_ * in_, out_);
    grad_b.setZero();
    for (int64_t j = 0; j < n; ++j) grad_b += d.col(j);
    if (dx == nullptr) return;
    if constexpr (std::is_same_v<S, float>) {
      Gemm(in_, n, out_, {params, out_, true}, {dy, out_}, dx, in_, false);
    } else {
      Eigen::Map<Mat<S>>(dx, in_, n).noalias() =
          Eigen::Map<const Mat<S>>(params, out_, in_).transpose() * d;
    }
  }

 private:
  int64_t in_, out_;
};

Status OutShape(const LayerSpec& spec, Shape in, Shape* out) {
  if (!in.Flat()) {
    return Status::Usage("input " + in.Text() + " is not flat (put flatten before it)");
  }
  *out = {spec.Int(0), 1, 1};
  return Status::Ok();
}

std::vector<ParamBlock> Params(const LayerSpec& spec, Shape in) {
  return {{"weight", {spec.Int(0), in.Size()}}, {"bias", {spec.Int(0)}}};
}

}  // namespace

// The initialisations of nn/model.h's InitParams, with fan_in = in and fan_out = out: W in
// parameter-vector order, then b.
void InitWeightsAndBias(Init init, int64_t fan_in, int64_t fan_out, int64_t weights,
                        int64_t biases, Rng& rng, float* params) {
  if (init == Init::kTorch) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (int64_t i = 0; i < weights + biases; ++i) {
      params[i] = static_cast<float>(bound * (2.0 * rng.Uniform() - 1.0));
    }
    return;
  }
  double scale = 1.0;
  if (init == Init::kXavier) scale = std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  if (init == Init::kHe) scale = std::sqrt(2.0 / static_cast<double>(fan_in));
  for (int64_t i = 0; i < weights; ++i) params[i] = static_cast<float>(scale * rng.Normal());
  for (int64_t i = 0; i < biases; ++i) {
    params[weights + i] = init == Init::kNormal ? static_cast<float>(rng.Normal()) : 0.0f;
  }
}

namespace {

void InitLinear(const LayerSpec& spec, Shape in, Init init, Rng& rng, float* params) {
  InitWeightsAndBias(init, in.Size(), spec.Int(0), spec.Int(0) * in.Size(), spec.Int(0), rng,
                     params);
}

// nn.Linear's weight is row-major out x in; ours is column-major (W(i, j) at i + j*out).
void TorchOrder(const LayerSpec& spec, Shape in, int64_t* from) {
  const int64_t out = spec.Int(0), k = in.Size();
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < k; ++j) from[i * k + j] = i + j * out;
  }
  for (int64_t i = 0; i < out; ++i) from[out * k + i] = out * k + i;
}

// Gemm on the input as a row in our order (channels last for an image: what the weight's
// columns follow), with the weight as PyTorch's: transB.
std::string ToOnnx(const LayerSpec&, Shape in, Shape, const std::string& module,
                   const std::string& x, OnnxGraph& g) {
  const std::string row = g.Flat(x, in, module + ".input");
  return g.Node("Gemm", {row, g.Param(module + ".weight"), g.Param(module + ".bias")}, module,
                {OnnxAttr::Int("transB", 1)}, 2);
}

}  // namespace

extern const LayerType kLinear = TypeOf<Linear>({
    .name = "linear",
    .torch = "Linear",
    .summary = "y = W x + b over the flattened input; out units",
    .args = {{"out", true, 0, 1, kMaxWidth, true}},
    .spatial = Spatial::kFlattens,
    .out_shape = OutShape,
    .params = Params,
    .init = InitLinear,
    .torch_order = TorchOrder,
    .to_onnx = ToOnnx,
});

}  // namespace shmtrain::nn
