// Saved models: a self-describing, versioned, checksummed binary file.
//
// Format version 3 (all integers little-endian; the spec is docs/models.md, "Model files"):
//   char[8] "SHMTMODL", u32 version (3), u32 task (Task), u32 c, u32 h, u32 w (the input
//   shape), u32 T, T bytes of model text (nn/layer.h, canonical), u32 loss, u32 normalisation
//   (Normalize), u32 F (c*h*w, or 0 without normalisation), f32[F] offsets, f32[F] scales,
//   u32 K classes (outputs when classifying, else 0), u32 numeric (1: the labels are
//   numbers), K x (u32 length, bytes) class labels in class order, u64 n parameters, f32[n]
//   parameters (include/shmtrain/model_spec.h layout), u32 CRC-32 of every byte before it.
// Version 2, written by the releases before layered models, is read too: in place of the
// input shape and the model text it holds an MLP's u32 L, i32[L] layer sizes, u32 activation.
// Files are written durably: a temporary file beside the target, fsync, rename, fsync of the
// directory, so a crash leaves the old file or the new one, never a mix. Outputs that are not
// regular files (FIFOs, character devices, /dev/stdout) are written in place, never replaced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/preprocess.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain {

inline constexpr char kModelMagic[8] = {'S', 'H', 'M', 'T', 'M', 'O', 'D', 'L'};
inline constexpr uint32_t kModelVersion = 3;  // on disk: bump on any change of the format
inline constexpr uint32_t kModelVersionMlp = 2;  // the MLP-only releases' files, still read
// The most values an input sample of a model file may declare (the text: kMaxModelText).
inline constexpr uint64_t kMaxModelInputs = uint64_t{1} << 24;

// Everything needed to use a trained model on new rows: scale the features with `norm`, run
// the network, and name the predicted class with `classes`.
struct Model {
  ModelSpec spec;
  data::Normalizer norm;   // kind kNone: features are used as they are
  data::ClassMap classes;  // classification: output k is classes.names[k]; else empty
  std::vector<float> params;
};

// The file's bytes.
std::string EncodeModel(const Model& m);
// Parses bytes read from `path` (the name is only for messages). kData on any damage, and on
// a parameter or an input scaling that is not finite (naming the first, with ParamName).
Status DecodeModel(const std::string& bytes, const std::string& path, Model* out);

// The name of parameter `index` in spec's layout (include/shmtrain/model_spec.h), for
// messages: "layer 1 weight row 2, column 0 (2.weight[2, 0] in an export)" or "layer 0 bias
// 3 (0.bias[3] in an export)"; layers, rows (output units) and columns (inputs) count from 0.
std::string ParamName(const ModelSpec& spec, size_t index);
// kData naming the first running_var entry of a batch norm layer of spec that is negative or
// not finite in params (spec's flat vector), with ParamName: no run makes one, and evaluation
// normalises by its square root. Model files (DecodeModel) and resumed checkpoints, whose
// model is the run's, are refused with it.
Status CheckRunningVariances(const ModelSpec& spec, const std::vector<float>& params);
// "NaN", "+Inf" or "-Inf" for a non-finite value, for messages.
std::string NonFiniteName(float v);
// Every value of v is finite: what a run must hold before it writes a model or a checkpoint.
bool AllFinite(const std::vector<float>& v);

// Reads all of file `path`: the one whole-file read of the binary formats (model files,
// checkpoints). kData naming the path and `what` ("model file") when it cannot be opened or
// read.
Status ReadFileBytes(const std::string& path, const std::string& what, std::string* out);

Status LoadModel(const std::string& path, Model* out);

}  // namespace shmtrain
