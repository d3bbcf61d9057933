// `shmtrain export --out M.onnx`: a saved model as an ONNX model (nn/onnx.h: opset 13, IR
// version 7) that takes what `shmtrain predict` takes and gives what it prints.
//
//   "input"          float32 [N, C, H, W] for a model that takes images (nn::TakesImages),
//                    else [N, F]: the rows as the data holds them, unscaled
//   "input.offset",  a model with --normalize: Sub then Mul, x' = (x - offset) * scale, of dims
//   "input.scale"    (C, H, W) or (F) (the export's arrays of those names, reshaped)
//   the layers       each type's nodes (nn::LayerType::to_onnx), named after its module
//                    ("3", "3.body.0"), its initializers as the .npz export names its arrays
//                    ("3.weight", in PyTorch's layouts; num_batches_tracked is left out)
//   "probabilities"  classification: float32 [N, K], the softmax of the outputs
//   "value"          regression: float32 [N, outputs]
// metadata_props: "classes" (classification: a JSON array of the labels, output k's at k, as
// predict names them), "model" (the model text), "loss", "normalize".
#pragma once

#include <string>

#include "master/files/model_file.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// The ONNX file's bytes of model `m` (read from `path`, named in messages). kData when a text
// class label is not UTF-8 (ONNX's strings are).
Status EncodeOnnx(const Model& m, const std::string& path, std::string* out);

}  // namespace shmtrain::master
