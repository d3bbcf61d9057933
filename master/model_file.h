// Saved models: a self-describing, versioned, checksummed binary file.
//
// Format version 2 (all integers little-endian; the spec is README.md, "Model files"):
//   char[8] "SHMTMODL", u32 version (2), u32 task (Task), u32 L, i32[L] layer sizes,
//   u32 activation, u32 loss, u32 normalisation (Normalize), u32 F (layers[0], or 0 without
//   normalisation), f32[F] offsets, f32[F] scales, u32 K classes (outputs when classifying,
//   else 0), u32 numeric (1: the labels are numbers), K x (u32 length, bytes) class labels in
//   class order, u64 n parameters, f32[n] parameters (include/shmtrain/model_spec.h layout),
//   u32 CRC-32 of every byte before it.
// Files are written durably: a temporary file beside the target, fsync, rename, fsync of the
// directory, so a crash leaves the old file or the new one, never a mix.
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
inline constexpr uint32_t kModelVersion = 2;  // on disk: bump on any change of the format

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
// Parses bytes read from `path` (the name is only for messages). kData on any damage.
Status DecodeModel(const std::string& bytes, const std::string& path, Model* out);

// Writes `bytes` to `path` durably (see above). kResource on failure, naming the path.
Status WriteFileDurably(const std::string& path, const std::string& bytes);
// The directory WriteFileDurably writes in: "." for a bare name, "/" for a file at the root.
std::string DirOf(const std::string& path);

Status SaveModel(const std::string& path, const Model& m);
Status LoadModel(const std::string& path, Model* out);

}  // namespace shmtrain
