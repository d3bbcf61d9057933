// Metrics of a model on a dataset: mean loss, and accuracy (xent) or RMSE (mse).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/layer.h"
#include "shmtrain/model_spec.h"

namespace shmtrain::nn {

// Rows (0-based) whose values are not finite (NaN or infinite): how many, and the first few, in
// order, for a message that names them.
struct NonFiniteRows {
  static constexpr size_t kFirst = 3;
  int64_t count = 0;
  std::vector<int64_t> first;  // the first kFirst of them

  void Add(int64_t row) {
    if (first.size() < kFirst) first.push_back(row);
    ++count;
  }
  bool empty() const { return count == 0; }
  // "row 4 (0-based)", "rows 1, 3 and 7 (0-based)", "12 rows, the first 1, 3 and 7 (0-based)".
  std::string Text() const;
};

struct Metrics {
  double loss = 0;      // mean per-sample loss (the training objective)
  double accuracy = 0;  // xent: fraction of rows whose largest output is the label
  double rmse = 0;      // mse: sqrt of the mean squared error
  int64_t rows = 0;
  // The rows whose loss is not finite, and so `loss`. Their outputs are not finite either:
  // finite outputs always give a finite loss (mse in double; xent as log-sum-exp with the
  // largest output subtracted, nn/loss.cc).
  NonFiniteRows nonfinite;
  bool finite() const { return nonfinite.empty() && std::isfinite(loss); }
};

// x: rows x inputs row-major; y: targets or class indices. Works in chunks, so memory stays
// bounded for any number of rows. rows = 0 gives all zeros.
Metrics Evaluate(const ModelSpec& spec, const float* params, const float* x, const float* y,
                 int64_t rows);
// The same of a model resolved once (nn/layer.h): its shapes are not resolved again.
Metrics Evaluate(const ResolvedModel& model, const float* params, const float* x, const float* y,
                 int64_t rows);

// The bytes an evaluation of `rows` rows allocates beside them (Evaluate; predict runs the same
// chunks, master/files/predict.cc): the net's forward passes over a chunk (nn::PassBytes of
// EvalChunk rows at most) and the chunk's outputs.
// Of the model resolved once (nn/layer.h).
uint64_t EvaluateBytes(const ResolvedModel& model, int64_t rows);

}  // namespace shmtrain::nn
