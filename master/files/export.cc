#include "master/files/export.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "master/files/output_path.h"
#include "master/files/output_write.h"
#include "nn/layer.h"

namespace shmtrain::master {
namespace {

// The arrays of every layer's parameter blocks (TorchLayers), in PyTorch's layouts
// (nn::ToTorch); a buffer PyTorch keeps as an integer is int64.
void AppendParams(const ModelSpec& spec, const float* p, std::vector<data::NpyArray>* out) {
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
        out->push_back(data::NpyArray::Float32(b.name, b.torch_shape,
                                               std::vector<float>(q, q + b.Size())));
      }
      q += b.Size();
    }
  }
}

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

}  // namespace

std::vector<TorchLayer> TorchLayers(const ModelSpec& spec) {
  std::vector<int> sizes;
  Activation activation;
  const bool mlp = spec.AsMlp(&sizes, &activation);
  std::vector<Shape> shapes;
  const Status resolved = nn::ResolveShapes(spec.input, spec.layers, &shapes);
  SHMTRAIN_CHECK(resolved.ok(), "a model that does not resolve: " + resolved.message());
  std::vector<TorchLayer> layers;
  Shape in = spec.input;
  int64_t offset = 0, linears = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const nn::LayerType& t = *nn::FindLayerType(spec.layers[i].kind);
    if (t.params != nullptr) {
      // An MLP's module indices count an activation after every linear layer, nn.Identity too.
      const int64_t module = mlp ? 2 * linears++ : static_cast<int64_t>(i);
      TorchLayer l{&t, &spec.layers[i], in, offset, nn::ParamSize(t, spec.layers[i], in), {}};
      l.blocks = t.params(spec.layers[i], in);
      for (nn::ParamBlock& b : l.blocks) b.name = std::to_string(module) + "." + b.name;
      offset += l.size;
      layers.push_back(std::move(l));
    }
    in = shapes[i];
  }
  return layers;
}

Status ExportArrays(const Model& m, const std::string& path, std::vector<data::NpyArray>* out) {
  std::vector<data::NpyArray> a;
  std::vector<int> sizes;
  Activation activation;
  const bool mlp = m.spec.AsMlp(&sizes, &activation);
  AppendParams(m.spec, m.params.data(), &a);
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
  std::vector<data::NpyArray> arrays;
  // Messages about the arrays name the model: what is wrong is in it.
  if (Status s = ExportArrays(m, cmd.model_path, &arrays); !s.ok()) return s;
  std::string bytes;
  if (Status s = data::EncodeNpz(arrays, cmd.out_path, &bytes); !s.ok()) return s;
  if (Status s = WriteFileDurably(cmd.out_path, bytes); !s.ok()) return s;
  log.Info("export: " + cmd.model_path + " -> " + cmd.out_path + " (" +
               std::to_string(arrays.size()) + " arrays, " + std::to_string(bytes.size()) +
               " bytes)",
           JsonLine("export")
               .Str("model", cmd.model_path)
               .Str("out", cmd.out_path)
               .Int("arrays", static_cast<int64_t>(arrays.size()))
               .Int("bytes", static_cast<int64_t>(bytes.size())));
  return Status::Ok();
}

}  // namespace shmtrain::master
