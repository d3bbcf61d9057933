// Models as ONNX graphs (onnx.ai, "Open Neural Network Exchange"; docs/models.md, "Using a
// model elsewhere"): the graph a model's layers build, each type's to_onnx hook (nn/layer.h)
// adding its nodes, and its encoding as an ONNX ModelProto (onnx/onnx.proto, by the wire format
// of core/protobuf.h).
//
// Opset 13 of the default domain, IR version 7: the oldest pair with every operator used here
// at its current meaning (Softmax over one axis is opset 13's), so the oldest readers still
// take the file: ONNX Runtime from 1.6, onnx 1.8, OpenCV's dnn, TensorRT 8.
//
// Values are NCHW tensors ([N, C, H, W]) or rows ([N, F]): the rank each value has is kept
// beside it, since our flat vectors hold an image channels-last (nn/layer.h, "Tensors") and a
// layer that reads one as a row (linear, the model's outputs) must put the channels last
// first (Flat). The batch dimension is symbolic ("N").
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shmtrain/model_spec.h"

namespace shmtrain::nn {

// A node's attribute: an INT, INTS or FLOAT.
struct OnnxAttr {
  enum Kind { kInt = 2, kFloat = 1, kInts = 7 };
  std::string name;
  Kind kind = kInts;
  std::vector<int64_t> ints;
  float f = 0;
  static OnnxAttr Int(std::string name, int64_t v) { return {std::move(name), kInt, {v}, 0}; }
  static OnnxAttr Ints(std::string name, std::vector<int64_t> v) {
    return {std::move(name), kInts, std::move(v), 0};
  }
  static OnnxAttr Float(std::string name, float v) { return {std::move(name), kFloat, {}, v}; }
};

// An initializer: raw little-endian elements of type kFloat (float32) or kInt64.
struct OnnxTensor {
  static constexpr int32_t kFloat = 1, kInt64 = 7;
  std::string name;
  std::vector<int64_t> dims;
  int32_t type = kFloat;
  std::string raw;
};

struct OnnxNode {
  std::string op, name;
  std::vector<std::string> inputs;
  std::string output;
  std::vector<OnnxAttr> attrs;
};

class OnnxGraph {
 public:
  // The graph's input: float32 of dims {N, F} or {N, C, H, W} (N: the batch, written "N").
  void Input(const std::string& name, std::vector<int64_t> dims);
  // Marks value `value` (a node's output) as a graph output of dims (N first).
  void Output(const std::string& value, std::vector<int64_t> dims);

  // A tensor layers may name as a parameter (Param); only those named go into the file.
  void Offer(OnnxTensor t);
  // The offered tensor `name` as an initializer of the graph. Aborts when none was offered: a
  // layer naming a block that its type does not have is a bug.
  std::string Param(const std::string& name);
  // A constant of the graph's own (an adaptive pool's matrix, a shape): float32 or 1-d int64.
  std::string Floats(const std::string& name, std::vector<int64_t> dims,
                     const std::vector<float>& v);
  std::string Ints(const std::string& name, const std::vector<int64_t>& v);

  // Node op(inputs) with one output, named `name` (made unique), of rank `rank` (0: its first
  // input's). Returns the output's value.
  std::string Node(const std::string& op, std::vector<std::string> inputs, const std::string& name,
                   std::vector<OnnxAttr> attrs = {}, int rank = 0);
  int Rank(const std::string& value) const;
  // Value x, of shape s, as a row in our flat order ([N, s.Size()]): x itself when it is one,
  // a Flatten when s has one pixel, else the channels put last first (Transpose, Flatten).
  std::string Flat(const std::string& x, Shape s, const std::string& name);

  // The ModelProto: this graph named `name`, opset 13, with `metadata` as metadata_props.
  std::string Encode(const std::string& name, const std::string& doc,
                     const std::vector<std::pair<std::string, std::string>>& metadata) const;

 private:
  std::string Unique(const std::string& name);

  std::vector<OnnxNode> nodes_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs_, outputs_;
  std::vector<OnnxTensor> initializers_;
  std::map<std::string, OnnxTensor> offered_;
  std::set<std::string> used_names_;
  std::map<std::string, int> rank_;
};

}  // namespace shmtrain::nn
