// The model vocabulary: shapes, layers, activation, loss, initialisation.
//
// The numeric values of the enums are stored in the segment header and in saved model files:
// never renumber them, only append.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/enum_names.h"

namespace shmtrain {

enum class Activation : uint32_t { kTanh = 0, kRelu = 1, kSigmoid = 2, kIdentity = 3 };
enum class Loss : uint32_t { kMse = 0, kXent = 1 };
// kTorch is PyTorch's nn.Linear default. Init is not stored today (the parameters are), but it
// shares the append-only rule so it can be.
enum class Init : uint32_t { kNormal = 0, kXavier = 1, kHe = 2, kTorch = 3 };

// The names (shmtrain/enum_names.h: ParseEnum, ToString, EnumNames) are exact and lower-case:
// they appear in flags, logs and model files, so one spelling per value keeps those
// round-trippable.
constexpr auto NameTable(Activation) {
  return std::to_array<EnumName<Activation>>({{Activation::kTanh, "tanh"},
                                              {Activation::kRelu, "relu"},
                                              {Activation::kSigmoid, "sigmoid"},
                                              {Activation::kIdentity, "identity"}});
}
constexpr auto NameTable(Loss) {
  return std::to_array<EnumName<Loss>>({{Loss::kMse, "mse"}, {Loss::kXent, "xent"}});
}
// --init lists the default first.
constexpr auto NameTable(Init) {
  return std::to_array<EnumName<Init>>({{Init::kTorch, "torch"},
                                        {Init::kNormal, "normal"},
                                        {Init::kXavier, "xavier"},
                                        {Init::kHe, "he"}});
}

// The shape of one sample's tensor: c channels of h x w; flat data is (features, 1, 1).
struct Shape {
  int64_t c = 0, h = 1, w = 1;
  int64_t Size() const { return c * h * w; }
  bool Flat() const { return h == 1 && w == 1; }
  std::string Text() const;  // "32x14x14", or "784" when flat
  friend bool operator==(const Shape&, const Shape&) = default;
};

// One layer of a model: its type's name in the model text (nn/layer.h: "conv2d") and the value
// of every argument of that type, in the type's order, defaults filled in.
struct LayerSpec {
  std::string kind;
  std::vector<double> args;
  // A residual block's layers (kind "residual"): its body, and its shortcut (empty: the
  // identity). Empty for every other kind.
  std::vector<LayerSpec> body = {}, shortcut = {};
  int64_t Int(size_t i) const { return static_cast<int64_t>(args[i]); }
  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

// The longest model text (canonical, nn/layer.h) a run, a segment or a model file holds.
inline constexpr size_t kMaxModelText = 4096;
// The most sizes an MLP lists, inputs first (--layers, version-2 model files): 63 layers.
inline constexpr int kMaxMlpSizes = 64;
// The widest a layer's output (an MLP's size, linear and conv2d outputs) or a dimension of an
// input sample (--input-shape, the segment's input shape) may be.
inline constexpr int kMaxWidth = 65536;

// A model: the shape of one input sample, a sequence of layers and a loss. The last layer's
// outputs are compared with the target directly by mse, through softmax by xent.
//
// The flat parameter vector (float32, the same in the segment, checkpoints and model files) is
// the concatenation of the layers' parameter blocks in layer order (nn/layers/*.cc give each
// block's layout; a linear layer's W is out x in, column-major: W(i, j) at i + j*out, then b).
// The MLP of --layers s0,...,sL --activation f is the input s0 and the layers
// linear(s1),f,...,linear(sL): the parameters of --layers as they always were.
struct ModelSpec {
  Shape input;
  std::vector<LayerSpec> layers;
  Loss loss = Loss::kMse;

  static ModelSpec Mlp(const std::vector<int>& sizes, Activation activation, Loss loss);
  int64_t inputs() const { return input.Size(); }
  // These resolve the layers' shapes (nn/layer.cc): a spec that does not resolve gives 0
  // outputs and parameters (ResolveShapes says why).
  int64_t outputs() const;
  // The one count of the parameters: nullopt when the layers do not resolve or their count
  // does not fit in 64 bits (a model read from a segment or a file must not wrap it into a
  // plausible size). ParamCount() is the same, or 0.
  std::optional<uint64_t> CheckedParamCount() const;
  size_t ParamCount() const;
  std::string Text() const;  // the canonical model text (nn::ModelText)
  // The MLP this spec is, if it is one: sizes s0..sL and the activation (identity when the
  // layers are linear only); false otherwise. Model files and checkpoints of MLPs keep the
  // encoding of the releases that knew only MLPs.
  bool AsMlp(std::vector<int>* sizes, Activation* activation) const;
  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

}  // namespace shmtrain
