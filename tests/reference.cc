#include "tests/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <utility>

#include "gtest/gtest.h"

namespace shmtrain::test {
namespace {

constexpr const char* kMasterBin = SHMTRAIN_BIN;

// The reference is written once for a scalar type T: double is the reference, float estimates
// what float rounding alone does to a run (RefTrainInFloat).
template <typename T>
T Act(Activation f, T z) {
  switch (f) {
    case Activation::kTanh:
      return std::tanh(z);
    case Activation::kRelu:
      return z > 0 ? z : T(0);
    case Activation::kSigmoid:
      return T(1) / (T(1) + std::exp(-z));
    case Activation::kIdentity:
      return z;
  }
  ADD_FAILURE() << "unknown activation";
  return NAN;
}

// f'(z), from z.
template <typename T>
T ActDerivative(Activation f, T z) {
  switch (f) {
    case Activation::kTanh: {
      const T t = std::tanh(z);
      return T(1) - t * t;
    }
    case Activation::kRelu:
      return z > 0 ? T(1) : T(0);
    case Activation::kSigmoid: {
      const T s = T(1) / (T(1) + std::exp(-z));
      return s * (T(1) - s);
    }
    case Activation::kIdentity:
      return T(1);
  }
  ADD_FAILURE() << "unknown activation";
  return NAN;
}

template <typename T>
double MaxScaledDiffOf(const std::vector<T>& got, const std::vector<double>& want) {
  if (got.size() != want.size() || want.empty()) return INFINITY;
  double worst = 0;
  double scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
    scale = std::max(scale, std::fabs(want[i]));
  }
  return worst / scale;
}

// The mean loss and its gradient (RefGradient).
// The MLP the reference computes: --layers' sizes and --activation.
struct MlpOf {
  explicit MlpOf(const ModelSpec& spec) { EXPECT_TRUE(spec.AsMlp(&layers, &activation)) << spec.Text(); }
  std::vector<int> layers;
  Activation activation = Activation::kTanh;
};

template <typename T>
T GradientIn(const ModelSpec& model, const std::vector<T>& w, const RefData& d,
             std::vector<T>* grad) {
  const MlpOf spec(model);
  const size_t layers = spec.layers.size() - 1;
  std::vector<size_t> offset(layers + 1, 0);
  for (size_t l = 0; l < layers; ++l) {
    offset[l + 1] = offset[l] + static_cast<size_t>(spec.layers[l + 1]) * (spec.layers[l] + 1);
  }
  grad->assign(w.size(), T(0));
  T loss = 0;
  // a[l]: the input of layer l (a[0] the sample); z[l]: its pre-activation.
  std::vector<std::vector<T>> a(layers + 1), z(layers);
  for (int64_t s = 0; s < d.rows; ++s) {
    a[0].assign(d.x.begin() + s * d.features, d.x.begin() + (s + 1) * d.features);
    for (size_t l = 0; l < layers; ++l) {
      const int in = spec.layers[l];
      const int out = spec.layers[l + 1];
      const T* W = w.data() + offset[l];
      const T* b = W + static_cast<size_t>(out) * in;
      z[l].assign(static_cast<size_t>(out), T(0));
      a[l + 1].assign(static_cast<size_t>(out), T(0));
      for (int i = 0; i < out; ++i) {
        T sum = b[i];
        for (int j = 0; j < in; ++j) sum += W[i + j * out] * a[l][j];
        z[l][i] = sum;
        a[l + 1][i] = l + 1 < layers ? Act(spec.activation, sum) : sum;  // linear output
      }
    }
    // delta = dLoss/dz of the output layer.
    const std::vector<T>& yhat = z[layers - 1];
    const int k = static_cast<int>(model.outputs());
    std::vector<T> delta(static_cast<size_t>(k));
    if (model.loss == Loss::kMse) {
      for (int i = 0; i < k; ++i) {
        const T e = yhat[i] - static_cast<T>(d.y[s]);
        loss += e * e;
        delta[i] = 2 * e;
      }
    } else {
      const int label = static_cast<int>(d.y[s]);
      const T m = *std::max_element(yhat.begin(), yhat.end());
      T sum = 0;
      for (int i = 0; i < k; ++i) sum += std::exp(yhat[i] - m);
      const T log_sum = m + std::log(sum);
      loss += log_sum - yhat[label];
      for (int i = 0; i < k; ++i)
        delta[i] = std::exp(yhat[i] - log_sum) - (i == label ? T(1) : T(0));
    }
    for (size_t l = layers; l-- > 0;) {
      const int in = spec.layers[l];
      const int out = spec.layers[l + 1];
      const T* W = w.data() + offset[l];
      T* gW = grad->data() + offset[l];
      T* gb = gW + static_cast<size_t>(out) * in;
      for (int i = 0; i < out; ++i) {
        for (int j = 0; j < in; ++j) gW[i + j * out] += delta[i] * a[l][j];
        gb[i] += delta[i];
      }
      if (l == 0) break;
      std::vector<T> below(static_cast<size_t>(in), T(0));
      for (int j = 0; j < in; ++j) {
        T sum = 0;
        for (int i = 0; i < out; ++i) sum += W[i + j * out] * delta[i];
        below[j] = sum * ActDerivative(spec.activation, z[l - 1][j]);
      }
      delta.swap(below);
    }
  }
  for (T& g : *grad) g /= static_cast<T>(d.rows);
  return loss / static_cast<T>(d.rows);
}

// RefTrain and RefTrainInFloat.
template <typename T>
std::vector<T> TrainIn(const ModelSpec& spec, const std::vector<float>& w0, const RefData& d,
                       const RefOptions& opt, int64_t steps, RefTrace* trace) {
  std::vector<T> w(w0.begin(), w0.end());
  const size_t n = w.size();
  // sgd: the momentum buffer; adam: the first (m) and second (v) moments. All start at 0.
  std::vector<T> buf(n, T(0)), m(n, T(0)), v(n, T(0)), g, before;
  const T wd = static_cast<T>(opt.WeightDecay());
  const T mu = static_cast<T>(opt.momentum);
  // The coefficients are worked out in double and rounded to T once, as PyTorch does (Python
  // floats): 1 - b2 formed in float from a float b2 is 1.3e-5 off for b2 = 0.999, out of step
  // with the bias correction, and would make every Adam update 6e-6 too long, a drift of
  // several 1e-6 over a case that has nothing to do with rounding noise.
  const T b1 = static_cast<T>(opt.Beta1());
  const T b2 = static_cast<T>(opt.Beta2());
  const T one_minus_b1 = static_cast<T>(1 - opt.Beta1());
  const T one_minus_b2 = static_cast<T>(1 - opt.Beta2());
  const T eps = static_cast<T>(opt.Eps());
  RefTrace local;
  RefTrace& tr = trace != nullptr ? *trace : local;
  tr = RefTrace{};
  for (int64_t t = 0; t < steps; ++t) {
    GradientIn(spec, w, d, &g);
    const T lr = static_cast<T>(RefLr(opt, t, steps));
    before = w;

    // Clip the global norm (torch.nn.utils.clip_grad_norm_).
    T sq = 0;
    for (T x : g) sq += x * x;
    const T norm = std::sqrt(sq);
    if (opt.clip_norm > 0) {
      const T coef = static_cast<T>(opt.clip_norm) / (norm + static_cast<T>(1e-6));
      if (coef < 1) {
        for (T& x : g) x *= coef;
        ++tr.clipped;
      }
    }
    tr.grad_norm.push_back(norm);

    switch (opt.optimizer) {
      case RefOptimizer::kSgd:  // torch.optim.SGD, dampening 0
        for (size_t i = 0; i < n; ++i) {
          T gi = g[i] + wd * w[i];
          if (mu > 0) {
            buf[i] = mu * buf[i] + gi;
            gi = opt.nesterov ? gi + mu * buf[i] : buf[i];
          }
          w[i] -= lr * gi;
        }
        break;
      case RefOptimizer::kAdam:     // torch.optim.Adam: L2 in the gradient
      case RefOptimizer::kAdamW: {  // torch.optim.AdamW: decoupled decay
        const bool decoupled = opt.optimizer == RefOptimizer::kAdamW;
        const double k = static_cast<double>(t + 1);
        const T correct1 = static_cast<T>(1 - std::pow(opt.Beta1(), k));
        const T correct2 = static_cast<T>(1 - std::pow(opt.Beta2(), k));
        for (size_t i = 0; i < n; ++i) {
          T gi = g[i];
          if (decoupled) {
            w[i] *= 1 - lr * wd;
          } else {
            gi += wd * w[i];
          }
          m[i] = b1 * m[i] + one_minus_b1 * gi;
          v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
          const T mhat = m[i] / correct1;
          const T vhat = v[i] / correct2;
          w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
        }
        break;
      }
    }
  }
  if (steps > 0) tr.last_move = MaxScaledDiffOf(before, std::vector<double>(w.begin(), w.end()));
  return w;
}

}  // namespace

RefData ToRefData(const data::Dataset& d) {
  RefData r;
  r.rows = d.rows;
  r.features = static_cast<int>(d.features);
  r.x.assign(d.x.begin(), d.x.end());
  r.y.assign(d.y.begin(), d.y.end());
  return r;
}

double RefGradient(const ModelSpec& spec, const std::vector<double>& w, const RefData& d,
                   std::vector<double>* grad) {
  return GradientIn(spec, w, d, grad);
}

std::vector<std::string> RefOptions::Flags() const {
  std::vector<std::string> f = {"--lr", Fmt17(lr)};
  auto add = [&f](const char* flag, double x) { f.insert(f.end(), {flag, Fmt17(x)}); };
  switch (optimizer) {
    case RefOptimizer::kSgd:
      break;
    case RefOptimizer::kAdam:
      f.insert(f.end(), {"--optimizer", "adam"});
      break;
    case RefOptimizer::kAdamW:
      f.insert(f.end(), {"--optimizer", "adamw"});
      break;
  }
  if (momentum != 0) add("--momentum", momentum);
  if (nesterov) f.push_back("--nesterov");
  if (beta1) add("--beta1", *beta1);
  if (beta2) add("--beta2", *beta2);
  if (eps) add("--eps", *eps);
  if (weight_decay) add("--weight-decay", *weight_decay);
  if (clip_norm > 0) add("--clip-norm", clip_norm);
  switch (schedule) {
    case RefSchedule::kConstant:
      break;
    case RefSchedule::kStep:
      f.insert(f.end(), {"--lr-schedule", "step"});
      break;
    case RefSchedule::kCosine:
      f.insert(f.end(), {"--lr-schedule", "cosine"});
      break;
    case RefSchedule::kExponential:
      f.insert(f.end(), {"--lr-schedule", "exponential"});
      break;
    case RefSchedule::kMultiStep:
      f.insert(f.end(), {"--lr-schedule", "multistep"});
      break;
  }
  if (step_every > 0) f.insert(f.end(), {"--lr-step-every", std::to_string(step_every)});
  if (!milestones.empty()) {
    std::string m;
    for (int64_t x : milestones) m += (m.empty() ? "" : ",") + std::to_string(x);
    f.insert(f.end(), {"--lr-milestones", m});
  }
  if (gamma) add("--lr-gamma", *gamma);
  if (lr_min != 0) add("--lr-min", lr_min);
  if (warmup > 0) f.insert(f.end(), {"--warmup-steps", std::to_string(warmup)});
  return f;
}

// Linear warmup over W updates, (t+1)/W of the base (LinearLR with start_factor 1/W over W-1
// iterations), then the schedule over the remaining S = T - W updates, s counted from the end
// of the warmup: StepLR, ExponentialLR, CosineAnnealingLR with T_max = S, MultiStepLR (the
// rate multiplied by gamma once for each milestone passed, one update at a time).
double RefLr(const RefOptions& opt, int64_t t, int64_t total) {
  const double base = opt.lr;
  if (t < opt.warmup) {
    return base * static_cast<double>(t + 1) / static_cast<double>(opt.warmup);
  }
  const int64_t s = t - opt.warmup;
  const int64_t S = total - opt.warmup;
  switch (opt.schedule) {
    case RefSchedule::kConstant:
      return base;
    case RefSchedule::kStep:
      EXPECT_GE(opt.step_every, 1) << "step schedule without step_every";
      return base *
             std::pow(opt.Gamma(), static_cast<double>(s / std::max<int64_t>(opt.step_every, 1)));
    case RefSchedule::kExponential:
      EXPECT_TRUE(opt.gamma.has_value()) << "exponential schedule without gamma";
      return base * std::pow(opt.Gamma(), static_cast<double>(s));
    case RefSchedule::kMultiStep: {
      EXPECT_FALSE(opt.milestones.empty()) << "multistep schedule without milestones";
      double rate = base;
      for (int64_t m : opt.milestones) {
        if (m <= s) rate *= opt.Gamma();
      }
      return rate;
    }
    case RefSchedule::kCosine:
      return opt.lr_min + (base - opt.lr_min) *
                              (1 + std::cos(std::numbers::pi * static_cast<double>(s) /
                                            static_cast<double>(S))) /
                              2;
  }
  ADD_FAILURE() << "unknown schedule";
  return NAN;
}

std::vector<double> RefTrain(const ModelSpec& spec, const std::vector<float>& w0, const RefData& d,
                             const RefOptions& opt, int64_t steps, RefTrace* trace) {
  return TrainIn<double>(spec, w0, d, opt, steps, trace);
}

std::vector<float> RefTrainInFloat(const ModelSpec& spec, const std::vector<float>& w0,
                                   const RefData& d, const RefOptions& opt, int64_t steps) {
  return TrainIn<float>(spec, w0, d, opt, steps, nullptr);
}

double MaxScaledDiff(const std::vector<float>& got, const std::vector<double>& want) {
  return MaxScaledDiffOf(got, want);
}

double MaxScaledDiff(const std::vector<double>& got, const std::vector<double>& want) {
  return MaxScaledDiffOf(got, want);
}

// ---------------------------------------------------------------------------------------------

std::vector<std::string> Shmtrain(std::vector<std::string> args) {
  if (!args.empty() && args[0] == "train") {
    args.insert(args.begin() + 1, "--metrics-addr=127.0.0.1:0");
  } else if (args.size() >= 2 && args[0] == "example" && args[1] == "parabola") {
    args.insert(args.begin() + 2, "--metrics-addr=127.0.0.1:0");
  }
  args.insert(args.begin(), kMasterBin);
  return args;
}

void ExpectNoSegments(pid_t master_pid) {
  EXPECT_EQ(SegmentsOf(master_pid), std::vector<std::string>())
      << "segments left behind by master " << master_pid;
}

void ExpectExit(const ProcResult& r, int code) {
  EXPECT_TRUE(r.exited && r.exit_code == code)
      << "expected exit " << code << ", got " << r.Describe();
}

Model LoadSaved(const std::string& path) {
  Model m;
  const Status s = LoadModel(path, &m);
  EXPECT_TRUE(s.ok()) << path << ": " << s.message();
  return m;
}

std::string Fmt17(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::vector<std::string> SyncRun::Argv(const RefOptions& o, int64_t run_steps,
                                       const std::string& save) const {
  const MlpOf mlp(spec);
  std::string layers;
  for (int n : mlp.layers) layers += (layers.empty() ? "" : ",") + std::to_string(n);
  std::vector<std::string> a = {"train",
                                "--example",
                                example,
                                "--rows",
                                std::to_string(rows),
                                "--layers",
                                layers,
                                "--activation",
                                ToString(mlp.activation),
                                "--loss",
                                spec.loss == Loss::kXent ? "xent" : "mse",
                                "--init",
                                init,
                                "--seed",
                                std::to_string(seed)};
  if (example == "blobs") a.insert(a.begin() + 5, {"--features", std::to_string(features)});
  const std::vector<std::string> flags = o.Flags();
  a.insert(a.end(), flags.begin(), flags.end());
  a.insert(a.end(), {"--steps", std::to_string(run_steps), "--workers", std::to_string(workers),
                     "--log-every", "0", "--save", save});
  return Shmtrain(std::move(a));
}

RefData SyncRun::Data() const {
  return ToRefData(example == "blobs" ? data::MakeBlobs(rows, features, spec.outputs(), seed)
                                      : data::MakeParabola(rows));
}

std::vector<float> InitialParams(const SyncRun& run, const TempDir& dir) {
  RefOptions plain;
  plain.lr = 1e-30;
  const std::string file = dir.File("init.model");
  const ProcResult r = RunProcess(run.Argv(plain, 1, file), kRunTimeout);
  ExpectExit(r, 0);
  ExpectNoSegments(r.pid);
  return LoadSaved(file).params;
}

RefComparison CompareWithReference(const SyncRun& run, const TempDir& dir) {
  RefComparison c;
  c.w0 = InitialParams(run, dir);
  if (::testing::Test::HasFailure()) return c;
  EXPECT_EQ(c.w0.size(), run.spec.ParamCount());
  c.want = RefTrain(run.spec, c.w0, run.Data(), run.opt, run.steps, &c.trace);
  const std::string file = dir.File("trained.model");
  const ProcResult r = RunProcess(run.Argv(run.opt, run.steps, file), kRunTimeout);
  ExpectExit(r, 0);
  ExpectNoSegments(r.pid);
  const Model m = LoadSaved(file);
  EXPECT_EQ(m.spec, run.spec);
  c.got = m.params;
  c.diff = MaxScaledDiff(c.got, c.want);
  return c;
}

double TrainAgainstReference(const SyncRun& run, const TempDir& dir) {
  return CompareWithReference(run, dir).diff;
}

}  // namespace shmtrain::test
