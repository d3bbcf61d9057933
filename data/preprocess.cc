#include "data/preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nn/rng.h"

namespace shmtrain::data {

Normalizer Normalizer::Fit(const Dataset& train, Normalize kind) {
  Normalizer n;
  n.kind = kind;
  if (kind == Normalize::kNone) return n;
  const int f = train.features;
  n.offset.assign(f, 0.0f);
  n.scale.assign(f, 1.0f);
  if (train.rows == 0) return n;
  // Row by row, every column at once: the memory is read in order (a column at a time strides
  // over it). Each column's sums still add its rows in order, so the results are the same.
  std::vector<double> lo(f, INFINITY), hi(f, -INFINITY), sum(f, 0.0), sq(f, 0.0);
  for (int64_t i = 0; i < train.rows; ++i) {
    const float* row = &train.x[i * f];
    for (int j = 0; j < f; ++j) {
      const double v = row[j];
      lo[j] = std::min(lo[j], v);
      hi[j] = std::max(hi[j], v);
      sum[j] += v;
    }
  }
  std::vector<double> mean(f);
  for (int j = 0; j < f; ++j) mean[j] = sum[j] / train.rows;
  for (int64_t i = 0; i < train.rows; ++i) {
    const float* row = &train.x[i * f];
    for (int j = 0; j < f; ++j) {
      const double dv = row[j] - mean[j];
      sq[j] += dv * dv;
    }
  }
  for (int j = 0; j < f; ++j) {
    const double sd = std::sqrt(sq[j] / train.rows);
    if (kind == Normalize::kMinMax) {
      n.offset[j] = static_cast<float>(lo[j]);
      n.scale[j] = hi[j] > lo[j] ? static_cast<float>(1.0 / (hi[j] - lo[j])) : 1.0f;
    } else {
      n.offset[j] = static_cast<float>(mean[j]);
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

Status SplitValidation(Dataset all, double frac, uint64_t seed, Dataset* train, Dataset* val) {
  const int64_t n_val = static_cast<int64_t>(std::llround(frac * static_cast<double>(all.rows)));
  if (frac > 0 && (n_val < 1 || n_val >= all.rows)) {
    return Status::Usage("--val-split: " + std::to_string(frac) + " of " +
                         std::to_string(all.rows) + " rows leaves " +
                         (n_val < 1 ? "no held-out row" : "no training row"));
  }
  Dataset va;
  va.features = all.features;
  va.classes = all.classes;
  if (n_val > 0) {
    std::vector<char> is_val(all.rows, 0);
    nn::Rng rng(nn::MixSeed(seed, kSplitStream));
    std::vector<int64_t> perm;
    nn::Permutation(all.rows, rng, &perm);
    for (int64_t k = 0; k < n_val; ++k) is_val[perm[k]] = 1;
    // The training rows are compacted in place (row t <= i), so the split never holds a
    // second copy of the data: the master's peak stays the data plus the held-out rows.
    const int64_t f = all.features;
    const bool labels = !all.y.empty();  // rows without labels (predict)
    va.x.reserve(static_cast<size_t>(n_val * f));
    int64_t t = 0;
    for (int64_t i = 0; i < all.rows; ++i) {
      const auto row = all.x.begin() + i * f;
      if (is_val[i]) {
        va.x.insert(va.x.end(), row, row + f);
        if (labels) va.y.push_back(all.y[i]);
        ++va.rows;
        continue;
      }
      if (t != i) std::copy(row, row + f, all.x.begin() + t * f);
      if (labels) all.y[t] = all.y[i];
      ++t;
    }
    all.rows = t;
    all.x.resize(static_cast<size_t>(t * f));
    if (labels) all.y.resize(static_cast<size_t>(t));
  }
  *train = std::move(all);
  *val = std::move(va);
  return Status::Ok();
}

}  // namespace shmtrain::data
