#include "master/files/export.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "master/files/onnx_export.h"
#include "master/files/output_path.h"
#include "master/files/output_write.h"
#include "nn/layer.h"

namespace shmtrain::master {
namespace {

// Output k's label: the class values, or their text.
Status AppendClasses(const Model& m, const std::string& path, std::vector<data::NpyArray>* out) {
  if (m.spec.loss != Loss::kXent) return Status::Ok();
  const int64_t k = m.classes.size();
  if (m.classes.numeric) {
    out->push_back(data::NpyArray::Float64("classes", {k}, m.classes.values));
    return Status::Ok();
  }
  data::NpyArray a;
  if (Status s = data::NpyUnicode("classes", {k}, m.classes.names, path, &a); !s.ok()) {
    return Status::Data(s.message() +
                        "; NumPy text arrays hold Unicode, so text labels must be "
                        "UTF-8 to export (save the training data as UTF-8 and train again)");
  }
  out->push_back(std::move(a));
  return Status::Ok();
}

// A 0-d text array (ASCII names from model_spec.h: never fails).
data::NpyArray Text(const std::string& name, const std::string& value) {
  data::NpyArray a;
  const Status s = data::NpyUnicode(name, {}, {value}, "", &a);
  SHMTRAIN_CHECK(s.ok(), "export name " + name + ": " + s.message());  // ours: ASCII
  return a;
}

// --out's format: ONNX for a name ending in .onnx (any case), else .npz.
bool IsOnnxPath(const std::string& path) {
  constexpr std::string_view kExt = ".onnx";
  if (path.size() < kExt.size()) return false;
  return std::equal(kExt.begin(), kExt.end(), path.end() - kExt.size(), [](char a, char b) {
    return a == std::tolower(static_cast<unsigned char>(b));
  });
}

}  // namespace

bool IsExportNonParameter(const std::string& name) {
  constexpr std::string_view kNames[] = {"input.offset", "input.scale", "classes",     "layers",
                                         "activation",   "model",       "input_shape", "loss"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

std::vector<std::string> ModuleNames(const ModelSpec& spec) {
  std::vector<int> sizes;
  Activation activation;
  const bool mlp = spec.AsMlp(&sizes, &activation);
  std::vector<std::string> names;
  int64_t linears = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    // An MLP's indices count an activation after every linear layer, nn.Identity too.
    if (!mlp) {
      names.push_back(std::to_string(i));
    } else if (spec.layers[i].kind == "linear") {
      names.push_back(std::to_string(2 * linears++));
    } else {
      names.push_back(std::to_string(2 * linears - 1));
    }
  }
  return names;
}

std::vector<TorchLayer> TorchLayers(const ModelSpec& spec) {
  const std::vector<std::string> modules = ModuleNames(spec);
  std::vector<Shape> shapes;
  const Status resolved = nn::ResolveShapes(spec.input, spec.layers, &shapes);
  SHMTRAIN_CHECK(resolved.ok(), "a model that does not resolve: " + resolved.message());
  std::vector<TorchLayer> layers;
  Shape in = spec.input;
  int64_t offset = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const nn::LayerType& t = *nn::FindLayerType(spec.layers[i].kind);
    if (t.params != nullptr) {
      TorchLayer l{&t, &spec.layers[i], in, offset, nn::ParamSize(t, spec.layers[i], in), {}};
      l.blocks = t.params(spec.layers[i], in);
      for (nn::ParamBlock& b : l.blocks) b.name = modules[i] + "." + b.name;
      offset += l.size;
      layers.push_back(std::move(l));
    }
    in = shapes[i];
  }
  return layers;
}

void AppendParamArrays(const ModelSpec& spec, const float* p, std::vector<data::NpyArray>* out) {
  for (const TorchLayer& l : TorchLayers(spec)) {
    std::vector<float> torch(static_cast<size_t>(l.size));
    nn::ToTorch(*l.type, *l.spec, l.in, p + l.offset, torch.data());
    const float* q = torch.data();
    for (const nn::ParamBlock& b : l.blocks) {
      if (b.integer) {  // a count PyTorch keeps as int64 (num_batches_tracked)
        std::vector<int64_t> v(static_cast<size_t>(b.Size()));
        for (size_t e = 0; e < v.size(); ++e) v[e] = std::llround(q[e]);
        out->push_back(data::NpyArray::Int64(b.name, b.torch_shape, v));
      } else {
        out->push_back(
            data::NpyArray::Float32(b.name, b.torch_shape, std::vector<float>(q, q + b.Size())));
      }
      q += b.Size();
    }
  }
}

Status ExportArrays(const Model& m, const std::string& path, std::vector<data::NpyArray>* out) {
  std::vector<data::NpyArray> a;
  std::vector<int> sizes;
  Activation activation;
  const bool mlp = m.spec.AsMlp(&sizes, &activation);
  AppendParamArrays(m.spec, m.params.data(), &a);
  const int64_t f = m.spec.inputs();
  // Without normalisation the export still has F offsets and scales: 0 and 1.
  const bool scaled = m.norm.kind != Normalize::kNone;
  const size_t want = scaled ? static_cast<size_t>(f) : 0;
  if (m.norm.offset.size() != want || m.norm.scale.size() != want) {
    return Status::Internal(path + ": the model's scaling has " +
                            std::to_string(m.norm.offset.size()) + " features, expected " +
                            std::to_string(want));
  }
  a.push_back(data::NpyArray::Float32(
      "input.offset", {f},
      scaled ? m.norm.offset : std::vector<float>(static_cast<size_t>(f), 0.0f)));
  a.push_back(data::NpyArray::Float32(
      "input.scale", {f},
      scaled ? m.norm.scale : std::vector<float>(static_cast<size_t>(f), 1.0f)));
  if (Status s = AppendClasses(m, path, &a); !s.ok()) return s;
  if (mlp) {
    const std::vector<int64_t> layers(sizes.begin(), sizes.end());
    a.push_back(data::NpyArray::Int64("layers", {static_cast<int64_t>(layers.size())}, layers));
    a.push_back(Text("activation", ToString(activation)));
  } else {
    a.push_back(Text("model", m.spec.Text()));
    a.push_back(data::NpyArray::Int64("input_shape", {3},
                                      {m.spec.input.c, m.spec.input.h, m.spec.input.w}));
  }
  a.push_back(Text("loss", ToString(m.spec.loss)));
  *out = std::move(a);
  return Status::Ok();
}

Status RunExport(const Command& cmd, Logger& log) {
  // Before the model is read: --out must be writable and must not overwrite the model.
  if (Status s = CheckOutputPath("--out", cmd.out_path, {{"--model", cmd.model_path}}); !s.ok()) {
    return s;
  }
  OutputLock out_lock;
  if (Status s = OutputLock::Acquire("--out", cmd.out_path, &out_lock); !s.ok()) return s;
  Model m;
  if (Status s = LoadModel(cmd.model_path, &m); !s.ok()) return s;
  const bool onnx = IsOnnxPath(cmd.out_path);
  std::vector<data::NpyArray> arrays;
  std::string bytes;
  // Messages about the arrays name the model: what is wrong is in it.
  if (onnx) {
    if (Status s = EncodeOnnx(m, cmd.model_path, &bytes); !s.ok()) return s;
  } else {
    if (Status s = ExportArrays(m, cmd.model_path, &arrays); !s.ok()) return s;
    if (Status s = data::EncodeNpz(arrays, cmd.out_path, &bytes); !s.ok()) return s;
  }
  if (Status s = WriteFileDurably(cmd.out_path, bytes); !s.ok()) return s;
  const std::string what = onnx ? "ONNX" : std::to_string(arrays.size()) + " arrays";
  log.Info("export: " + cmd.model_path + " -> " + cmd.out_path + " (" + what + ", " +
               std::to_string(bytes.size()) + " bytes)",
           JsonLine("export")
               .Str("model", cmd.model_path)
               .Str("out", cmd.out_path)
               .Str("format", onnx ? "onnx" : "npz")
               .Int("arrays", static_cast<int64_t>(arrays.size()))
               .Int("bytes", static_cast<int64_t>(bytes.size())));
  return Status::Ok();
}

}  // namespace shmtrain::master
