// batchnorm2d(eps=1e-5, momentum=0.1) and batchnorm1d: PyTorch's nn.BatchNorm2d and
// nn.BatchNorm1d over the C channels of their input (its features for batchnorm1d), with
// num_features read from the input as conv2d reads its in_channels.
//
// Training: each channel is normalised with the mean and the biased variance of its values
// over the batch (every sample's every pixel), y = (x - mean) / sqrt(var + eps) * weight +
// bias. The batch is the global one: the sums cross workers (PassInfo::stats, nn/layer.h), so
// P workers normalise as one process at the full batch. Evaluation (validation, predict,
// eval): the running statistics instead. The running statistics move after each training
// step, running = (1 - momentum) * running + momentum * batch (the variance unbiased,
// times M / (M - 1) for M values), and num_batches_tracked counts the steps: the training
// loops do that from the crossed sums (nn/batch_norm.h), not this layer, which only reads them.
//
// Parameters, in the flat vector's order: weight (C, 1 at first), bias (C, 0), then the
// buffers running_mean (C, 0), running_var (C, 1) and num_batches_tracked (a scalar, 0),
// named as PyTorch's state dict names them.
//
// Statistics (StatsCrossing), 4C + 1 doubles: forward, the sums of x and of x^2 per channel
// and the count of values M; backward, the sums of dy and of dy * xhat per channel, which the
// input's gradient needs: dx = weight / sqrt(var + eps) * (dy - sum(dy) / M - xhat *
// sum(dy * xhat) / M). The gradients of weight and bias are this pass's own sums, as every
// layer's are (the slots add them up). Sums are in double, in sample order, pixel order.
//
// The layer keeps the mean and 1/sqrt(var + eps) of its last forward pass for the backward
// pass that follows it (recomputing them would cross the workers again).
#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/batch_norm.h"
#include "nn/layer.h"
#include "nn/layers/type_of.h"

namespace shmtrain::nn {
namespace {

template <class S>
class BatchNorm final : public Layer<S> {
 public:
  BatchNorm(const LayerSpec& spec, Shape in, Shape out)
      : Layer<S>(in, out),
        c_(in.c),
        pixels_(in.h * in.w),
        eps_(spec.args[0]),
        mean_(static_cast<size_t>(c_)),
        invstd_(static_cast<size_t>(c_)),
        sums_(static_cast<size_t>(2 * c_ + 1)) {}

  void Forward(const S* params, const S* x, int64_t n, const PassInfo& pass, S* y) override {
    train_ = pass.train;
    if (train_) {
      BatchStatistics(x, n, pass);
    } else {
      const S* running = params + 2 * c_;
      for (int64_t c = 0; c < c_; ++c) {
        mean_[c] = static_cast<double>(running[c]);
        invstd_[c] = 1 / std::sqrt(static_cast<double>(running[c_ + c]) + eps_);
      }
    }
    std::vector<S> a(static_cast<size_t>(c_)), b(static_cast<size_t>(c_));
    for (int64_t c = 0; c < c_; ++c) {
      a[c] = static_cast<S>(static_cast<double>(params[c]) * invstd_[c]);
      b[c] = static_cast<S>(static_cast<double>(params[c_ + c]) -
                            mean_[c] * static_cast<double>(a[c]));
    }
    const int64_t m = n * pixels_;
    for (int64_t p = 0; p < m; ++p) {
      const S* xp = x + p * c_;
      S* yp = y + p * c_;
      for (int64_t c = 0; c < c_; ++c) yp[c] = xp[c] * a[c] + b[c];
    }
  }

  void Backward(const S* params, const S* x, const S*, const S* dy, int64_t n,
                const PassInfo& pass, S* dx, S* dparams) override {
    const int64_t m = n * pixels_;
    std::vector<double> sums(static_cast<size_t>(2 * c_), 0.0);
    double* sdy = sums.data();
    double* sdyx = sums.data() + c_;
    for (int64_t p = 0; p < m; ++p) {
      const S* xp = x + p * c_;
      const S* dp = dy + p * c_;
      for (int64_t c = 0; c < c_; ++c) {
        const double d = static_cast<double>(dp[c]);
        sdy[c] += d;
        sdyx[c] += d * (static_cast<double>(xp[c]) - mean_[c]) * invstd_[c];
      }
    }
    for (int64_t c = 0; c < c_; ++c) {
      dparams[c] = static_cast<S>(sdyx[c]);
      dparams[c_ + c] = static_cast<S>(sdy[c]);
    }
    std::fill(dparams + 2 * c_, dparams + 4 * c_ + 1, S(0));  // the buffers: not trained
    if (dx == nullptr) return;
    std::vector<S> k(static_cast<size_t>(c_)), dmean(static_cast<size_t>(c_)),
        dvar(static_cast<size_t>(c_)), center(static_cast<size_t>(c_));
    if (train_) {
      if (pass.stats != nullptr)
        pass.stats->Sum(this->stats_offset() + 2 * c_ + 1, sums.data(), 2 * c_);
      const double count = count_;
      for (int64_t c = 0; c < c_; ++c) {
        // dx = k * (dy - sdy / M - (x - mean) * invstd * sdyx / M), with k = weight * invstd.
        const double kc = static_cast<double>(params[c]) * invstd_[c];
        k[c] = static_cast<S>(kc);
        dmean[c] = static_cast<S>(sdy[c] / count);
        dvar[c] = static_cast<S>(sdyx[c] / count * invstd_[c]);
        center[c] = static_cast<S>(mean_[c]);
      }
    } else {
      for (int64_t c = 0; c < c_; ++c)
        k[c] = static_cast<S>(static_cast<double>(params[c]) * invstd_[c]);
    }
    for (int64_t p = 0; p < m; ++p) {
      const S* xp = x + p * c_;
      const S* dp = dy + p * c_;
      S* o = dx + p * c_;
      for (int64_t c = 0; c < c_; ++c) {
        o[c] = k[c] * (dp[c] - dmean[c] - (xp[c] - center[c]) * dvar[c]);
      }
    }
  }

 private:
  // The batch's mean and 1/sqrt(var + eps) per channel, over every worker's rows.
  void BatchStatistics(const S* x, int64_t n, const PassInfo& pass) {
    std::fill(sums_.begin(), sums_.end(), 0.0);
    double* s = sums_.data();
    double* q = sums_.data() + c_;
    const int64_t m = n * pixels_;
    for (int64_t p = 0; p < m; ++p) {
      const S* xp = x + p * c_;
      for (int64_t c = 0; c < c_; ++c) {
        const double v = static_cast<double>(xp[c]);
        s[c] += v;
        q[c] += v * v;
      }
    }
    sums_[2 * c_] = static_cast<double>(m);
    if (pass.stats != nullptr) pass.stats->Sum(this->stats_offset(), sums_.data(), 2 * c_ + 1);
    const BatchMoments mom(sums_.data(), c_);
    count_ = mom.count;
    for (int64_t c = 0; c < c_; ++c) {
      mean_[c] = mom.Mean(c);
      invstd_[c] = 1 / std::sqrt(mom.Variance(c) + eps_);
    }
  }

  const int64_t c_, pixels_;
  const double eps_;
  bool train_ = false;
  double count_ = 0;
  std::vector<double> mean_, invstd_, sums_;
};

std::vector<ParamBlock> Params(const LayerSpec&, Shape in) {
  return {{"weight", {in.c}},
          {"bias", {in.c}},
          {"running_mean", {in.c}, true},
          {"running_var", {in.c}, true},
          {"num_batches_tracked", {}, true, true}};
}

void Init(const LayerSpec&, Shape in, Init, Rng&, float* params) {
  const int64_t c = in.c;
  std::fill(params, params + c, 1.0f);
  std::fill(params + c, params + 3 * c, 0.0f);
  std::fill(params + 3 * c, params + 4 * c, 1.0f);
  params[4 * c] = 0;
}

int64_t Stats(const LayerSpec&, Shape in) { return 4 * in.c + 1; }

Status FlatOnly(const LayerSpec& spec, Shape in, Shape* out) {
  if (!in.Flat()) {
    return Status::Usage("input " + in.Text() +
                         " is an image: batchnorm1d takes features (after linear or flatten); "
                         "batchnorm2d normalises the channels of an image");
  }
  return SameShape(spec, in, out);
}

// BatchNormalization with the running statistics, as evaluation normalises (the channels are
// axis 1 of [N, C] and of [N, C, H, W] alike).
std::string ToOnnx(const LayerSpec& spec, Shape, Shape, const std::string& module,
                   const std::string& x, OnnxGraph& g) {
  return g.Node("BatchNormalization",
                {x, g.Param(module + ".weight"), g.Param(module + ".bias"),
                 g.Param(module + ".running_mean"), g.Param(module + ".running_var")},
                module, {OnnxAttr::Float("epsilon", static_cast<float>(spec.args[0]))});
}

// The two types differ in their names and in what input they take.
LayerType BatchNormType(const char* name, const char* torch, const char* summary, Spatial spatial,
                        Status (*out_shape)(const LayerSpec&, Shape, Shape*)) {
  return TypeOf<BatchNorm>(
      {.name = name,
       .torch = torch,
       .summary = summary,
       .args = {{"eps", false, 1e-5, 1e-12, 1, false}, {"momentum", false, 0.1, 0, 1, false}},
       .spatial = spatial,
       .out_shape = out_shape,
       .params = Params,
       .init = Init,
       .to_onnx = ToOnnx,
       .stats = Stats});
}

}  // namespace

extern const LayerType kBatchNorm2d = BatchNormType(
    "batchnorm2d", "BatchNorm2d",
    "each channel normalised by the batch's statistics (training) or the running ones",
    Spatial::kWindows, SameShape);

extern const LayerType kBatchNorm1d = BatchNormType(
    "batchnorm1d", "BatchNorm1d",
    "each feature normalised by the batch's statistics (training) or the running ones",
    Spatial::kKeeps, FlatOnly);

}  // namespace shmtrain::nn
