#include "master/files/onnx_export.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "master/files/export.h"
#include "nn/onnx.h"

namespace shmtrain::master {
namespace {

using nn::OnnxAttr;
using nn::OnnxGraph;
using nn::OnnxTensor;

// The parameters' float arrays, offered under their export names (an integer buffer, which
// no operator reads, is left out).
void OfferParams(const Model& m, OnnxGraph* g) {
  std::vector<data::NpyArray> arrays;
  AppendParamArrays(m.spec, m.params.data(), &arrays);
  for (data::NpyArray& a : arrays) {
    if (a.descr == "<f4") {
      g->Offer({std::move(a.name), std::move(a.shape), OnnxTensor::kFloat, std::move(a.data)});
    }
  }
}

// The model's scaling as the graph's first nodes; the input itself without one.
std::string Scaled(const Model& m, const std::vector<int64_t>& sample, OnnxGraph* g) {
  if (m.norm.kind == Normalize::kNone) return "input";
  const std::string offset = g->Floats("input.offset", sample, m.norm.offset);
  const std::string scale = g->Floats("input.scale", sample, m.norm.scale);
  const std::string centred = g->Node("Sub", {"input", offset}, "input.centred");
  return g->Node("Mul", {centred, scale}, "input.scaled");
}

// The labels as JSON text; kData naming the first that is not UTF-8.
Status ClassesJson(const Model& m, const std::string& path, std::string* out) {
  nlohmann::json labels = nlohmann::json::array();
  for (size_t k = 0; k < m.classes.names.size(); ++k) {
    std::vector<uint32_t> code_points;
    if (Status s = data::DecodeUtf8(m.classes.names[k], &code_points); !s.ok()) {
      return Status::Data(path + ": class " + std::to_string(k) + "'s label is not UTF-8 (" +
                          s.message() +
                          "); ONNX's strings are UTF-8, so text labels must be "
                          "to export (save the training data as UTF-8 and train again)");
    }
    labels.push_back(m.classes.names[k]);
  }
  *out = labels.dump();
  return Status::Ok();
}

}  // namespace

Status EncodeOnnx(const Model& m, const std::string& path, std::string* out) {
  std::vector<std::pair<std::string, std::string>> metadata;
  const bool xent = m.spec.loss == Loss::kXent;
  if (xent) {
    std::string classes;
    if (Status s = ClassesJson(m, path, &classes); !s.ok()) return s;
    metadata.emplace_back("classes", std::move(classes));
  }
  metadata.emplace_back("model", m.spec.Text());
  metadata.emplace_back("loss", ToString(m.spec.loss));
  metadata.emplace_back("normalize", ToString(m.norm.kind));

  OnnxGraph g;
  OfferParams(m, &g);
  const Shape in = m.spec.input;
  const bool images = nn::TakesImages(in, m.spec.layers);
  const std::vector<int64_t> sample =
      images ? std::vector<int64_t>{in.c, in.h, in.w} : std::vector<int64_t>{in.Size()};
  std::vector<int64_t> dims = {-1};
  dims.insert(dims.end(), sample.begin(), sample.end());
  g.Input("input", dims);
  std::string x = Scaled(m, sample, &g);

  std::vector<Shape> shapes;
  const Status resolved = nn::ResolveShapes(in, m.spec.layers, &shapes);
  SHMTRAIN_CHECK(resolved.ok(), "a decoded model that does not resolve: " + resolved.message());
  const std::vector<std::string> modules = ModuleNames(m.spec);
  Shape at = in;
  for (size_t i = 0; i < m.spec.layers.size(); ++i) {
    const nn::LayerType& t = *nn::FindLayerType(m.spec.layers[i].kind);
    x = t.to_onnx(m.spec.layers[i], at, shapes[i], modules[i], x, g);
    at = shapes[i];
  }
  x = g.Flat(x, at, "outputs");
  const int64_t outputs = m.spec.outputs();
  if (xent) {
    g.Output(g.Node("Softmax", {x}, "probabilities", {OnnxAttr::Int("axis", 1)}), {-1, outputs});
  } else {
    g.Output(g.Node("Identity", {x}, "value"), {-1, outputs});
  }
  *out =
      g.Encode("shmtrain", "model " + m.spec.Text() + ", loss " + ToString(m.spec.loss), metadata);
  return Status::Ok();
}

}  // namespace shmtrain::master
