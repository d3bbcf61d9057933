// Checkpoints: the state a run needs to continue exactly where it stopped.
//
// Format version 2 (little-endian; docs/failures.md, "Checkpoints"):
//   char[8] "SHMTCKPT" | u32 version | u32 mode | i64 step | u64 run fingerprint |
//   u64 n | u32 K | u32 m | char[m] optimizer | f32 W[n] | f32 S[K][n] | u32 CRC-32 of all before
// A file whose parameters or optimizer state are not all finite is refused at load.
// K is the number of optimizer state vectors (nn/optimizer.h: 0 for plain SGD, 1 for momentum,
// 2 for Adam); "optimizer" is nn::Describe of the run's OptimConfig, kept to name what differs
// when a run with other settings tries to resume it. The fingerprint hashes everything that
// decides the trajectory (model, the resolved optimizer with its schedule and clipping, batch,
// seed, P, mode and async rule, and the training data's bytes), so a checkpoint is never
// resumed into a different run. Files are written durably (temporary file, fsync, rename,
// fsync of the directory): a crash leaves the previous checkpoint or the new one, never a mix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "shmtrain/optim_config.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain {

inline constexpr char kCheckpointMagic[8] = {'S', 'H', 'M', 'T', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 2;  // on disk: bump on any change

struct Checkpoint {
  Mode mode{};  // the writing run's kind's (RunKind::mode), as its segment header has it
  int64_t step = 0;  // sync: steps completed; async: updates applied
  uint64_t fingerprint = 0;
  std::string optimizer;  // nn::Describe of the writer's OptimConfig
  std::vector<float> params;
  std::vector<std::vector<float>> states;  // K optimizer state vectors of params.size() each
};

// What the fingerprint keeps of the training rows: their shape and checksums.
struct DataDigest {
  int64_t rows = 0;
  int32_t features = 0;
  uint32_t x_crc = 0, y_crc = 0;
};
DataDigest DigestOf(const data::Dataset& train);

// The fingerprint of a run: options that shape the trajectory, its resolved optimizer, and
// the training rows.
uint64_t RunFingerprint(const TrainOptions& o, const OptimConfig& optim,
                        const data::Dataset& train);
uint64_t RunFingerprint(const TrainOptions& o, const OptimConfig& optim, const DataDigest& train);

// The file's bytes (written with master/files/output_write.h), and their count for n parameters,
// `states` optimizer state vectors and the optimizer's description.
std::string EncodeCheckpoint(const Checkpoint& c);
uint64_t CheckpointSize(int64_t n, int states, const std::string& optimizer);
// kData with a message naming the file on any damage (short, bad magic or version, sizes,
// checksum), and when a parameter or an optimizer state value is not finite (naming the first).
Status LoadCheckpoint(const std::string& path, Checkpoint* out);
// The same from the file's bytes; `path` only names the file in messages.
Status DecodeCheckpoint(const std::string& bytes, const std::string& path, Checkpoint* out);

}  // namespace shmtrain
