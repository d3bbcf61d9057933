// Metrics of a model on a dataset: mean loss, and accuracy (xent) or RMSE (mse).
#pragma once

#include <cstdint>

#include "shmtrain/model_spec.h"

namespace shmtrain::nn {

struct Metrics {
  double loss = 0;      // mean per-sample loss (the training objective)
  double accuracy = 0;  // xent: fraction of rows whose largest output is the label
  double rmse = 0;      // mse: sqrt of the mean squared error
  int64_t rows = 0;
};

// x: rows x inputs row-major; y: targets or class indices. Works in chunks, so memory stays
// bounded for any number of rows. rows = 0 gives all zeros.
Metrics Evaluate(const ModelSpec& spec, const float* params, const float* x, const float* y,
                 int64_t rows);

// The bytes an evaluation of `rows` rows allocates beside them (Evaluate; predict runs the same
// chunks, master/predict.cc): the net's forward passes over a chunk (nn::PassBytes of
// EvalChunk rows at most) and the chunk's outputs.
uint64_t EvaluateBytes(const ModelSpec& spec, int64_t rows);

}  // namespace shmtrain::nn
