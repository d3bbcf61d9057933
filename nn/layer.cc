#include "nn/layer.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "core/decimal.h"
#include "core/text.h"
#include "nn/registry.h"

namespace shmtrain::nn {

constexpr int64_t kMaxTensor = int64_t{1} << 31;

extern const LayerType kLinear, kConv2d, kMaxPool2d, kAvgPool2d, kAdaptiveAvgPool2d,
    kBatchNorm2d, kBatchNorm1d, kFlatten, kRelu, kTanh, kSigmoid, kDropout;

const std::vector<const LayerType*>& LayerTypes() {
  static const std::vector<const LayerType*> all = {
      &kLinear, &kConv2d, &kMaxPool2d, &kAvgPool2d, &kAdaptiveAvgPool2d, &kBatchNorm2d,
      &kBatchNorm1d, &kFlatten, &kRelu, &kTanh, &kSigmoid, &kDropout};
  return all;
}

const LayerType* FindLayerType(std::string_view name) { return FindByName(LayerTypes(), name); }

}  // namespace shmtrain::nn

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

namespace shmtrain::nn {

int64_t ParamBlock::Size() const {
  int64_t n = 1;
  for (int64_t d : torch_shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

namespace {

// Splits at the commas outside parentheses; false on unbalanced parentheses.
bool SplitTopLevel(std::string_view s, std::vector<std::string_view>* parts) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')' && --depth < 0) return false;
    if (s[i] == ',' && depth == 0) {
      parts->push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts->push_back(s.substr(start));
  return depth == 0;
}

std::string ArgNames(const LayerType& t) {
  if (t.args.empty()) return "it takes none";
  std::string s = "its arguments: ";
  for (size_t i = 0; i < t.args.size(); ++i) s += (i ? ", " : "") + std::string(t.args[i].name);
  return s;
}

std::string TypeNames() { return NamesOf(LayerTypes(), ", "); }

Status CheckValue(const LayerArg& a, std::string_view text, double* out) {
  const std::string s(text);
  if (a.boolean) {
    if (s != "true" && s != "false" && s != "True" && s != "False") {
      return Status::Usage(std::string(a.name) + " wants true or false, not '" + s + "'");
    }
    *out = s == "true" || s == "True" ? 1 : 0;
    return Status::Ok();
  }
  char* end = nullptr;
  const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return Status::Usage(std::string(a.name) + " wants a number, not '" + s + "'");
  }
  if (a.integer && v != std::floor(v)) {
    return Status::Usage(std::string(a.name) + " wants a whole number, not " + s);
  }
  if (v < a.lo || v > a.hi) {
    return Status::Usage(std::string(a.name) + " must be in [" + ShortestText(a.lo) + ", " +
                         ShortestText(a.hi) + "], not " + s);
  }
  *out = v;
  return Status::Ok();
}

// One layer's text: "name" or "name(args)".
Status ParseLayer(std::string_view text, LayerSpec* out) {
  const size_t open = text.find('(');
  const std::string_view name = Trim(text.substr(0, open));
  const LayerType* t = FindLayerType(name);
  if (t == nullptr) {
    return Status::Usage("unknown layer '" + std::string(name) + "' (layers: " + TypeNames() +
                         ")");
  }
  std::vector<std::string_view> given;
  if (open != std::string_view::npos) {
    if (text.back() != ')') return Status::Usage("text after its closing parenthesis");
    const std::string_view inside = Trim(text.substr(open + 1, text.size() - open - 2));
    if (!inside.empty() && !SplitTopLevel(inside, &given)) {
      return Status::Usage("unbalanced parentheses");
    }
  }
  out->kind = t->name;
  out->args.assign(t->args.size(), 0.0);
  std::vector<bool> set(t->args.size(), false);
  size_t positional = 0;
  bool named_seen = false;
  for (std::string_view g : given) {
    g = Trim(g);
    const size_t eq = g.find('=');
    size_t i = 0;
    std::string_view value = g;
    if (eq != std::string_view::npos) {
      const std::string_view key = Trim(g.substr(0, eq));
      value = Trim(g.substr(eq + 1));
      for (i = 0; i < t->args.size() && key != t->args[i].name; ++i) {
      }
      if (i == t->args.size()) {
        return Status::Usage(std::string(t->name) + " has no argument '" + std::string(key) +
                             "' (" + ArgNames(*t) + ")");
      }
      named_seen = true;
    } else {
      if (named_seen) return Status::Usage("an argument by position after one by name");
      if (positional >= t->args.size()) {
        return Status::Usage(std::string(t->name) + " takes " + std::to_string(t->args.size()) +
                             " arguments at most (" + ArgNames(*t) + ")");
      }
      i = positional++;
    }
    if (set[i]) return Status::Usage(std::string(t->args[i].name) + " given twice");
    Status s = CheckValue(t->args[i], value, &out->args[i]);
    if (!s.ok()) return s;
    set[i] = true;
  }
  for (size_t i = 0; i < t->args.size(); ++i) {
    if (set[i]) continue;
    if (t->args[i].required) {
      return Status::Usage(std::string(t->name) + " needs " + t->args[i].name + " (" +
                           ArgNames(*t) + ")");
    }
    out->args[i] = t->args[i].default_value;
  }
  return Status::Ok();
}

}  // namespace

Status ParseModelText(std::string_view text, std::vector<LayerSpec>* layers) {
  layers->clear();
  std::vector<std::string_view> parts;
  if (!SplitTopLevel(text, &parts)) {
    return Status::Usage("unbalanced parentheses in '" + std::string(text) + "'");
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string_view part = Trim(parts[i]);
    LayerSpec spec;
    Status s = part.empty() ? Status::Usage("empty layer") : ParseLayer(part, &spec);
    if (!s.ok()) {
      return Status::Usage("layer " + std::to_string(i + 1) + " '" + std::string(part) + "': " +
                           s.message());
    }
    layers->push_back(std::move(spec));
  }
  return Status::Ok();
}

int64_t ParamSize(const LayerType& t, const LayerSpec& spec, Shape in) {
  if (t.params == nullptr) return 0;
  int64_t n = 0;
  for (const ParamBlock& b : t.params(spec, in)) {
    const int64_t size = b.Size();
    if (size < 0 || __builtin_add_overflow(n, size, &n)) return -1;
  }
  return n;
}

int64_t StatsSize(const LayerType& t, const LayerSpec& spec, Shape in) {
  return t.stats == nullptr ? 0 : t.stats(spec, in);
}

std::vector<LayerSite> LayerSites(const ModelSpec& spec) {
  std::vector<Shape> shapes;
  const Status s = ResolveShapes(spec.input, spec.layers, &shapes);
  SHMTRAIN_CHECK(s.ok(), "a model that does not resolve: " + s.message());
  std::vector<LayerSite> sites;
  Shape in = spec.input;
  int64_t param = 0, stats = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const LayerType* t = FindLayerType(l.kind);
    sites.push_back({&l, t, in, shapes[i], param, stats});
    param += ParamSize(*t, l, in);
    stats += StatsSize(*t, l, in);
    in = shapes[i];
  }
  return sites;
}

int64_t StatsCount(const ModelSpec& spec) {
  int64_t n = 0;
  for (const LayerSite& s : LayerSites(spec)) n += StatsSize(*s.type, *s.spec, s.in);
  return n;
}

Status SameShape(const LayerSpec&, Shape in, Shape* out) {
  *out = in;
  return Status::Ok();
}

std::string ImageText(Shape s) {
  return std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w);
}

std::string ModelText(const std::vector<LayerSpec>& layers) {
  std::string s;
  for (const LayerSpec& l : layers) {
    if (!s.empty()) s += ",";
    s += l.kind;
    const LayerType* t = FindLayerType(l.kind);
    if (t == nullptr) continue;
    std::string args;
    for (size_t i = 0; i < t->args.size() && i < l.args.size(); ++i) {
      const LayerArg& a = t->args[i];
      if (!a.required && l.args[i] == a.default_value) continue;
      args += (args.empty() ? "" : ",") + (a.required ? "" : std::string(a.name) + "=") +
              (a.boolean ? l.args[i] != 0 ? "true" : "false" : ShortestText(l.args[i]));
    }
    if (!args.empty()) s += "(" + args + ")";
  }
  return s;
}

Status ParseStoredModelText(std::string_view text, std::vector<LayerSpec>* layers) {
  if (Status s = ParseModelText(text, layers); !s.ok()) return s;
  const std::string canonical = ModelText(*layers);
  if (canonical == text) return Status::Ok();
  layers->clear();
  return Status::Usage("model text '" + std::string(text) +
                       "' is not in the canonical form that shmtrain writes ('" + canonical + "')");
}

std::string LayerName(const std::vector<LayerSpec>& layers, size_t index) {
  int same = 0;
  for (size_t i = 0; i <= index && i < layers.size(); ++i) same += layers[i].kind == layers[index].kind;
  return layers[index].kind + " #" + std::to_string(same) + " (layer " + std::to_string(index + 1) +
         ")";
}

bool TakesImages(Shape input, const std::vector<LayerSpec>& layers) {
  if (!input.Flat()) return true;
  for (const LayerSpec& l : layers) {
    const LayerType* t = FindLayerType(l.kind);
    if (t == nullptr || t->spatial == Spatial::kFlattens) return false;
    if (t->spatial == Spatial::kWindows) return true;
  }
  return false;
}

Status ResolveShapes(Shape input, const std::vector<LayerSpec>& layers, std::vector<Shape>* shapes,
                     bool flat_input) {
  shapes->clear();
  // Each tensor of one sample holds at most 2^31 values: the parameter blocks' sizes (a linear
  // layer's out x in) then fit in 64 bits.
  auto too_large = [](Shape s) {
    int64_t n = 0;
    return s.c < 1 || s.h < 1 || s.w < 1 || __builtin_mul_overflow(s.c, s.h, &n) ||
           __builtin_mul_overflow(n, s.w, &n) || n > kMaxTensor;
  };
  if (too_large(input)) {
    return Status::Usage("input " + std::to_string(input.c) + "x" + std::to_string(input.h) + "x" +
                         std::to_string(input.w) + ": each dimension at least 1, at most 2^31 values");
  }
  if (layers.empty()) return Status::Usage("a model without layers");
  Shape in = input;
  // The layer whose output `in` is when that is a flat vector; -1: the input.
  std::optional<int64_t> flat_from;
  if (flat_input) flat_from = -1;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerType* t = FindLayerType(layers[i].kind);
    if (t == nullptr || layers[i].args.size() != t->args.size()) {
      return Status::Usage(LayerName(layers, i) + ": not a layer this build knows");
    }
    if (t->spatial == Spatial::kWindows && flat_from.has_value()) {
      return Status::Usage(LayerName(layers, i) + ": input " + in.Text() +
                           (*flat_from < 0
                                ? " has no image shape (--input-shape C,H,W gives flat data one)"
                                : " is flat (the output of " +
                                      LayerName(layers, static_cast<size_t>(*flat_from)) +
                                      "), not an image"));
    }
    if (t->spatial == Spatial::kWindows) flat_from.reset();
    if (t->spatial == Spatial::kFlattens) flat_from = static_cast<int64_t>(i);
    Shape out;
    Status s = t->out_shape(layers[i], in, &out);
    if (!s.ok()) return Status::Usage(LayerName(layers, i) + ": " + s.message());
    if (too_large(out)) {
      return Status::Usage(LayerName(layers, i) + ": its output would hold more than 2^31 values a sample");
    }
    shapes->push_back(out);
    in = out;
  }
  return Status::Ok();
}

}  // namespace shmtrain::nn
