// A model's maths for those who train and use it (the workers, the master's evaluator and
// predictions, the simulator, the tests): the loss, its gradient, predictions and the
// initialisation of a ModelSpec (include/shmtrain/model_spec.h), through the layers of
// nn/net.h. No shared memory, no processes: plain pointers in and out. Templated on the
// scalar: float trains, double serves the finite-difference tests. Eigen runs single-threaded
// (one core per worker).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "nn/net.h"
#include "shmtrain/model_spec.h"

namespace shmtrain::nn {

// The net built for a spec and its scratch buffers, reused across calls so the hot loop does
// not allocate. One per thread.
template <class S>
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  Net<S>& NetFor(const ModelSpec& spec) {
    if (net_ == nullptr || !(spec_ == spec)) {
      net_ = std::make_unique<Net<S>>(spec);
      spec_ = spec;
    }
    return *net_;
  }
  // The same of a spec whose shapes (ResolveShapes') are known: a net built here is built from
  // them, so a caller that resolved the spec once does not resolve it again.
  Net<S>& NetFor(const ModelSpec& spec, std::vector<Shape> shapes) {
    if (net_ == nullptr || !(spec_ == spec)) {
      net_ = std::make_unique<Net<S>>(spec, std::move(shapes));
      spec_ = spec;
    }
    return *net_;
  }

 private:
  ModelSpec spec_;
  std::unique_ptr<Net<S>> net_;
};

// x: n samples, row-major n x inputs (sample i at x + i*inputs), each sample in the data's
// order ((c, h, w) for images, as PyTorch's NCHW). y: n targets: for mse y[i] is the target of
// sample i (the model has one output); for xent the class index 0..outputs-1 stored as a float
// (the loader guarantees an integer in range).
//
// Per-sample loss: mse = sum over outputs of (yhat - y)^2; xent = -log softmax(yhat)[y].
// Both functions return the SUM over the n samples of the per-sample loss (not the mean), and
// LossAndGrad writes the gradient of that sum into grad (ParamCount() entries, overwritten).
// Callers divide by the total sample count: summing first makes P shares add up exactly to
// the full batch. n = 0 is allowed: loss 0, grad all zero. `pass` says whether this is
// training and what dropout's mask depends on (nn/layer.h); the default is not training.
template <class S>
double LossSum(const ModelSpec& spec, const S* params, const S* x, const S* y, int64_t n,
               Workspace<S>& ws, const PassInfo& pass = {}) {
  return ws.NetFor(spec).LossSum(params, x, y, n, pass);
}

template <class S>
double LossAndGrad(const ModelSpec& spec, const S* params, const S* x, const S* y, int64_t n,
                   S* grad, Workspace<S>& ws, const PassInfo& pass = {}) {
  return ws.NetFor(spec).LossAndGrad(params, x, y, n, pass, grad);
}

// Raw outputs (n x outputs, row-major: sample i at out + i*outputs); for xent these are
// the softmax probabilities, for mse the outputs. Never drops (dropout passes through).
template <class S>
void Predict(const ModelSpec& spec, const S* params, const S* x, int64_t n, S* out,
             Workspace<S>& ws) {
  ws.NetFor(spec).Predict(params, x, n, out);
}

// How many samples evaluation and prediction run at once: 4096, or fewer so that one chunk's
// activations stay within 64 MiB (a convolution's outputs are large).
int64_t EvalChunk(const ModelSpec& spec);
// The same of a model resolved once (nn/layer.h): no walk of its shapes again.
int64_t EvalChunk(const ResolvedModel& model);

// Fills params (ParamCount() entries) deterministically from seed, on every platform: one
// nn::Rng drawn in parameter-vector order, layer after layer, each weight-bearing layer with
// its fan_in and fan_out (a linear layer: in and out; conv2d: in and out channels times the
// kernel's area):
//  kNormal: every weight and bias ~ N(0, 1) (tf.random_normal's default);
//  kXavier: W ~ N(0, 2 / (fan_in + fan_out)), b = 0;   kHe: W ~ N(0, 2 / fan_in), b = 0.
//  kTorch: W and b ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's nn.Linear and nn.Conv2d
//          default; keeps tanh units out of saturation for any fan-in, which N(0, 1) does not).
void InitParams(const ModelSpec& spec, Init init, uint64_t seed, float* params);
// The same of a model resolved once: its shapes are not resolved again.
void InitParams(const ResolvedModel& model, Init init, uint64_t seed, float* params);

}  // namespace shmtrain::nn
