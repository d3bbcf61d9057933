// Held-out splits and feature scaling.
//
// Statistics are fitted on the training rows only and then applied to every other set (the
// held-out rows now; eval/predict data later), so nothing about held-out data leaks into
// training.
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

// x' = (x - offset[j]) * scale[j] for feature j.
//   minmax:   offset = min, scale = 1 / (max - min)  -> [0, 1] on the training rows
//   standard: offset = mean, scale = 1 / stddev (population)
// A constant feature gets scale 1 (it becomes 0), never a division by zero.
struct Normalizer {
  Normalize kind = Normalize::kNone;
  // One per feature; empty for kNone (the identity, which nothing needs to hold: a model file
  // without scaling holds none, however many inputs its model declares).
  std::vector<float> offset;
  std::vector<float> scale;

  static Normalizer Fit(const Dataset& train, Normalize kind);
  void Apply(Dataset* d) const;
};

// Moves round(frac * rows) rows, chosen by a permutation drawn from
// nn::Rng(nn::MixSeed(seed, kSplitStream)), into *val; the rest stay in *train. Both keep the
// rows' original order. frac = 0: *val is empty. kUsage when a side would be empty.
inline constexpr uint64_t kSplitStream = 0x53504C4954ull;  // "SPLIT"
// `all` is taken by value: a caller that moves it in has its rows split without a copy.
Status SplitValidation(Dataset all, double frac, uint64_t seed, Dataset* train, Dataset* val);

}  // namespace shmtrain::data
