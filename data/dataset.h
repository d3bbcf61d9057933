// Datasets in memory: the CSV loader and the built-in examples.
//
// A Dataset is dense float32, row-major (sample i's features at x[i*features]), one target per
// row. The master loads it once and copies it into the segment; workers read it there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

struct Dataset {
  int64_t rows = 0;
  int features = 0;
  std::vector<float> x;  // rows * features
  std::vector<float> y;  // rows
};

struct CsvOptions {
  // Label column, 0-based; -1 = last. Any other negative value is an error.
  int label_col = -1;
  HeaderMode header = HeaderMode::kAuto;
  // 0: labels are real targets (regression). K >= 1: labels must be integers 0..K-1.
  int classes = 0;
};

// Loads a numeric CSV file (comma-separated; blank lines skipped; surrounding spaces
// allowed; "\r\n" accepted). Every failure is Status::Data with a message of the form
// "<path>:<line>:<column>: <what>" (line and column 1-based; column omitted when not about
// a cell): file missing/unreadable, empty, only a header, ragged row, non-numeric cell,
// NaN/Inf, label column out of range, label not an integer in 0..K-1.
Status LoadCsv(const std::string& path, const CsvOptions& opts, Dataset* out);

// The seed's example: n points evenly spaced on [-2, 2] (x_i = -2 + 4i/(n-1); n = 1 gives
// x = 0), y = x^2. One feature.
Dataset MakeParabola(int64_t n);

// A synthetic classification set: `classes` Gaussian clusters in `features` dimensions
// (centres ~ N(0, 1) per coordinate, points = centre + N(0, 0.5^2)), n rows with labels
// i mod classes. Deterministic in seed (nn::Rng). For benchmarks and tests at any size.
Dataset MakeBlobs(int64_t n, int features, int classes, uint64_t seed);

}  // namespace shmtrain::data
