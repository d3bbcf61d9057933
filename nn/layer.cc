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
    kBatchNorm2d, kBatchNorm1d, kFlatten, kRelu, kTanh, kSigmoid, kDropout, kResidual;

const std::vector<const LayerType*>& LayerTypes() {
  static const std::vector<const LayerType*> all = {
      &kLinear, &kConv2d, &kMaxPool2d, &kAvgPool2d, &kAdaptiveAvgPool2d, &kBatchNorm2d,
      &kBatchNorm1d, &kFlatten, &kRelu, &kTanh, &kSigmoid, &kDropout, &kResidual};
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

// Splits at each `sep` outside parentheses; false on unbalanced parentheses.
bool SplitTopLevel(std::string_view s, char sep, std::vector<std::string_view>* parts) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')' && --depth < 0) return false;
    if (s[i] == sep && depth == 0) {
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

Status ParseList(std::string_view text, int depth, std::vector<LayerSpec>* layers);

// A block's text after its name: "(BODY)" or "(BODY | SHORTCUT)", `depth` blocks deep.
Status ParseBlock(const LayerType& t, std::string_view text, size_t open, int depth,
                  LayerSpec* out) {
  const std::string name = t.name;
  if (open == std::string_view::npos) {
    return Status::Usage(name + " needs its layers: " + name + "(LAYERS) adds its input to " +
                         "their output, " + name + "(LAYERS | SHORTCUT) the shortcut's");
  }
  if (text.back() != ')') return Status::Usage("text after its closing parenthesis");
  if (depth >= kMaxBlockDepth) {
    return Status::Usage("blocks nested more than " + std::to_string(kMaxBlockDepth) + " deep");
  }
  std::vector<std::string_view> lists;
  if (!SplitTopLevel(text.substr(open + 1, text.size() - open - 2), '|', &lists)) {
    return Status::Usage("unbalanced parentheses");
  }
  if (lists.size() > 2) {
    return Status::Usage("more than one '|' (" + name + "(BODY | SHORTCUT) has one shortcut)");
  }
  out->kind = t.name;
  out->args.clear();
  for (size_t k = 0; k < lists.size(); ++k) {
    const std::string_view list = Trim(lists[k]);
    if (list.empty()) {
      return Status::Usage(k == 0 ? "an empty body (" + name + "(LAYERS) needs a layer at least)"
                                  : std::string("an empty shortcut after '|' (leave out '|' for "
                                                "the identity)"));
    }
    const Status s = ParseList(list, depth + 1, k == 0 ? &out->body : &out->shortcut);
    if (!s.ok()) {
      return Status::Usage((k == 0 ? "in its body, " : "in its shortcut, ") + s.message());
    }
  }
  return Status::Ok();
}

// A layer's arguments as `given` in its text: the required ones by position, then any by name.
Status ParseArgs(const LayerType* t, const std::vector<std::string_view>& given, LayerSpec* out) {
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

// One layer's text: "name" or "name(args)", or a block's, `depth` blocks deep.
Status ParseLayer(std::string_view text, int depth, LayerSpec* out) {
  const size_t open = text.find('(');
  const std::string_view name = Trim(text.substr(0, open));
  if (std::vector<std::string_view> bars; SplitTopLevel(text, '|', &bars) && bars.size() > 1) {
    return Status::Usage("'|' outside a block (it parts a residual block's body from its "
                         "shortcut: residual(BODY | SHORTCUT))");
  }
  const LayerType* t = FindLayerType(name);
  if (t == nullptr) {
    return Status::Usage("unknown layer '" + std::string(name) + "' (layers: " + TypeNames() +
                         ")");
  }
  if (t->spatial == Spatial::kBlock) return ParseBlock(*t, text, open, depth, out);
  std::vector<std::string_view> given;
  if (open != std::string_view::npos) {
    if (text.back() != ')') return Status::Usage("text after its closing parenthesis");
    const std::string_view inside = Trim(text.substr(open + 1, text.size() - open - 2));
    if (!inside.empty() && !SplitTopLevel(inside, ',', &given)) {
      return Status::Usage("unbalanced parentheses");
    }
  }
  return ParseArgs(t, given, out);
}

// A list of layers, `depth` blocks deep.
Status ParseList(std::string_view text, int depth, std::vector<LayerSpec>* layers) {
  layers->clear();
  std::vector<std::string_view> parts;
  if (!SplitTopLevel(text, ',', &parts)) {
    return Status::Usage("unbalanced parentheses in '" + std::string(text) + "'");
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string_view part = Trim(parts[i]);
    LayerSpec spec;
    Status s = part.empty() ? Status::Usage("empty layer") : ParseLayer(part, depth, &spec);
    if (!s.ok()) {
      // A long part (a block's) is cut: each block around the layer at fault quotes itself.
      const std::string quoted = part.size() <= 60 ? std::string(part)
                                                   : std::string(part.substr(0, 56)) + " ...";
      return Status::Usage("layer " + std::to_string(i + 1) + " '" + quoted + "': " + s.message());
    }
    layers->push_back(std::move(spec));
  }
  return Status::Ok();
}

}  // namespace

Status ParseModelText(std::string_view text, std::vector<LayerSpec>* layers) {
  return ParseList(text, 0, layers);
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

namespace {

// Layer `l` on `in`, or in place of a block the layers it holds, nested alike.
void AddSites(const LayerSpec& l, Shape in, Shape out, int64_t* param, int64_t* stats,
              std::vector<LayerSite>* sites) {
  const LayerType* t = FindLayerType(l.kind);
  if (t->spatial == Spatial::kBlock) {
    for (const BlockMember& m : BlockMembers(l, in)) {
      AddSites(*m.spec, m.in, m.out, param, stats, sites);
    }
    return;
  }
  sites->push_back({&l, t, in, out, *param, *stats});
  *param += ParamSize(*t, l, in);
  *stats += StatsSize(*t, l, in);
}

}  // namespace

std::vector<LayerSite> LayerSites(const ModelSpec& spec) {
  std::vector<Shape> shapes;
  const Status s = ResolveShapes(spec.input, spec.layers, &shapes);
  SHMTRAIN_CHECK(s.ok(), "a model that does not resolve: " + s.message());
  std::vector<LayerSite> sites;
  Shape in = spec.input;
  int64_t param = 0, stats = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    AddSites(spec.layers[i], in, shapes[i], &param, &stats, &sites);
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
    if (t->spatial == Spatial::kBlock) {
      s += "(" + ModelText(l.body) + (l.shortcut.empty() ? "" : "|" + ModelText(l.shortcut)) + ")";
      continue;
    }
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

namespace {

// What a list of layers first does with a 1x1 input: read it as an image (a kWindows layer),
// flatten it (a kFlattens layer, or one this build does not know), or neither. A block reads
// an image if its body or its shortcut does.
enum class FirstUse { kImage, kFlat, kNeither };

FirstUse FirstUseOf(const std::vector<LayerSpec>& layers) {
  for (const LayerSpec& l : layers) {
    const LayerType* t = FindLayerType(l.kind);
    if (t == nullptr || t->spatial == Spatial::kFlattens) return FirstUse::kFlat;
    if (t->spatial == Spatial::kWindows) return FirstUse::kImage;
    if (t->spatial == Spatial::kBlock) {
      const FirstUse body = FirstUseOf(l.body), shortcut = FirstUseOf(l.shortcut);
      if (body == FirstUse::kImage || shortcut == FirstUse::kImage) return FirstUse::kImage;
      if (body == FirstUse::kFlat || shortcut == FirstUse::kFlat) return FirstUse::kFlat;
    }
  }
  return FirstUse::kNeither;
}

// Each tensor of one sample holds at most 2^31 values: the parameter blocks' sizes (a linear
// layer's out x in) then fit in 64 bits.
bool TooLarge(Shape s) {
  int64_t n = 0;
  return s.c < 1 || s.h < 1 || s.w < 1 || __builtin_mul_overflow(s.c, s.h, &n) ||
         __builtin_mul_overflow(n, s.w, &n) || n > kMaxTensor;
}

// What the tensor between two layers is: an image, flat (with what a kWindows layer's message
// says of it: " has no image shape (...)" for the input, " is flat (the output of ...), not an
// image" for a layer's output), or either: a block's out_shape and BlockMembers are not told
// which their input is, and leave the checks that need to know to ResolveShapes, which is.
struct Flatness {
  enum Kind { kImage, kFlat, kEither } kind = kImage;
  std::string why;  // kFlat
};

Flatness FlatOutputOf(const std::vector<LayerSpec>& layers, size_t i) {
  return {Flatness::kFlat, " is flat (the output of " + LayerName(layers, i) + "), not an image"};
}

std::string ShapeOf(Shape s, const Flatness& flat) {
  return flat.kind == Flatness::kFlat ? s.Text() + " (flat)" : ImageText(s);
}

Status ResolveBlockIn(const LayerSpec& block, Shape in, Flatness* flat, Shape* out);

// ResolveShapes of a list whose input is as *flat says; *flat becomes its output's.
Status ResolveList(Shape in, const std::vector<LayerSpec>& layers, Flatness* flat,
                   std::vector<Shape>* shapes) {
  shapes->clear();
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    const LayerType* t = FindLayerType(l.kind);
    const bool block = t != nullptr && t->spatial == Spatial::kBlock;
    if (t == nullptr || l.args.size() != t->args.size() ||
        (!block && !(l.body.empty() && l.shortcut.empty()))) {
      return Status::Usage(LayerName(layers, i) + ": not a layer this build knows");
    }
    if (t->spatial == Spatial::kWindows && flat->kind == Flatness::kFlat) {
      return Status::Usage(LayerName(layers, i) + ": input " + in.Text() + flat->why);
    }
    if (t->spatial == Spatial::kWindows) *flat = {};
    if (t->spatial == Spatial::kFlattens) *flat = FlatOutputOf(layers, i);
    Shape out;
    Status s = block ? ResolveBlockIn(l, in, flat, &out) : t->out_shape(l, in, &out);
    if (!s.ok()) return Status::Usage(LayerName(layers, i) + ": " + s.message());
    if (block && flat->kind == Flatness::kFlat) *flat = FlatOutputOf(layers, i);
    if (TooLarge(out)) {
      return Status::Usage(LayerName(layers, i) + ": its output would hold more than 2^31 values a sample");
    }
    shapes->push_back(out);
    in = out;
  }
  return Status::Ok();
}

// A block's body and shortcut on `in`: they must give one shape, both flat or both images
// (PyTorch would broadcast (n, C) and (n, C, 1, 1) into another shape).
Status ResolveBlockIn(const LayerSpec& block, Shape in, Flatness* flat, Shape* out) {
  if (block.body.empty()) return Status::Usage("an empty body");
  std::vector<Shape> shapes;
  Flatness body_flat = *flat, shortcut_flat = *flat;
  if (Status s = ResolveList(in, block.body, &body_flat, &shapes); !s.ok()) {
    return Status::Usage("in its body, " + s.message());
  }
  const Shape body = shapes.back();
  Shape shortcut = in;
  if (!block.shortcut.empty()) {
    if (Status s = ResolveList(in, block.shortcut, &shortcut_flat, &shapes); !s.ok()) {
      return Status::Usage("in its shortcut, " + s.message());
    }
    shortcut = shapes.back();
  }
  const bool known = body_flat.kind != Flatness::kEither && shortcut_flat.kind != Flatness::kEither;
  if (!(body == shortcut) || (known && body_flat.kind != shortcut_flat.kind)) {
    return Status::Usage("body gives " + ShapeOf(body, body_flat) + ", shortcut" +
                         (block.shortcut.empty() ? " (the identity)" : "") + " gives " +
                         ShapeOf(shortcut, shortcut_flat));
  }
  *flat = body_flat.kind != Flatness::kEither ? body_flat : shortcut_flat;
  *out = body;
  return Status::Ok();
}

}  // namespace

bool TakesImages(Shape input, const std::vector<LayerSpec>& layers) {
  return !input.Flat() || FirstUseOf(layers) == FirstUse::kImage;
}

Status ResolveShapes(Shape input, const std::vector<LayerSpec>& layers, std::vector<Shape>* shapes,
                     bool flat_input) {
  shapes->clear();
  if (TooLarge(input)) {
    return Status::Usage("input " + std::to_string(input.c) + "x" + std::to_string(input.h) + "x" +
                         std::to_string(input.w) + ": each dimension at least 1, at most 2^31 values");
  }
  if (layers.empty()) return Status::Usage("a model without layers");
  Flatness flat;
  if (flat_input) {
    flat = {Flatness::kFlat, " has no image shape (--input-shape C,H,W gives flat data one)"};
  }
  return ResolveList(input, layers, &flat, shapes);
}

Status ResolveBlock(const LayerSpec& block, Shape in, Shape* out) {
  Flatness either{Flatness::kEither, ""};
  return ResolveBlockIn(block, in, &either, out);
}

std::vector<BlockMember> BlockMembers(const LayerSpec& block, Shape in) {
  std::vector<BlockMember> members;
  for (const bool shortcut : {false, true}) {
    const std::vector<LayerSpec>& list = shortcut ? block.shortcut : block.body;
    if (list.empty()) continue;
    std::vector<Shape> shapes;
    Flatness either{Flatness::kEither, ""};
    const Status s = ResolveList(in, list, &either, &shapes);
    SHMTRAIN_CHECK(s.ok(), "a block that does not resolve: " + s.message());
    Shape at = in;
    for (size_t j = 0; j < list.size(); ++j) {
      members.push_back({&list[j], FindLayerType(list[j].kind), at, shapes[j], shortcut, j});
      at = shapes[j];
    }
  }
  return members;
}

}  // namespace shmtrain::nn
