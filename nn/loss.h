// The losses over a model's outputs, (nn/net.h).
#pragma once

#include <cstdint>

#include "shmtrain/model_spec.h"

namespace shmtrain::nn {

// Sum over the n samples of the per-sample loss of the outputs z (k x n, column-major: sample
// j at z + j*k). mse = sum over outputs of (z - y)^2 against the sample's single target;
// xent = -log softmax(z)[y] with y the class index stored as a float. If delta is not null it
// receives dLoss/dz (k x n).
template <class S>
double OutputLoss(Loss loss, const S* z, const S* y, int64_t k, int64_t n, S* delta);

// What Predict returns from the outputs z (k x n): z itself for mse, the softmax
// probabilities for xent (the same stable softmax as the loss).
template <class S>
void OutputPrediction(Loss loss, const S* z, int64_t k, int64_t n, S* out);

}  // namespace shmtrain::nn
