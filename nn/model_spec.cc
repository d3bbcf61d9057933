// ModelSpec's methods (include/shmtrain/model_spec.h): the MLP of --layers, the shapes
// and counts of a spec, and its text.
#include <optional>

#include "nn/layer.h"
#include "shmtrain/model_spec.h"

namespace shmtrain {

std::string Shape::Text() const {
  if (Flat()) return std::to_string(c);
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

ModelSpec ModelSpec::Mlp(const std::vector<int>& sizes, Activation activation, Loss loss) {
  ModelSpec m;
  m.input = {sizes.empty() ? 0 : sizes.front(), 1, 1};
  for (size_t l = 1; l < sizes.size(); ++l) {
    m.layers.push_back({"linear", {static_cast<double>(sizes[l])}});
    if (l + 1 < sizes.size() && activation != Activation::kIdentity) {
      m.layers.push_back({ToString(activation), {}});
    }
  }
  m.loss = loss;
  return m;
}

bool ModelSpec::AsMlp(std::vector<int>* sizes, Activation* activation) const {
  if (!input.Flat() || layers.empty()) return false;
  std::vector<int> s = {static_cast<int>(input.c)};
  std::optional<Activation> between;  // what every gap between two linear layers holds
  for (size_t i = 0;;) {
    if (i >= layers.size() || layers[i].kind != "linear") return false;
    s.push_back(static_cast<int>(layers[i++].Int(0)));
    if (i == layers.size()) break;
    Activation f = Activation::kIdentity;
    if (layers[i].kind != "linear") {
      const std::optional<Activation> a = ParseEnum<Activation>(layers[i++].kind);
      if (!a.has_value() || *a == Activation::kIdentity) return false;
      f = *a;
    }
    if (between.has_value() && *between != f) return false;
    between = f;
  }
  *sizes = std::move(s);
  // One linear layer has no activation; --activation's default stands for it.
  *activation = between.value_or(Activation::kTanh);
  return true;
}

int64_t ModelSpec::outputs() const {
  std::vector<Shape> shapes;
  if (layers.empty() || !nn::ResolveShapes(input, layers, &shapes).ok()) return 0;
  return shapes.back().Size();
}

std::optional<uint64_t> ModelSpec::CheckedParamCount() const {
  std::vector<Shape> shapes;
  if (!nn::ResolveShapes(input, layers, &shapes).ok()) return std::nullopt;
  uint64_t n = 0;
  Shape in = input;
  for (size_t i = 0; i < layers.size(); ++i) {
    const int64_t size = nn::ParamSize(*nn::FindLayerType(layers[i].kind), layers[i], in);
    if (size < 0 || __builtin_add_overflow(n, static_cast<uint64_t>(size), &n)) return std::nullopt;
    in = shapes[i];
  }
  return n;
}

size_t ModelSpec::ParamCount() const {
  return static_cast<size_t>(CheckedParamCount().value_or(0));
}

std::string ModelSpec::Text() const { return nn::ModelText(layers); }

}  // namespace shmtrain
