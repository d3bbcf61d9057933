#include "data/preprocess.h"

#include <cmath>
#include <string>

#include "nn/rng.h"

namespace shmtrain::data {

Normalizer Normalizer::Fit(const Dataset& train, Normalize kind) {
  Normalizer n;
  n.kind = kind;
  const int f = train.features;
  n.offset.assign(f, 0.0f);
  n.scale.assign(f, 1.0f);
  if (kind == Normalize::kNone || train.rows == 0) return n;
  for (int j = 0; j < f; ++j) {
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    for (int64_t i = 0; i < train.rows; ++i) {
      const double v = train.x[i * f + j];
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
    const double mean = sum / train.rows;
    for (int64_t i = 0; i < train.rows; ++i) {
      const double dv = train.x[i * f + j] - mean;
      sq += dv * dv;
    }
    const double sd = std::sqrt(sq / train.rows);
    if (kind == Normalize::kMinMax) {
      n.offset[j] = static_cast<float>(lo);
      n.scale[j] = hi > lo ? static_cast<float>(1.0 / (hi - lo)) : 1.0f;
    } else {
      n.offset[j] = static_cast<float>(mean);
      n.scale[j] = sd > 0 ? static_cast<float>(1.0 / sd) : 1.0f;
    }
  }
  return n;
}

void Normalizer::Apply(Dataset* d) const {
  if (kind == Normalize::kNone) return;
  const int f = d->features;
  for (int64_t i = 0; i < d->rows; ++i) {
    for (int j = 0; j < f; ++j) {
      float& v = d->x[i * f + j];
      v = (v - offset[j]) * scale[j];
    }
  }
}

Status SplitValidation(const Dataset& all, double frac, uint64_t seed, Dataset* train,
                       Dataset* val) {
  const int64_t n_val = static_cast<int64_t>(std::llround(frac * static_cast<double>(all.rows)));
  if (frac > 0 && (n_val < 1 || n_val >= all.rows)) {
    return Status::Usage("--val-split: " + std::to_string(frac) + " of " +
                         std::to_string(all.rows) + " rows leaves " +
                         (n_val < 1 ? "no held-out row" : "no training row"));
  }
  std::vector<char> is_val(all.rows, 0);
  if (n_val > 0) {
    nn::Rng rng(nn::MixSeed(seed, kSplitStream));
    std::vector<int64_t> perm;
    nn::Permutation(all.rows, rng, &perm);
    for (int64_t k = 0; k < n_val; ++k) is_val[perm[k]] = 1;
  }
  Dataset tr, va;
  tr.features = va.features = all.features;
  tr.classes = va.classes = all.classes;
  for (int64_t i = 0; i < all.rows; ++i) {
    Dataset& d = is_val[i] ? va : tr;
    d.x.insert(d.x.end(), all.x.begin() + i * all.features, all.x.begin() + (i + 1) * all.features);
    if (!all.y.empty()) d.y.push_back(all.y[i]);  // rows without labels (predict)
    ++d.rows;
  }
  *train = std::move(tr);
  *val = std::move(va);
  return Status::Ok();
}

}  // namespace shmtrain::data
