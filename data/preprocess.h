// Held-out splits and feature scaling.
//
// Statistics are fitted on the training rows only and then applied to every other set (the
// held-out rows now; eval/predict data later), so nothing about held-out data leaks into
// training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

// x' = (x - offset[j]) * scale[j] for feature j.
//   minmax:   offset = min, scale = 1 / (max - min)  -> [0, 1] on the training rows
//   standard: offset = mean, scale = 1 / stddev (population)
//   channel:  for image rows (c x h x w, channels first, as the layers read them): offset =
//             the mean of the feature's channel over every training row and pixel, scale =
//             1 / that channel's stddev (population, ddof 0), both summed in double: what
//             torchvision's Normalize(mean, std) does with a data set's statistics. Each
//             feature holds its channel's values, so a model file and an export store them
//             as they store the other kinds'.
// A constant feature, or channel, gets scale 1 (it becomes 0), never a division by zero; so does
// one whose spread (max - min, or stddev) is so small that 1 / spread is beyond float (below
// about 2.9e-39, which only subnormal values reach): every scaled value, later data's included,
// would be infinite or NaN. (scikit-learn's scalers treat a zero spread as 1 too.) Any spread
// whose reciprocal float holds keeps it: data ten spreads outside the training range then scales
// to about 10, and a feature in small units (1e-27) is a feature, not a constant.
struct Normalizer {
  Normalize kind = Normalize::kNone;
  // One per feature; empty for kNone (the identity, which nothing needs to hold: a model file
  // without scaling holds none, however many inputs its model declares).
  std::vector<float> offset;
  std::vector<float> scale;

  // The statistics of `kind` on the training rows into *out. `input` is one row's shape (the
  // model's input, input.Size() == train.features): kChannel needs an image (h or w above 1)
  // and refuses flat rows with kUsage, pointing to --normalize standard; the other kinds
  // ignore it.
  static Status Fit(const Dataset& train, Normalize kind, Shape input, Normalizer* out);
  // Scales every row of d (its values are finite: the loaders refuse others). kDiverged when a
  // scaled value is not finite, as a value far outside the training rows' range can make it
  // ((1000 - 0) * 1e37 on a feature that spans 1e-37 in training): the message names src, the
  // rows, and the first such value with its feature and statistics. d is then partly scaled.
  Status Apply(Dataset* d, const std::string& src) const;
};

// Moves round(frac * rows) rows, chosen by a permutation drawn from
// nn::Rng(nn::MixSeed(seed, kSplitStream)), into *val; the rest stay in *train. Both keep the
// rows' original order. frac = 0: *val is empty. kUsage when a side would be empty.
inline constexpr uint64_t kSplitStream = 0x53504C4954ull;  // "SPLIT"
// `all` is taken by value: a caller that moves it in has its rows split without a copy.
Status SplitValidation(Dataset all, double frac, uint64_t seed, Dataset* train, Dataset* val);

}  // namespace shmtrain::data
