// Checkpoints: the state a run needs to continue exactly where it stopped.
//
// Format version 1 (little-endian; README.md, "Checkpoints"):
//   char[8] "SHMTCKPT" | u32 version | u32 mode | i64 step | u64 run fingerprint |
//   u64 n | u32 has_momentum | f32 W[n] | f32 V[n] if has_momentum | u32 CRC-32 of all before
// The fingerprint hashes everything that decides the trajectory (model, optimiser, batch,
// seed, P, mode and rule, and the training data's bytes), so a checkpoint is never resumed
// into a different run. Files are written durably (temporary file, fsync, rename, fsync of
// the directory): a crash leaves the previous checkpoint or the new one, never a mix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain {

inline constexpr char kCheckpointMagic[8] = {'S', 'H', 'M', 'T', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 1;  // on disk: bump on any change

struct Checkpoint {
  Mode mode = Mode::kSync;
  int64_t step = 0;  // sync: steps completed; async: updates applied
  uint64_t fingerprint = 0;
  std::vector<float> params;
  std::vector<float> momentum;  // empty without momentum
};

// The fingerprint of a run: options that shape the trajectory, and the training rows.
uint64_t RunFingerprint(const TrainOptions& o, const data::Dataset& train);

Status SaveCheckpoint(const std::string& path, const Checkpoint& c);
// kData with a message naming the file on any damage (short, bad magic or version, sizes,
// checksum).
Status LoadCheckpoint(const std::string& path, Checkpoint* out);

}  // namespace shmtrain
