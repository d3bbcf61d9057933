// flatten: (c, h, w) to (c*h*w), PyTorch's nn.Flatten. Its output is in PyTorch's (c, h, w)
// order, so the linear layer after it has PyTorch's weight layout; inside, the tensor is
// channels-last (nn/layer.h), so this is a transpose of each sample's (c x h*w) matrix.
#include <Eigen/Core>

#include "nn/layer.h"
#include "nn/layers/type_of.h"

namespace shmtrain::nn {
namespace {

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;

template <class S>
class Flatten final : public Layer<S> {
 public:
  Flatten(const LayerSpec&, Shape in, Shape out) : Layer<S>(in, out) {}

  // Per sample: channels-last is the column-major (c x hw) matrix, (c, h, w) order its
  // transpose.
  void Forward(const S*, const S* x, int64_t n, const PassInfo&, S* y) override {
    const int64_t c = this->in().c, hw = this->in().h * this->in().w;
    for (int64_t i = 0; i < n; ++i) {
      Eigen::Map<Mat<S>>(y + i * c * hw, hw, c) =
          Eigen::Map<const Mat<S>>(x + i * c * hw, c, hw).transpose();
    }
  }

  void Backward(const S*, const S*, const S*, const S* dy, int64_t n, const PassInfo&, S* dx,
                S*) override {
    if (dx == nullptr) return;
    const int64_t c = this->in().c, hw = this->in().h * this->in().w;
    for (int64_t i = 0; i < n; ++i) {
      Eigen::Map<Mat<S>>(dx + i * c * hw, c, hw) =
          Eigen::Map<const Mat<S>>(dy + i * c * hw, hw, c).transpose();
    }
  }
};

Status OutShape(const LayerSpec&, Shape in, Shape* out) {
  *out = {in.Size(), 1, 1};
  return Status::Ok();
}

// ONNX's tensors are NCHW: PyTorch's order already.
std::string ToOnnx(const LayerSpec&, Shape, Shape, const std::string& module, const std::string& x,
                   OnnxGraph& g) {
  if (g.Rank(x) == 2) return x;
  return g.Node("Flatten", {x}, module, {OnnxAttr::Int("axis", 1)}, 2);
}

}  // namespace

extern const LayerType kFlatten = TypeOf<Flatten>({
    .name = "flatten",
    .torch = "Flatten",
    .summary = "(c, h, w) to c*h*w features, in PyTorch's order",
    .args = {},
    .spatial = Spatial::kFlattens,
    .out_shape = OutShape,
    .to_onnx = ToOnnx,
});

}  // namespace shmtrain::nn
