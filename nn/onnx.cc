#include "nn/onnx.h"

#include "core/protobuf.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {
namespace {

using protobuf::BytesField;
using protobuf::FloatField;
using protobuf::IntField;

constexpr int64_t kOpset = 13, kIrVersion = 7;

// TensorProto: dims (1), data_type (2), name (8), raw_data (9).
std::string TensorBytes(const OnnxTensor& t) {
  std::string b;
  for (const int64_t d : t.dims) IntField(&b, 1, d);
  IntField(&b, 2, t.type);
  BytesField(&b, 8, t.name);
  BytesField(&b, 9, t.raw);
  return b;
}

// AttributeProto: name (1), f (2), i (3), ints (8), type (20).
std::string AttrBytes(const OnnxAttr& a) {
  std::string b;
  BytesField(&b, 1, a.name);
  if (a.kind == OnnxAttr::kFloat) FloatField(&b, 2, a.f);
  if (a.kind == OnnxAttr::kInt) IntField(&b, 3, a.ints.at(0));
  if (a.kind == OnnxAttr::kInts) {
    for (const int64_t v : a.ints) IntField(&b, 8, v);
  }
  IntField(&b, 20, a.kind);
  return b;
}

// NodeProto: input (1), output (2), name (3), op_type (4), attribute (5).
std::string NodeBytes(const OnnxNode& n) {
  std::string b;
  for (const std::string& in : n.inputs) BytesField(&b, 1, in);
  BytesField(&b, 2, n.output);
  BytesField(&b, 3, n.name);
  BytesField(&b, 4, n.op);
  for (const OnnxAttr& a : n.attrs) BytesField(&b, 5, AttrBytes(a));
  return b;
}

// ValueInfoProto name (1), type (2): TypeProto.tensor_type (1): elem_type (1) float, shape (2)
// of dims (1), each dim_value (1) or dim_param (2); the first is the batch, "N".
std::string ValueInfoBytes(const std::string& name, const std::vector<int64_t>& dims) {
  std::string shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    std::string dim;
    if (i == 0) {
      BytesField(&dim, 2, "N");
    } else {
      IntField(&dim, 1, dims[i]);
    }
    BytesField(&shape, 1, dim);
  }
  std::string tensor;
  IntField(&tensor, 1, OnnxTensor::kFloat);
  BytesField(&tensor, 2, shape);
  std::string type;
  BytesField(&type, 1, tensor);
  std::string b;
  BytesField(&b, 1, name);
  BytesField(&b, 2, type);
  return b;
}

}  // namespace

void OnnxGraph::Input(const std::string& name, std::vector<int64_t> dims) {
  used_names_.insert(name);
  rank_[name] = static_cast<int>(dims.size());
  inputs_.emplace_back(name, std::move(dims));
}

void OnnxGraph::Output(const std::string& value, std::vector<int64_t> dims) {
  outputs_.emplace_back(value, std::move(dims));
}

void OnnxGraph::Offer(OnnxTensor t) {
  std::string name = t.name;
  offered_.emplace(std::move(name), std::move(t));
}

std::string OnnxGraph::Param(const std::string& name) {
  auto it = offered_.find(name);
  SHMTRAIN_CHECK(it != offered_.end(),
                 "an ONNX layer names parameter " + name + ", which the export does not have");
  used_names_.insert(name);
  initializers_.push_back(std::move(it->second));
  offered_.erase(it);
  return name;
}

std::string OnnxGraph::Floats(const std::string& name, std::vector<int64_t> dims,
                              const std::vector<float>& v) {
  OnnxTensor t{Unique(name), std::move(dims), OnnxTensor::kFloat, {}};
  for (const float f : v) AppendRaw(&t.raw, f);
  initializers_.push_back(t);
  return t.name;
}

std::string OnnxGraph::Ints(const std::string& name, const std::vector<int64_t>& v) {
  OnnxTensor t{Unique(name), {static_cast<int64_t>(v.size())}, OnnxTensor::kInt64, {}};
  for (const int64_t i : v) AppendRaw(&t.raw, i);
  initializers_.push_back(t);
  return t.name;
}

std::string OnnxGraph::Node(const std::string& op, std::vector<std::string> inputs,
                            const std::string& name, std::vector<OnnxAttr> attrs, int rank) {
  OnnxNode n{op, Unique(name), std::move(inputs), {}, std::move(attrs)};
  n.output = n.name;
  rank_[n.output] = rank != 0 ? rank : Rank(n.inputs.at(0));
  nodes_.push_back(std::move(n));
  return nodes_.back().output;
}

int OnnxGraph::Rank(const std::string& value) const {
  auto it = rank_.find(value);
  SHMTRAIN_CHECK(it != rank_.end(), "ONNX value " + value + " has no rank");
  return it->second;
}

std::string OnnxGraph::Flat(const std::string& x, Shape s, const std::string& name) {
  if (Rank(x) == 2) return x;
  std::string nhwc = x;
  if (s.h * s.w > 1) {
    nhwc = Node("Transpose", {x}, name + ".channels_last", {OnnxAttr::Ints("perm", {0, 2, 3, 1})});
  }
  return Node("Flatten", {nhwc}, name, {OnnxAttr::Int("axis", 1)}, 2);
}

std::string OnnxGraph::Unique(const std::string& name) {
  std::string u = name;
  for (int k = 2; used_names_.count(u) != 0; ++k) u = name + "_" + std::to_string(k);
  used_names_.insert(u);
  return u;
}

// ModelProto: ir_version (1), producer_name (2), producer_version (3), doc_string (6), graph
// (7), opset_import (8: domain (1) "", version (2)), metadata_props (14: key (1), value (2)).
// GraphProto: node (1), name (2), initializer (5), input (11), output (12).
std::string OnnxGraph::Encode(
    const std::string& name, const std::string& doc,
    const std::vector<std::pair<std::string, std::string>>& metadata) const {
  std::string g;
  for (const OnnxNode& n : nodes_) BytesField(&g, 1, NodeBytes(n));
  BytesField(&g, 2, name);
  for (const OnnxTensor& t : initializers_) BytesField(&g, 5, TensorBytes(t));
  for (const auto& [value, dims] : inputs_) BytesField(&g, 11, ValueInfoBytes(value, dims));
  for (const auto& [value, dims] : outputs_) BytesField(&g, 12, ValueInfoBytes(value, dims));
  std::string m;
  IntField(&m, 1, kIrVersion);
  BytesField(&m, 2, "shmtrain");
  BytesField(&m, 6, doc);
  BytesField(&m, 7, g);
  std::string opset;
  IntField(&opset, 2, kOpset);
  BytesField(&m, 8, opset);
  for (const auto& [key, value] : metadata) {
    std::string entry;
    BytesField(&entry, 1, key);
    BytesField(&entry, 2, value);
    BytesField(&m, 14, entry);
  }
  return m;
}

}  // namespace shmtrain::nn
