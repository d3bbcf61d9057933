#include "data/preprocess.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "nn/metrics.h"
#include "nn/rng.h"

namespace shmtrain::data {
namespace {

// The scale of a feature of this spread (max - min, or stddev): 1 / spread, or 1 when spread
// is 0 or 1 / spread is beyond float (spread < 1 / FLT_MAX, about 2.9e-39: subnormal values),
// where the feature is constant to float arithmetic (preprocess.h).
float ScaleOf(double spread) {
  const double scale = spread > 0 ? 1.0 / spread : 1.0;
  return scale <= std::numeric_limits<float>::max() ? static_cast<float>(scale) : 1.0f;
}

// A float as its shortest text: "1e+37", "1000", "inf".
std::string FloatText(float v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// minmax and standard: each feature's statistics over the training rows (n->offset and
// n->scale hold one per feature, 0 and 1).
void FitFeatures(const Dataset& train, Normalize kind, Normalizer* n) {
  const int f = train.features;
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
    const bool minmax = kind == Normalize::kMinMax;
    const double spread = minmax ? hi[j] - lo[j] : std::sqrt(sq[j] / train.rows);
    n->offset[j] = static_cast<float>(minmax ? lo[j] : mean[j]);
    n->scale[j] = ScaleOf(spread);
  }
}

// channel: each channel's mean and population standard deviation over every training row and
// pixel, in double, given to each of its h x w features. Feature j of a row is pixel j % (h w)
// of channel j / (h w).
void FitChannels(const Dataset& train, Shape input, Normalizer* n) {
  const int64_t c = input.c, hw = input.h * input.w;
  std::vector<double> mean(c, 0.0), sq(c, 0.0);
  for (int64_t i = 0; i < train.rows; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      const float* px = &train.x[(i * c + k) * hw];
      for (int64_t p = 0; p < hw; ++p) mean[k] += px[p];
    }
  }
  const double count = static_cast<double>(train.rows) * static_cast<double>(hw);
  for (double& m : mean) m /= count;
  for (int64_t i = 0; i < train.rows; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      const float* px = &train.x[(i * c + k) * hw];
      for (int64_t p = 0; p < hw; ++p) sq[k] += (px[p] - mean[k]) * (px[p] - mean[k]);
    }
  }
  for (int64_t k = 0; k < c; ++k) {
    std::fill_n(n->offset.begin() + k * hw, hw, static_cast<float>(mean[k]));
    std::fill_n(n->scale.begin() + k * hw, hw, ScaleOf(std::sqrt(sq[k] / count)));
  }
}

}  // namespace

Status Normalizer::Fit(const Dataset& train, Normalize kind, Shape input, Normalizer* out) {
  if (kind == Normalize::kChannel && input.Flat()) {
    return Status::Usage(
        "--normalize: channel scales each channel of an image (rows of c x h x w), but the "
        "model's input is " +
        std::to_string(input.Size()) +
        " flat features: --normalize standard scales each feature (images stored as flat rows "
        "take --input-shape C,H,W with --model)");
  }
  Normalizer n;
  n.kind = kind;
  if (kind != Normalize::kNone) {
    const int f = train.features;
    n.offset.assign(f, 0.0f);
    n.scale.assign(f, 1.0f);
    const bool channel = kind == Normalize::kChannel;
    SHMTRAIN_CHECK(!channel || input.Size() == f, "the model's input is not the data's width");
    if (train.rows > 0) {
      if (channel) {
        FitChannels(train, input, &n);
      } else {
        FitFeatures(train, kind, &n);
      }
    }
  }
  *out = std::move(n);
  return Status::Ok();
}

Status Normalizer::Apply(Dataset* d, const std::string& src) const {
  if (kind == Normalize::kNone) return Status::Ok();
  const int f = d->features;
  nn::NonFiniteRows bad;
  int feature = 0;
  float raw = 0, scaled = 0;  // the first value that scales to a non-finite one
  for (int64_t i = 0; i < d->rows; ++i) {
    bool row_bad = false;
    for (int j = 0; j < f; ++j) {
      float& v = d->x[i * f + j];
      const float was = v;
      v = (v - offset[j]) * scale[j];
      if (!std::isfinite(v) && !row_bad) {
        row_bad = true;
        if (bad.empty()) {
          feature = j;
          raw = was;
          scaled = v;
        }
      }
    }
    if (row_bad) bad.Add(i);
  }
  if (bad.empty()) return Status::Ok();
  const bool minmax = kind == Normalize::kMinMax;
  const bool channel = kind == Normalize::kChannel;
  const std::string mean = minmax ? "minimum" : channel ? "mean of its channel" : "mean";
  const std::string spread = minmax    ? "their range"
                             : channel ? "its channel's standard deviation"
                                       : "their standard deviation";
  return Status::Diverged(
      src + ": the normalised input is not finite (NaN or infinite) in " + bad.Text() + ": " +
      (bad.count == 1 ? "its" : "row " + std::to_string(bad.first[0]) + ",") + " feature " +
      std::to_string(feature) + " is (" + FloatText(raw) + " - " + FloatText(offset[feature]) +
      ") x " + FloatText(scale[feature]) + " = " + FloatText(scaled) + ", where " +
      FloatText(offset[feature]) + " is the training rows' " + mean + " and " +
      FloatText(scale[feature]) + " is 1 / " + spread + " (" + FloatText(1 / scale[feature]) +
      ", --normalize " + ToString(kind) + "); float holds at most 3.4e38");
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
    const bool named = !all.row_names.empty();  // an image folder's rows: their files
    va.x.reserve(static_cast<size_t>(n_val * f));
    int64_t t = 0;
    for (int64_t i = 0; i < all.rows; ++i) {
      const auto row = all.x.begin() + i * f;
      if (is_val[i]) {
        va.x.insert(va.x.end(), row, row + f);
        if (labels) va.y.push_back(all.y[i]);
        if (named) va.row_names.push_back(std::move(all.row_names[i]));
        ++va.rows;
        continue;
      }
      if (t != i) std::copy(row, row + f, all.x.begin() + t * f);
      if (labels) all.y[t] = all.y[i];
      if (named && t != i) all.row_names[t] = std::move(all.row_names[i]);
      ++t;
    }
    all.rows = t;
    all.x.resize(static_cast<size_t>(t * f));
    if (labels) all.y.resize(static_cast<size_t>(t));
    if (named) all.row_names.resize(static_cast<size_t>(t));
  }
  *train = std::move(all);
  *val = std::move(va);
  return Status::Ok();
}

}  // namespace shmtrain::data
