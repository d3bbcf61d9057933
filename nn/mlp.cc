// Layout of the computation. Samples are columns: A_0 = X (inputs x n), and for each layer
// Z_l = W_l A_{l-1} + b_l, A_l = f(Z_l) on hidden layers, A_L = Z_L on the output layer.
// Workspace::acts[l] holds A_{l+1} (layers[l+1] x n, column-major); the input is never copied.
// Backward keeps only activations: every supported f' can be written in terms of f(z)
// (tanh: 1 - a^2, sigmoid: a(1 - a), relu: [a > 0], which is [z > 0]), so Z is not stored.
// Workspace::deltas[l] holds dLoss/dZ_{l+1}. Each layer is two or three matrix products over
// the whole batch; the only per-sample loops are over the outputs in the loss.
#include "nn/mlp.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "nn/loss.h"
#include "nn/rng.h"

namespace shmtrain::nn {
namespace {

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
template <class S>
using MatMap = Eigen::Map<Mat<S>>;
template <class S>
using ConstMatMap = Eigen::Map<const Mat<S>>;
template <class S>
using VecMap = Eigen::Map<Vec<S>>;
template <class S>
using ConstVecMap = Eigen::Map<const Vec<S>>;

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "shmtrain: internal error: %s\n", what);
  std::abort();
}

// Specs are validated at the boundary (flags, model files, the segment header); a bad one here
// is a bug and would otherwise index out of bounds.
void CheckSpec(const ModelSpec& spec, int64_t n) {
  if (spec.layers.size() < 2) Die("ModelSpec with fewer than two layers");
  for (int size : spec.layers) {
    if (size < 1) Die("ModelSpec with a layer of size < 1");
  }
  if (n < 0) Die("negative sample count");
}

template <class S>
void Reserve(AlignedVector<S>& v, size_t size) {
  if (v.size() < size) v.resize(size);
}

template <class S>
void Activate(Activation f, MatMap<S>& z) {
  switch (f) {
    case Activation::kTanh:
      z = z.array().tanh();
      return;
    case Activation::kRelu:
      z = z.cwiseMax(S(0));
      return;
    case Activation::kSigmoid:
      z = z.array().logistic();
      return;
    case Activation::kIdentity:
      return;
  }
  Die("unknown activation");
}

// d holds dLoss/dA on entry and dLoss/dZ on exit; a = f(z).
template <class S>
void ActivationBackward(Activation f, const ConstMatMap<S>& a, MatMap<S>& d) {
  switch (f) {
    case Activation::kTanh:
      d.array() *= S(1) - a.array().square();
      return;
    case Activation::kRelu:
      d = (a.array() > S(0)).select(d, S(0));
      return;
    case Activation::kSigmoid:
      d.array() *= a.array() * (S(1) - a.array());
      return;
    case Activation::kIdentity:
      return;
  }
  Die("unknown activation");
}

// Runs the layers over the n samples of x; the linear output (outputs x n) ends up in
// ws.acts[L - 1]. n >= 1.
template <class S>
void Forward(const ModelSpec& spec, const S* params, const S* x, int64_t n, Workspace<S>& ws) {
  const size_t num_layers = spec.layers.size() - 1;
  if (ws.acts.size() < num_layers) ws.acts.resize(num_layers);
  const S* prev = x;
  size_t off = 0;
  for (size_t l = 0; l < num_layers; ++l) {
    const int64_t in = spec.layers[l];
    const int64_t out = spec.layers[l + 1];
    Reserve(ws.acts[l], static_cast<size_t>(out * n));
    ConstMatMap<S> w(params + off, out, in);
    ConstVecMap<S> b(params + off + out * in, out);
    off += static_cast<size_t>(out * in + out);
    ConstMatMap<S> a_prev(prev, in, n);
    MatMap<S> z(ws.acts[l].data(), out, n);
    z.noalias() = w * a_prev;
    z.colwise() += b;
    if (l + 1 < num_layers) Activate(spec.activation, z);
    prev = z.data();
  }
}

}  // namespace

template <class S>
double LossSum(const ModelSpec& spec, const S* params, const S* x, const S* y, int64_t n,
               Workspace<S>& ws) {
  CheckSpec(spec, n);
  if (n == 0) return 0;
  Forward(spec, params, x, n, ws);
  return OutputLoss<S>(spec.loss, ws.acts[spec.layers.size() - 2].data(), y, spec.outputs(), n,
                       nullptr);
}

template <class S>
double LossAndGrad(const ModelSpec& spec, const S* params, const S* x, const S* y, int64_t n,
                   S* grad, Workspace<S>& ws) {
  CheckSpec(spec, n);
  const size_t num_params = spec.ParamCount();
  if (n == 0) {
    std::fill(grad, grad + num_params, S(0));
    return 0;
  }
  Forward(spec, params, x, n, ws);

  const size_t num_layers = spec.layers.size() - 1;
  if (ws.deltas.size() < num_layers) ws.deltas.resize(num_layers);
  for (size_t l = 0; l < num_layers; ++l) {
    Reserve(ws.deltas[l], static_cast<size_t>(spec.layers[l + 1] * n));
  }
  const double loss = OutputLoss<S>(spec.loss, ws.acts[num_layers - 1].data(), y, spec.outputs(), n,
                                    ws.deltas[num_layers - 1].data());

  // Offsets are walked down from the end of the parameter vector, so no table is needed.
  size_t end = num_params;
  for (size_t l = num_layers; l-- > 0;) {
    const int64_t in = spec.layers[l];
    const int64_t out = spec.layers[l + 1];
    const size_t b_off = end - static_cast<size_t>(out);
    const size_t w_off = b_off - static_cast<size_t>(out * in);
    end = w_off;

    MatMap<S> d(ws.deltas[l].data(), out, n);
    ConstMatMap<S> a_prev(l == 0 ? x : ws.acts[l - 1].data(), in, n);
    MatMap<S> grad_w(grad + w_off, out, in);
    grad_w.noalias() = d * a_prev.transpose();
    // Column by column: each element is summed over the samples in sample order, the same
    // rounding whatever the address of grad (rowwise().sum() reduces the rows of an
    // unaligned head in another order).
    VecMap<S> grad_b(grad + b_off, out);
    grad_b.setZero();
    for (int64_t j = 0; j < n; ++j) grad_b += d.col(j);
    if (l > 0) {
      ConstMatMap<S> w(params + w_off, out, in);
      MatMap<S> d_prev(ws.deltas[l - 1].data(), in, n);
      d_prev.noalias() = w.transpose() * d;
      ActivationBackward(spec.activation, a_prev, d_prev);
    }
  }
  return loss;
}

template <class S>
void Predict(const ModelSpec& spec, const S* params, const S* x, int64_t n, S* out,
             Workspace<S>& ws) {
  CheckSpec(spec, n);
  if (n == 0) return;
  Forward(spec, params, x, n, ws);
  OutputPrediction<S>(spec.loss, ws.acts[spec.layers.size() - 2].data(), spec.outputs(), n, out);
}

void InitParams(const ModelSpec& spec, Init init, uint64_t seed, float* params) {
  CheckSpec(spec, 0);
  Rng rng(seed);
  size_t off = 0;
  for (size_t l = 0; l + 1 < spec.layers.size(); ++l) {
    const size_t in = static_cast<size_t>(spec.layers[l]);
    const size_t out = static_cast<size_t>(spec.layers[l + 1]);
    if (init == Init::kTorch) {
      // U(-bound, bound) for the weights, then the biases, from Uniform() in [0, 1).
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      for (size_t i = 0; i < out * in + out; ++i) {
        params[off++] = static_cast<float>(bound * (2.0 * rng.Uniform() - 1.0));
      }
      continue;
    }
    double scale = 1.0;
    switch (init) {
      case Init::kNormal:
        break;
      case Init::kXavier:
        scale = std::sqrt(2.0 / static_cast<double>(in + out));
        break;
      case Init::kHe:
        scale = std::sqrt(2.0 / static_cast<double>(in));
        break;
      default:
        Die("unknown init");
    }
    for (size_t i = 0; i < out * in; ++i) params[off++] = static_cast<float>(scale * rng.Normal());
    for (size_t i = 0; i < out; ++i) {
      params[off++] = init == Init::kNormal ? static_cast<float>(rng.Normal()) : 0.0f;
    }
  }
}

#define SHMTRAIN_INSTANTIATE(S)                                                               \
  template double LossSum<S>(const ModelSpec&, const S*, const S*, const S*, int64_t,         \
                             Workspace<S>&);                                                  \
  template double LossAndGrad<S>(const ModelSpec&, const S*, const S*, const S*, int64_t, S*, \
                                 Workspace<S>&);                                              \
  template void Predict<S>(const ModelSpec&, const S*, const S*, int64_t, S*, Workspace<S>&);

SHMTRAIN_INSTANTIATE(float)
SHMTRAIN_INSTANTIATE(double)

#undef SHMTRAIN_INSTANTIATE

}  // namespace shmtrain::nn
