#include "master/files/model_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/bytes.h"
#include "core/crc32.h"
#include "core/decimal.h"
#include "core/utf8.h"
#include "nn/batch_norm.h"
#include "nn/layer.h"

namespace shmtrain {
namespace {

// Version 2, the releases before layers: an MLP's sizes and activation. The loss follows.
Status DecodeMlpSpec(ByteReader& r, ModelSpec* spec) {
  const std::string cut = "cut short (truncated) in the ";
  uint32_t layers = 0, act = 0;
  if (!r.Get(&layers)) return Status::Data(cut + "header");
  if (layers < 2 || layers > kMaxMlpSizes)
    return Status::Data("layer count " + std::to_string(layers));
  std::vector<int> sizes;
  for (uint32_t i = 0; i < layers; ++i) {
    int32_t v = 0;
    if (!r.Get(&v)) return Status::Data(cut + "layer sizes");
    if (v < 1 || v > kMaxWidth) return Status::Data("layer size " + std::to_string(v));
    sizes.push_back(v);
  }
  if (!r.Get(&act)) return Status::Data(cut + "header");
  if (act > static_cast<uint32_t>(Activation::kIdentity)) return Status::Data("unknown activation");
  *spec = ModelSpec::Mlp(sizes, static_cast<Activation>(act), Loss::kMse);
  return Status::Ok();
}

// Version 3: the input shape and the model text (nn/layer.h). The loss follows.
Status DecodeSpec(ByteReader& r, ModelSpec* spec) {
  const std::string cut = "cut short (truncated) in the ";
  uint32_t c = 0, h = 0, w = 0, len = 0;
  if (!r.Get(&c) || !r.Get(&h) || !r.Get(&w) || !r.Get(&len)) return Status::Data(cut + "header");
  if (c < 1 || h < 1 || w < 1 || static_cast<uint64_t>(c) * h * w > kMaxModelInputs) {
    return Status::Data("input shape " + std::to_string(c) + "x" + std::to_string(h) + "x" +
                        std::to_string(w));
  }
  std::string text;
  if (len >= kMaxModelText || !r.GetBytes(len, &text)) {
    return Status::Data(len >= kMaxModelText ? "model text of " + std::to_string(len) + " bytes"
                                            : cut + "model text");
  }
  spec->input = {c, h, w};
  if (Status s = nn::ParseStoredModelText(text, &spec->layers); !s.ok()) {
    return Status::Data(s.message());
  }
  std::vector<Shape> shapes;
  if (Status s = nn::ResolveShapes(spec->input, spec->layers, &shapes); !s.ok()) {
    return Status::Data(s.message());
  }
  return Status::Ok();
}

// The magic number, the format version and the task. The model's layers follow.
Status DecodeHeader(ByteReader& r, size_t size, uint32_t* version, uint32_t* task) {
  const std::string cut = "cut short (truncated) in the ";
  char magic[8];
  for (char& c : magic) {
    if (!r.Get(&c)) {
      return Status::Data("too short to hold a header (" + std::to_string(size) + " bytes)");
    }
  }
  if (std::memcmp(magic, kModelMagic, sizeof magic) != 0) {
    return Status::Data("wrong magic number (not written by shmtrain --save)");
  }
  if (!r.Get(version)) return Status::Data(cut + "header");
  if (*version != kModelVersion && *version != kModelVersionMlp) {
    return Status::Data("format version " + std::to_string(*version) +
                        ", this build reads versions " + std::to_string(kModelVersionMlp) +
                        " and " + std::to_string(kModelVersion) +
                        " only (retrain, or use the build that wrote it)");
  }
  if (!r.Get(task)) return Status::Data(cut + "header");
  if (*task > static_cast<uint32_t>(Task::kClassification)) {
    return Status::Data("unknown task " + std::to_string(*task));
  }
  return Status::Ok();
}

// The loss, which must be the task's and fit the model's outputs.
Status DecodeLoss(ByteReader& r, uint32_t task, ModelSpec* spec) {
  const std::string cut = "cut short (truncated) in the ";
  uint32_t loss = 0;
  if (!r.Get(&loss)) return Status::Data(cut + "header");
  if (loss > static_cast<uint32_t>(Loss::kXent)) return Status::Data("unknown loss");
  spec->loss = static_cast<Loss>(loss);
  if (static_cast<uint32_t>(TaskOf(spec->loss)) != task) {
    return Status::Data("task and loss disagree");
  }
  if (spec->loss == Loss::kMse ? spec->outputs() != 1 : spec->outputs() < 2) {
    return Status::Data("loss " + std::string(ToString(spec->loss)) + " with " +
                        std::to_string(spec->outputs()) + " outputs");
  }
  return Status::Ok();
}

// The input scaling: its kind, and an offset and a scale per input unless it is kNone.
Status DecodeNormalization(ByteReader& r, const ModelSpec& spec, data::Normalizer* norm) {
  const std::string cut = "cut short (truncated) in the ";
  uint32_t kind = 0, nf = 0;
  if (!r.Get(&kind) || !r.Get(&nf)) return Status::Data(cut + "normalisation");
  if (kind > static_cast<uint32_t>(Normalize::kChannel)) {
    return Status::Data("unknown normalisation");
  }
  norm->kind = static_cast<Normalize>(kind);
  // Training fits channel statistics on images only (data/preprocess.h).
  if (norm->kind == Normalize::kChannel && spec.input.Flat()) {
    return Status::Data("normalisation channel on the flat input " + spec.input.Text() +
                        " (it needs an image, c x h x w)");
  }
  const uint32_t want_nf =
      norm->kind == Normalize::kNone ? 0 : static_cast<uint32_t>(spec.inputs());
  if (nf != want_nf) {
    return Status::Data("normalisation has " + std::to_string(nf) + " features, expected " +
                        std::to_string(want_nf));
  }
  // Every count below is held to the bytes left before anything is allocated for it: a short
  // file may declare up to 2^24 features and 2^31 classes.
  if (r.left() < uint64_t{nf} * 2 * sizeof(float)) {
    return Status::Data(cut + "normalisation: " + std::to_string(nf) + " features need " +
                        std::to_string(uint64_t{nf} * 2 * sizeof(float)) +
                        " bytes (an offset and a scale each), the file has only " +
                        std::to_string(r.left()) + " more");
  }
  norm->offset.resize(nf);
  norm->scale.resize(nf);
  for (float& v : norm->offset) r.Get(&v);  // whole: the size is checked above
  for (float& v : norm->scale) r.Get(&v);
  return Status::Ok();
}

// The class list of a classification (empty otherwise): numbers in increasing order, or names
// in increasing order that a data file could hold.
Status DecodeClasses(ByteReader& r, uint32_t task, int64_t outputs, data::ClassMap* classes) {
  const std::string cut = "cut short (truncated) in the ";
  uint32_t k = 0, numeric = 0;
  if (!r.Get(&k) || !r.Get(&numeric)) return Status::Data(cut + "class list");
  const uint32_t want_k =
      task == static_cast<uint32_t>(Task::kClassification) ? static_cast<uint32_t>(outputs) : 0;
  if (k != want_k) {
    return Status::Data("class list of " + std::to_string(k) + " classes, expected " +
                        std::to_string(want_k));
  }
  if (numeric > 1) {
    return Status::Data("class label kind " + std::to_string(numeric) + " (expected 0 or 1)");
  }
  if (r.left() < uint64_t{k} * sizeof(uint32_t)) {
    return Status::Data(cut + "class list: " + std::to_string(k) + " classes need at least " +
                        std::to_string(uint64_t{k} * sizeof(uint32_t)) +
                        " bytes (a length each), the file has only " + std::to_string(r.left()) +
                        " more");
  }
  classes->numeric = numeric == 1;
  for (uint32_t i = 0; i < k; ++i) {
    uint32_t len = 0;
    std::string name;
    if (!r.Get(&len) || !r.GetBytes(len, &name)) return Status::Data(cut + "class list");
    if (classes->numeric) {
      double v = 0;
      const auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), v);
      if (ec != std::errc() || p != name.data() + name.size()) {
        return Status::Data("class " + std::to_string(i) + " is not a number");
      }
      if (!classes->values.empty() && !(v > classes->values.back())) {
        return Status::Data("class values out of order");
      }
      classes->values.push_back(v);
    } else if (!classes->names.empty() && !(name > classes->names.back())) {
      return Status::Data("class names out of order");
    } else if (const Status s = data::ClassMap::CheckName(name); !s.ok()) {
      return Status::Data("class " + std::to_string(i) + "'s name '" + Printable(name) + "' " +
                          s.message());
    }
    classes->names.push_back(std::move(name));
  }
  return Status::Ok();
}

// The parameters, as many as the layers take, and the checksum of every byte before it (of
// `bytes`, which r reads), which ends the file.
Status DecodeParams(ByteReader& r, const std::string& bytes, const ModelSpec& spec,
                    std::vector<float>* params) {
  const std::string cut = "cut short (truncated) in the ";
  uint64_t n = 0;
  if (!r.Get(&n)) return Status::Data(cut + "parameters");
  if (n != spec.ParamCount()) {
    return Status::Data("parameter count " + std::to_string(n) + " does not fit the layers (" +
                        std::to_string(spec.ParamCount()) + ")");
  }
  // n fits the layers: fewer than 4096 of at most 65536 x 2^31 parameters, so n * 4 cannot wrap.
  if (r.left() < n * sizeof(float) + sizeof(uint32_t)) {
    return Status::Data(cut + "parameters: the layers' " + std::to_string(n) + " parameters need " +
                        std::to_string(n * sizeof(float)) + " bytes and the checksum " +
                        std::to_string(sizeof(uint32_t)) + ", the file has only " +
                        std::to_string(r.left()) + " more");
  }
  if (r.left() > n * sizeof(float) + sizeof(uint32_t)) return Status::Data("trailing bytes");
  params->resize(n);
  if (n > 0) std::memcpy(params->data(), r.here(), n * sizeof(float));
  const size_t body = r.pos() + n * sizeof(float);
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + body, sizeof crc);
  if (crc != Crc32(bytes.data(), body)) {
    return Status::Data("checksum mismatch (the file is damaged)");
  }
  return Status::Ok();
}

// kData describing the first non-finite value of the decoded model, if it has one.
Status CheckFinite(const Model& m) {
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (!std::isfinite(m.params[i])) {
      return Status::Data("parameter " + std::to_string(i) + " of " +
                          std::to_string(m.params.size()) + " is " + NonFiniteName(m.params[i]) +
                          ": " + ParamName(m.spec, i));
    }
  }
  for (size_t j = 0; j < m.norm.offset.size(); ++j) {
    if (!std::isfinite(m.norm.offset[j])) {
      return Status::Data("the input offset of feature " + std::to_string(j) + " is " +
                          NonFiniteName(m.norm.offset[j]));
    }
    if (!std::isfinite(m.norm.scale[j])) {
      return Status::Data("the input scale of feature " + std::to_string(j) + " is " +
                          NonFiniteName(m.norm.scale[j]));
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckRunningVariances(const ModelSpec& spec, const std::vector<float>& params) {
  if (params.size() != spec.ParamCount()) return Status::Ok();  // the caller refuses the count
  for (const nn::NormSite& s : nn::NormSites(spec)) {
    for (int64_t k = 0; k < s.channels; ++k) {
      const size_t i = static_cast<size_t>(s.running + s.channels + k);
      const float v = params[i];
      if (std::isfinite(v) && v >= 0) continue;
      return Status::Data("parameter " + std::to_string(i) + " of " +
                          std::to_string(params.size()) + " is " +
                          (std::isfinite(v) ? Fmt("%g", v) : NonFiniteName(v)) +
                          ", and a running variance is a finite number, never negative: " +
                          ParamName(spec, i));
    }
  }
  return Status::Ok();
}

std::string NonFiniteName(float v) {
  if (std::isnan(v)) return "NaN";
  return v > 0 ? "+Inf" : "-Inf";
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

std::string ParamName(const ModelSpec& spec, size_t index) {
  std::vector<int> sizes;
  Activation activation;
  if (spec.AsMlp(&sizes, &activation)) {
    // The names of the releases before layers, whose exports index modules 2l.
    size_t at = index;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      const size_t in = static_cast<size_t>(sizes[l]);
      const size_t out = static_cast<size_t>(sizes[l + 1]);
      const std::string layer = "layer " + std::to_string(l);
      const std::string module = std::to_string(2 * l);
      if (at < in * out) {  // W_l(i, j) at i + j*out
        const std::string row = std::to_string(at % out), col = std::to_string(at / out);
        return layer + " weight row " + row + ", column " + col + " (" + module + ".weight[" +
               row + ", " + col + "] in an export)";
      }
      at -= in * out;
      if (at < out) {
        return layer + " bias " + std::to_string(at) + " (" + module + ".bias[" +
               std::to_string(at) + "] in an export)";
      }
      at -= out;
    }
    return "past the last layer";
  }
  // Layered models: the block and the element within it (in this build's layout).
  std::vector<Shape> shapes;
  if (!nn::ResolveShapes(spec.input, spec.layers, &shapes).ok())
    return "in a model that does not resolve";
  size_t at = index;
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const nn::LayerType& t = *nn::FindLayerType(spec.layers[i].kind);
    if (t.params != nullptr) {
      for (const nn::ParamBlock& b : t.params(spec.layers[i], in)) {
        const size_t size = static_cast<size_t>(b.Size());
        if (at < size) {
          return nn::LayerName(spec.layers, i) + " " + b.name + ", element " + std::to_string(at) +
                 " of " + std::to_string(size) + " (" + std::to_string(i) + "." + b.name +
                 " in an export)";
        }
        at -= size;
      }
    }
    in = shapes[i];
  }
  return "past the last layer";
}

std::string EncodeModel(const Model& m) {
  std::string s(kModelMagic, sizeof kModelMagic);
  AppendRaw<uint32_t>(&s, kModelVersion);
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(TaskOf(m.spec.loss)));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.input.c));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.input.h));
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.input.w));
  const std::string text = m.spec.Text();
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(text.size()));
  s += text;
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.spec.loss));
  const bool scaled = m.norm.kind != Normalize::kNone;
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.norm.kind));
  AppendRaw<uint32_t>(&s, scaled ? static_cast<uint32_t>(m.norm.offset.size()) : 0);
  if (scaled) {
    for (float v : m.norm.offset) AppendRaw<float>(&s, v);
    for (float v : m.norm.scale) AppendRaw<float>(&s, v);
  }
  AppendRaw<uint32_t>(&s, static_cast<uint32_t>(m.classes.size()));
  AppendRaw<uint32_t>(&s, m.classes.numeric ? 1 : 0);
  for (const std::string& name : m.classes.names) {
    AppendRaw<uint32_t>(&s, static_cast<uint32_t>(name.size()));
    s += name;
  }
  AppendRaw<uint64_t>(&s, m.params.size());
  s.append(reinterpret_cast<const char*>(m.params.data()), m.params.size() * sizeof(float));
  AppendRaw<uint32_t>(&s, Crc32(s.data(), s.size()));
  return s;
}

Status DecodeModel(const std::string& bytes, const std::string& path, Model* out) {
  auto bad = [&](const std::string& what) {
    return Status::Data(path + ": not a usable model file: " + what);
  };
  ByteReader r(bytes);
  uint32_t version = 0, task = 0;
  if (Status s = DecodeHeader(r, bytes.size(), &version, &task); !s.ok()) return bad(s.message());
  Model m;
  Status spec_status =
      version == kModelVersionMlp ? DecodeMlpSpec(r, &m.spec) : DecodeSpec(r, &m.spec);
  if (!spec_status.ok()) return bad(spec_status.message());
  if (Status s = DecodeLoss(r, task, &m.spec); !s.ok()) return bad(s.message());
  if (Status s = DecodeNormalization(r, m.spec, &m.norm); !s.ok()) return bad(s.message());
  if (Status s = DecodeClasses(r, task, m.spec.outputs(), &m.classes); !s.ok()) {
    return bad(s.message());
  }
  if (Status s = DecodeParams(r, bytes, m.spec, &m.params); !s.ok()) return bad(s.message());
  // A valid checksum only says the bytes are the ones written: no shmtrain run saves a
  // non-finite model, and one would predict NaN for every row.
  if (Status s = CheckFinite(m); !s.ok()) return bad(s.message());
  // Nor one with a negative running variance: evaluation would take its square root.
  if (Status s = CheckRunningVariances(m.spec, m.params); !s.ok()) return bad(s.message());
  *out = std::move(m);
  return Status::Ok();
}

Status ReadFileBytes(const std::string& path, const std::string& what, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Data(path + ": cannot open " + what + ": " + std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return Status::Data(path + ": cannot read " + what + ": " + std::strerror(e));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  *out = std::move(bytes);
  return Status::Ok();
}

Status LoadModel(const std::string& path, Model* out) {
  std::string bytes;
  if (Status s = ReadFileBytes(path, "model file", &bytes); !s.ok()) return s;
  return DecodeModel(bytes, path, out);
}

}  // namespace shmtrain
