#include "nn/loss.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "shmtrain/status.h"

namespace shmtrain::nn {
namespace {

// Label of a xent sample; anything else than a class index is a loader bug and would index
// out of bounds.
int64_t Label(double y, int64_t classes) {
  SHMTRAIN_CHECK(y >= 0.0 && y < static_cast<double>(classes), "xent label out of range");
  return static_cast<int64_t>(y);
}

// -log softmax(z)[label] for one sample, computed as logsumexp(z) - z[label] with the max
// subtracted inside the exponentials. If delta is not null it receives
// dLoss/dz = softmax(z) - onehot(label).
template <class S>
double XentSample(const S* z, int64_t k, int64_t label, S* delta) {
  double m = static_cast<double>(z[0]);
  for (int64_t i = 1; i < k; ++i) m = std::max(m, static_cast<double>(z[i]));
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += std::exp(static_cast<double>(z[i]) - m);
  const double lse = m + std::log(sum);
  if (delta != nullptr) {
    for (int64_t i = 0; i < k; ++i) {
      const double p = std::exp(static_cast<double>(z[i]) - lse);
      delta[i] = static_cast<S>(i == label ? p - 1.0 : p);
    }
  }
  return lse - static_cast<double>(z[label]);
}

}  // namespace

template <class S>
double OutputLoss(Loss loss, const S* z, const S* y, int64_t k, int64_t n, S* delta) {
  double total = 0;
  switch (loss) {
    case Loss::kMse:
      for (int64_t j = 0; j < n; ++j) {
        const double target = static_cast<double>(y[j]);
        for (int64_t i = 0; i < k; ++i) {
          const double d = static_cast<double>(z[i + j * k]) - target;
          total += d * d;
          if (delta != nullptr) delta[i + j * k] = static_cast<S>(2.0 * d);
        }
      }
      return total;
    case Loss::kXent:
      for (int64_t j = 0; j < n; ++j) {
        total += XentSample(z + j * k, k, Label(static_cast<double>(y[j]), k),
                            delta == nullptr ? nullptr : delta + j * k);
      }
      return total;
  }
  SHMTRAIN_DIE("unknown loss");
}

template <class S>
void OutputPrediction(Loss loss, const S* z, int64_t k, int64_t n, S* out) {
  if (loss == Loss::kMse) {
    std::copy(z, z + k * n, out);
    return;
  }
  // Same stable softmax as the loss, so probabilities and loss agree.
  for (int64_t j = 0; j < n; ++j) {
    const S* zj = z + j * k;
    double m = static_cast<double>(zj[0]);
    for (int64_t i = 1; i < k; ++i) m = std::max(m, static_cast<double>(zj[i]));
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += std::exp(static_cast<double>(zj[i]) - m);
    for (int64_t i = 0; i < k; ++i) {
      out[i + j * k] = static_cast<S>(std::exp(static_cast<double>(zj[i]) - m) / sum);
    }
  }
}

template double OutputLoss<float>(Loss, const float*, const float*, int64_t, int64_t, float*);
template double OutputLoss<double>(Loss, const double*, const double*, int64_t, int64_t, double*);
template void OutputPrediction<float>(Loss, const float*, int64_t, int64_t, float*);
template void OutputPrediction<double>(Loss, const double*, int64_t, int64_t, double*);

}  // namespace shmtrain::nn
