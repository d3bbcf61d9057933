// The model text (nn/layer.h): its grammar, the canonical text of layers and how messages
// name a layer.
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/decimal.h"
#include "core/text.h"
#include "nn/layer.h"
#include "nn/registry.h"

namespace shmtrain::nn {

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
  for (size_t i = 0; i <= index && i < layers.size(); ++i) {
    same += layers[i].kind == layers[index].kind;
  }
  return layers[index].kind + " #" + std::to_string(same) + " (layer " + std::to_string(index + 1) +
         ")";
}

}  // namespace shmtrain::nn
