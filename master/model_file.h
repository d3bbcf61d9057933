// Saved models: a self-describing, versioned, checksummed binary file.
//
// Format version 1 (all integers little-endian; the spec is README.md, "Model files"):
//   offset 0   char[8]   "SHMTMODL"
//          8   u32       format version (1)
//         12   u32       L = number of layer sizes
//         16   i32[L]    layer sizes
//              u32       activation (Activation value)
//              u32       loss (Loss value)
//              u64       n = parameter count (must equal ModelSpec::ParamCount())
//              f32[n]    parameters, in the layout of include/shmtrain/model_spec.h
//              u32       CRC-32 of every byte before it
// Files are written durably: a temporary file beside the target, fsync, rename, fsync of the
// directory, so a crash leaves the old file or the new one, never a mix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain {

inline constexpr char kModelMagic[8] = {'S', 'H', 'M', 'T', 'M', 'O', 'D', 'L'};
inline constexpr uint32_t kModelVersion = 1;  // on disk: bump on any change of the format

struct Model {
  ModelSpec spec;
  std::vector<float> params;
};

// The file's bytes.
std::string EncodeModel(const Model& m);
// Parses bytes read from `path` (the name is only for messages). kData on any damage.
Status DecodeModel(const std::string& bytes, const std::string& path, Model* out);

// Writes `bytes` to `path` durably (see above). kResource on failure, naming the path.
Status WriteFileDurably(const std::string& path, const std::string& bytes);

Status SaveModel(const std::string& path, const Model& m);
Status LoadModel(const std::string& path, Model* out);

}  // namespace shmtrain
