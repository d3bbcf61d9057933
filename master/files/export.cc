#include "master/files/export.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "master/files/output_path.h"
#include "master/files/output_write.h"
#include "nn/layer.h"

namespace shmtrain::master {
namespace {

// Layer l's weight as nn.Linear holds it: row-major out x in. The parameter vector keeps it
// column-major (include/shmtrain/model_spec.h), W(i, j) at i + j*out, so it is transposed.
std::vector<float> RowMajorWeight(const float* w, int in, int out) {
  std::vector<float> t(static_cast<size_t>(in) * out);
  for (int i = 0; i < out; ++i) {
    for (int j = 0; j < in; ++j) {
      t[static_cast<size_t>(i) * in + j] = w[static_cast<size_t>(j) * out + i];
    }
  }
  return t;
}

// An MLP: "{2l}.weight" and "{2l}.bias" for every linear layer, as the releases before
// layered models named them (the odd indices are the activation modules, nn.Identity too).
void AppendMlp(const std::vector<int>& sizes, const float* p, std::vector<data::NpyArray>* out) {
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    const int in = sizes[l], n = sizes[l + 1];
    const std::string module = std::to_string(2 * l);
    out->push_back(data::NpyArray::Float32(module + ".weight", {n, in}, RowMajorWeight(p, in, n)));
    p += static_cast<size_t>(in) * n;
    out->push_back(data::NpyArray::Float32(module + ".bias", {n}, std::vector<float>(p, p + n)));
    p += n;
  }
}

// Any model: "{i}.{block}" for layer i's parameter blocks, in PyTorch's layouts
// (nn::LayerType::to_torch): one module index per layer, as nn.Sequential numbers them. A
// residual block's blocks are its layers' ("{i}.body.{j}.weight", "{i}.shortcut.{k}.weight":
// nn/layers/residual.cc); a buffer PyTorch keeps as an integer is int64.
void AppendLayered(const ModelSpec& spec, const float* p, std::vector<data::NpyArray>* out) {
  std::vector<Shape> shapes;
  const Status resolved = nn::ResolveShapes(spec.input, spec.layers, &shapes);
  SHMTRAIN_CHECK(resolved.ok(), "a decoded model that does not resolve: " + resolved.message());
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const nn::LayerType& t = *nn::FindLayerType(spec.layers[i].kind);
    if (t.params != nullptr) {
      const std::vector<nn::ParamBlock> blocks = t.params(spec.layers[i], in);
      const int64_t size = nn::ParamSize(t, spec.layers[i], in);
      std::vector<float> torch(p, p + size);
      if (t.to_torch != nullptr) t.to_torch(spec.layers[i], in, p, torch.data());
      const float* q = torch.data();
      for (const nn::ParamBlock& b : blocks) {
        const std::string name = std::to_string(i) + "." + b.name;
        if (b.integer) {  // a count PyTorch keeps as int64 (num_batches_tracked)
          std::vector<int64_t> v(static_cast<size_t>(b.Size()));
          for (size_t e = 0; e < v.size(); ++e) v[e] = std::llround(q[e]);
          out->push_back(data::NpyArray::Int64(name, b.torch_shape, v));
        } else {
          out->push_back(data::NpyArray::Float32(name, b.torch_shape,
                                                 std::vector<float>(q, q + b.Size())));
        }
        q += b.Size();
      }
      p += size;
    }
    in = shapes[i];
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

Status ExportArrays(const Model& m, const std::string& path, std::vector<data::NpyArray>* out) {
  std::vector<data::NpyArray> a;
  std::vector<int> sizes;
  Activation activation;
  const bool mlp = m.spec.AsMlp(&sizes, &activation);
  if (mlp) {
    AppendMlp(sizes, m.params.data(), &a);
  } else {
    AppendLayered(m.spec, m.params.data(), &a);
  }
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
