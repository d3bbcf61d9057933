// relu, tanh, sigmoid: elementwise, no parameters, PyTorch's nn.ReLU, nn.Tanh, nn.Sigmoid.
//
// Backward is written in terms of the output y (tanh: 1 - y^2, sigmoid: y(1 - y), relu:
// [y > 0], which is [x > 0]), with the same Eigen expressions as the MLP code of the releases
// before layers, so the MLP of --layers gives the same bits through these layers.
#include <Eigen/Core>

#include "nn/layer.h"
#include "nn/layers/type_of.h"

namespace shmtrain::nn {
namespace {

template <class S>
using Arr = Eigen::Array<S, Eigen::Dynamic, 1>;

enum class Fn { kRelu, kTanh, kSigmoid };

template <Fn F>
struct Elementwise {
  template <class S>
  class Layer final : public nn::Layer<S> {
   public:
    Layer(const LayerSpec&, Shape in, Shape out) : nn::Layer<S>(in, out) {}

    void Forward(const S*, const S* x, int64_t n, const PassInfo&, S* y) override {
      const int64_t size = this->in().Size() * n;
      Eigen::Map<const Arr<S>> a(x, size);
      Eigen::Map<Arr<S>> z(y, size);
      if constexpr (F == Fn::kRelu) z = a.max(S(0));
      if constexpr (F == Fn::kTanh) z = a.tanh();
      if constexpr (F == Fn::kSigmoid) z = a.logistic();
    }

    void Backward(const S*, const S*, const S* y, const S* dy, int64_t n, const PassInfo&,
                  S* dx, S*) override {
      if (dx == nullptr) return;
      const int64_t size = this->in().Size() * n;
      Eigen::Map<const Arr<S>> a(y, size), d(dy, size);
      Eigen::Map<Arr<S>> out(dx, size);
      if constexpr (F == Fn::kRelu) out = (a > S(0)).select(d, S(0));
      if constexpr (F == Fn::kTanh) out = d * (S(1) - a.square());
      if constexpr (F == Fn::kSigmoid) out = d * (a * (S(1) - a));
    }
  };
};

// ONNX's operator of the same name (Relu, Tanh, Sigmoid).
template <Fn F>
std::string ToOnnx(const LayerSpec&, Shape, Shape, const std::string& module, const std::string& x,
                   OnnxGraph& g) {
  const char* op = F == Fn::kRelu ? "Relu" : F == Fn::kTanh ? "Tanh" : "Sigmoid";
  return g.Node(op, {x}, module);
}

template <Fn F>
LayerType Type(const char* name, const char* torch, const char* summary) {
  return TypeOf<Elementwise<F>::template Layer>({.name = name,
                                                 .torch = torch,
                                                 .summary = summary,
                                                 .args = {},
                                                 .spatial = Spatial::kKeeps,
                                                 .out_shape = SameShape,
                                                 .to_onnx = ToOnnx<F>});
}

}  // namespace

extern const LayerType kRelu = Type<Fn::kRelu>("relu", "ReLU", "max(x, 0)");
extern const LayerType kTanh = Type<Fn::kTanh>("tanh", "Tanh", "tanh(x)");
extern const LayerType kSigmoid = Type<Fn::kSigmoid>("sigmoid", "Sigmoid", "1 / (1 + exp(-x))");

}  // namespace shmtrain::nn
