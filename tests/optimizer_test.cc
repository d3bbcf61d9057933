// Optimisers, learning-rate schedules and gradient clipping, sync mode: the real binary trained
// with each of them by P = 1, 2 and 3 workers ends where the independent double-precision
// reference of tests/reference.h ends, from the same initial parameters, to float rounding
// (kRefTol). The reference is written from the definitions the train flags follow (PyTorch's
// SGD, Adam, AdamW, clip_grad_norm_, LinearLR warmup, StepLR, CosineAnnealingLR,
// ExponentialLR, MultiStepLR), not from the product's code.
//
// - ReferenceTest: the reference against values worked out by hand.
// - OptCaseTest: each case is fit to judge the product. It is still moving at its last update
//   (by more than kStillMoving), so a wrong rule cannot hide at a fixed point and an update too
//   many or too few, or a schedule off by one update, costs more than the tolerance; float
//   rounding alone moves it by less than kRoundingBudget (a few hundred updates at most, and
//   Adam far from convergence, where m / sqrt(v) is not a ratio of rounding errors).
// - OptimizerTest: each case by P = 1, 2, 3 workers against the reference.
// - FeatureTest: each flag matters. The case that uses it ends more than kFeatureEffect away
//   from the reference of the same run without it, so a flag the product accepts and then
//   ignores fails.
//
// Every run takes tens of milliseconds; the file, a few seconds.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "shmtrain/model_spec.h"
#include "tests/proc_util.h"
#include "tests/reference.h"

namespace shmtrain {
namespace {

using test::CompareWithReference;
using test::kRefTol;
using test::MaxScaledDiff;
using test::RefComparison;
using test::RefData;
using test::RefLr;
using test::RefOptimizer;
using test::RefOptions;
using test::RefSchedule;
using test::RefTrace;
using test::RefTrain;
using test::SyncRun;
using test::TempDir;

// The reference's last update must move the parameters by more than this (scaled like
// MaxScaledDiff): ten times kRefTol, so stopping one update early cannot pass.
constexpr double kStillMoving = 1e-4;
// A feature switched off must move the end of a run by more than this: a hundred times
// kRefTol, so the run with the flag ignored cannot pass for the run with it.
constexpr double kFeatureEffect = 1e-3;
// Float rounding alone (RefTrainInFloat against RefTrain) must move a case by less than this,
// a quarter of kRefTol: the product rounds differently, but by as much.
constexpr double kRoundingBudget = kRefTol / 4;

// The example's model: 1-5-1 tanh, mse, y = x^2 on 50 points, N(0, 1) initialisation.
SyncRun Parabola(const RefOptions& opt, int64_t steps) {
  SyncRun run;
  run.example = "parabola";
  run.rows = 50;
  run.spec = ModelSpec::Mlp({1, 5, 1}, Activation::kTanh, run.spec.loss);
  run.spec.loss = Loss::kMse;
  run.init = "normal";
  run.seed = 1;
  run.opt = opt;
  run.steps = steps;
  return run;
}

// Three Gaussian clusters in four dimensions, 60 rows: 4-6-3 tanh, softmax cross-entropy,
// xavier initialisation (biases 0).
SyncRun Blobs(const RefOptions& opt, int64_t steps) {
  SyncRun run;
  run.example = "blobs";
  run.rows = 60;
  run.features = 4;
  run.spec = ModelSpec::Mlp({4, 6, 3}, Activation::kTanh, run.spec.loss);
  run.spec.loss = Loss::kXent;
  run.init = "xavier";
  run.seed = 3;
  run.opt = opt;
  run.steps = steps;
  return run;
}

RefOptions Sgd(double lr) {
  RefOptions o;
  o.lr = lr;
  return o;
}

RefOptions Adam(double lr, RefOptimizer optimizer = RefOptimizer::kAdam) {
  RefOptions o;
  o.lr = lr;
  o.optimizer = optimizer;
  return o;
}

struct OptCase {
  const char* name;
  SyncRun run;  // workers set by the test
  // Whether clipping must scale most updates but not all (OptCaseTest, on the reference's
  // gradient norms).
  bool clips_most = false;
};

void PrintTo(const OptCase& c, std::ostream* os) { *os << c.name; }

std::vector<OptCase> Cases() {
  std::vector<OptCase> cases;
  auto add = [&cases](const char* name, SyncRun run, bool clips_most = false) {
    cases.push_back(OptCase{name, std::move(run), clips_most});
  };

  add("Sgd", Blobs(Sgd(0.1), 300));
  {
    RefOptions o = Sgd(0.005);
    o.momentum = 0.9;
    add("Momentum", Parabola(o, 300));
    o.nesterov = true;
    add("NesterovMomentum", Parabola(o, 300));
  }
  add("Adam", Parabola(Adam(0.01), 200));
  // The default decay, 0.01. lr 0.0045 puts 1 - lr * 0.01 within 2e-9 of a float: a product
  // that rounds the decay factor to float (as PyTorch does for float tensors) would otherwise
  // carry a systematic error of up to 2^-25 per update, 5e-6 over 150 updates.
  add("AdamW", Blobs(Adam(0.0045, RefOptimizer::kAdamW), 150));
  {
    RefOptions o = Sgd(0.01);
    o.momentum = 0.5;
    o.weight_decay = 0.05;
    add("SgdWeightDecay", Parabola(o, 300));
  }
  {
    RefOptions o = Adam(0.01);
    o.beta1 = 0.8;
    o.beta2 = 0.99;
    o.eps = 1e-3;
    o.weight_decay = 0.05;
    add("AdamWeightDecay", Blobs(o, 200));
  }
  {
    RefOptions o = Sgd(0.02);
    o.schedule = RefSchedule::kStep;
    o.step_every = 100;
    o.gamma = 0.5;
    add("Step", Parabola(o, 300));
  }
  {
    RefOptions o = Sgd(0.02);
    o.schedule = RefSchedule::kStep;
    o.step_every = 200;  // the default gamma, 0.1, once: at update 230 of 300
    o.warmup = 30;
    add("StepWarmup", Parabola(o, 300));
  }
  {
    RefOptions o = Sgd(0.2);
    o.schedule = RefSchedule::kCosine;
    o.lr_min = 0.04;
    add("Cosine", Blobs(o, 300));
  }
  {
    RefOptions o = Adam(0.01);
    o.schedule = RefSchedule::kCosine;
    o.lr_min = 0.002;
    o.warmup = 40;
    add("CosineWarmup", Blobs(o, 200));
  }
  {
    RefOptions o = Sgd(0.02);
    o.schedule = RefSchedule::kExponential;
    o.gamma = 0.995;
    add("Exponential", Parabola(o, 300));
  }
  {
    RefOptions o = Sgd(0.2);
    o.schedule = RefSchedule::kExponential;
    o.gamma = 0.99;
    o.warmup = 50;
    add("ExponentialWarmup", Blobs(o, 200));
  }
  {
    RefOptions o = Sgd(0.02);
    o.schedule = RefSchedule::kMultiStep;
    o.milestones = {50, 120, 250};
    o.gamma = 0.5;
    add("MultiStep", Parabola(o, 300));
  }
  {
    RefOptions o = Sgd(0.2);
    o.schedule = RefSchedule::kMultiStep;
    o.milestones = {60};  // the default gamma, 0.1, once: at update 90 of 200
    o.warmup = 30;
    add("MultiStepWarmup", Blobs(o, 200));
  }
  {
    RefOptions o = Sgd(0.01);
    o.warmup = 100;
    add("ConstantWarmup", Parabola(o, 300));
  }
  {
    RefOptions o = Sgd(0.01);
    o.clip_norm = 0.7;
    add("Clip", Parabola(o, 300), /*clips_most=*/true);
  }
  {
    RefOptions o = Adam(0.01);
    o.weight_decay = 0.02;
    o.clip_norm = 0.3;
    o.schedule = RefSchedule::kCosine;
    o.lr_min = 0.001;
    o.warmup = 30;
    add("AdamCosineWarmupClipDecay", Parabola(o, 200), /*clips_most=*/true);
  }
  return cases;
}

const OptCase& FindCase(const std::string& name) {
  static const std::vector<OptCase> cases = Cases();
  for (const OptCase& c : cases) {
    if (name == c.name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return cases.front();
}

// ---------------------------------------------------------------------------------------------
// The reference itself, against values worked out by hand from the definitions: the
// schedules at their corners, the first update of each optimiser, clipping to C.

TEST(ReferenceTest, ScheduleValues) {
  RefOptions o = Sgd(0.1);
  o.warmup = 4;
  EXPECT_DOUBLE_EQ(RefLr(o, 0, 10), 0.025);  // 1/W of the base
  EXPECT_DOUBLE_EQ(RefLr(o, 3, 10), 0.1);    // the base at the last warmup update
  EXPECT_DOUBLE_EQ(RefLr(o, 9, 10), 0.1);
  o.schedule = RefSchedule::kStep;
  o.step_every = 3;
  EXPECT_DOUBLE_EQ(RefLr(o, 4, 10), 0.1);        // s = 0
  EXPECT_DOUBLE_EQ(RefLr(o, 6, 10), 0.1);        // s = 2
  EXPECT_DOUBLE_EQ(RefLr(o, 7, 10), 0.1 * 0.1);  // s = 3: the default gamma
  o.gamma = 0.5;
  EXPECT_DOUBLE_EQ(RefLr(o, 9, 10), 0.1 * 0.5);  // s = 5: floor(5 / 3) = 1
  o.schedule = RefSchedule::kExponential;
  o.step_every = 0;
  EXPECT_DOUBLE_EQ(RefLr(o, 4, 10), 0.1);
  EXPECT_DOUBLE_EQ(RefLr(o, 7, 10), 0.1 * 0.125);
  o.schedule = RefSchedule::kCosine;
  o.gamma.reset();
  o.lr_min = 0.02;
  EXPECT_DOUBLE_EQ(RefLr(o, 4, 10), 0.1);                           // s = 0
  EXPECT_NEAR(RefLr(o, 7, 10), 0.06, 1e-15);                        // s = S/2, S = 6
  EXPECT_NEAR(RefLr(o, 9, 10), 0.02 + 0.08 * 0.0669872981, 1e-10);  // s = 5: (1 + cos 150°)/2
  o.schedule = RefSchedule::kMultiStep;
  o.lr_min = 0;
  o.milestones = {1, 3};
  EXPECT_DOUBLE_EQ(RefLr(o, 4, 10), 0.1);          // s = 0
  EXPECT_DOUBLE_EQ(RefLr(o, 5, 10), 0.1 * 0.1);    // s = 1: the default gamma
  EXPECT_DOUBLE_EQ(RefLr(o, 6, 10), 0.1 * 0.1);    // s = 2
  EXPECT_DOUBLE_EQ(RefLr(o, 7, 10), 0.1 * 0.01);   // s = 3
  EXPECT_DOUBLE_EQ(RefLr(o, 9, 10), 0.1 * 0.01);   // s = 5
}

// A one-parameter problem: the model 1-1 (linear, no hidden layer), mse, one sample x = 1,
// y = 0, so w = (a, b) and g = 2 (a + b) (1, 1).
struct TinyProblem {
  ModelSpec spec;
  RefData data;
  TinyProblem() {
    spec = ModelSpec::Mlp({1, 1}, Activation::kIdentity, Loss::kMse);
    data.rows = 1;
    data.features = 1;
    data.x = {1};
    data.y = {0};
  }
};

TEST(ReferenceTest, FirstUpdates) {
  const TinyProblem p;
  const std::vector<float> w0 = {0.5f, 0.25f};  // g = (1.5, 1.5)
  RefOptions o = Sgd(0.1);
  std::vector<double> w = RefTrain(p.spec, w0, p.data, o, 1);
  EXPECT_DOUBLE_EQ(w[0], 0.5 - 0.1 * 1.5);
  o.momentum = 0.9;
  o.nesterov = true;  // v = g, then g + M v
  w = RefTrain(p.spec, w0, p.data, o, 1);
  EXPECT_DOUBLE_EQ(w[0], 0.5 - 0.1 * 1.9 * 1.5);
  o.nesterov = false;
  o.weight_decay = 0.2;  // g + wd w, into v
  w = RefTrain(p.spec, w0, p.data, o, 1);
  EXPECT_DOUBLE_EQ(w[0], 0.5 - 0.1 * (1.5 + 0.1));
  EXPECT_DOUBLE_EQ(w[1], 0.25 - 0.1 * (1.5 + 0.05));

  // Adam's first update, bias-corrected, is lr * g / (|g| + eps) whatever the betas.
  o = Adam(0.1);
  o.beta1 = 0.5;
  o.eps = 0.5;
  w = RefTrain(p.spec, w0, p.data, o, 1);
  EXPECT_DOUBLE_EQ(w[0], 0.5 - 0.1 * 1.5 / 2.0);
  // AdamW decays the weights first and keeps the decay out of m and v; Adam adds it to g.
  o = Adam(0.1, RefOptimizer::kAdamW);
  o.weight_decay = 0.2;
  w = RefTrain(p.spec, w0, p.data, o, 1);
  EXPECT_NEAR(w[0], 0.5 * (1 - 0.02) - 0.1, 1e-8);
  o.optimizer = RefOptimizer::kAdam;
  w = RefTrain(p.spec, w0, p.data, o, 1);
  EXPECT_NEAR(w[0], 0.5 - 0.1, 1e-8);

  // Clipping scales g = (1.5, 1.5), norm 1.5 sqrt(2), to norm C.
  o = Sgd(1);
  o.clip_norm = 1;
  RefTrace trace;
  w = RefTrain(p.spec, w0, p.data, o, 1, &trace);
  EXPECT_NEAR(w[0], 0.5 - 1 / std::sqrt(2.0), 1e-6);
  EXPECT_EQ(trace.clipped, 1);
  EXPECT_DOUBLE_EQ(trace.grad_norm[0], 1.5 * std::sqrt(2.0));
  o.clip_norm = 3;  // above the norm: g as it is
  w = RefTrain(p.spec, w0, p.data, o, 1, &trace);
  EXPECT_DOUBLE_EQ(w[0], 0.5 - 1.5);
  EXPECT_EQ(trace.clipped, 0);
}

// ---------------------------------------------------------------------------------------------
// Every case is fit to judge the product, whatever the product does: it is still moving at
// its end, float rounding alone (the reference computed in float) moves it by well under
// kRefTol, and clipping, where it is asked for, acts on most updates but not all (a clip that
// never acts tests nothing; one that acts on every update never takes the other branch).

class OptCaseTest : public ::testing::TestWithParam<OptCase> {
 protected:
  TempDir dir_;
};

TEST_P(OptCaseTest, IsSensitiveAndSafeFromRounding) {
  const OptCase& c = GetParam();
  const std::vector<float> w0 = test::InitialParams(c.run, dir_);
  ASSERT_FALSE(w0.empty());
  const RefData data = c.run.Data();
  RefTrace trace;
  const std::vector<double> want = RefTrain(c.run.spec, w0, data, c.run.opt, c.run.steps, &trace);
  const double rounding =
      MaxScaledDiff(test::RefTrainInFloat(c.run.spec, w0, data, c.run.opt, c.run.steps), want);
  std::printf("[ case ] %s: float rounding moves it %.3g, its last update moves it %.3g", c.name,
              rounding, trace.last_move);
  if (c.run.opt.clip_norm > 0) {
    std::printf(", %lld of %lld updates clipped", static_cast<long long>(trace.clipped),
                static_cast<long long>(c.run.steps));
  }
  std::printf("\n");
  EXPECT_LT(rounding, kRoundingBudget) << "too sensitive to rounding: shorten it or lower lr";
  EXPECT_GT(trace.last_move, kStillMoving) << "the case has stopped moving: shorten it";
  if (c.clips_most) {
    EXPECT_GT(2 * trace.clipped, c.run.steps) << "clipping acts on too few updates";
    EXPECT_LT(trace.clipped, c.run.steps) << "clipping acts on every update";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, OptCaseTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Every case by P = 1, 2 and 3 workers against the reference.

struct CaseAtP {
  OptCase c;
  int workers;
};

void PrintTo(const CaseAtP& p, std::ostream* os) { *os << p.c.name << " P=" << p.workers; }

std::vector<CaseAtP> AllCasesAtP() {
  std::vector<CaseAtP> all;
  for (const OptCase& c : Cases()) {
    for (int workers : {1, 2, 3}) all.push_back(CaseAtP{c, workers});
  }
  return all;
}

class OptimizerTest : public ::testing::TestWithParam<CaseAtP> {
 protected:
  TempDir dir_;
};

TEST_P(OptimizerTest, MatchesReference) {
  SyncRun run = GetParam().c.run;
  run.workers = GetParam().workers;
  const double rel = test::TrainAgainstReference(run, dir_);
  std::printf("[ optimizer ] %s P=%d: max scaled difference %.3g\n", GetParam().c.name, run.workers,
              rel);
  RecordProperty("max_scaled_diff", std::to_string(rel));
  EXPECT_LE(rel, kRefTol);
}

INSTANTIATE_TEST_SUITE_P(Cases, OptimizerTest, ::testing::ValuesIn(AllCasesAtP()),
                         [](const auto& info) {
                           return std::string(info.param.c.name) + "_P" +
                                  std::to_string(info.param.workers);
                         });

// ---------------------------------------------------------------------------------------------
// Every flag changes the trajectory: the case that uses it, by 2 workers, ends more than
// kFeatureEffect away from the reference of the same run without it. A product that accepts
// the flag and ignores it ends near the latter, and fails here (and in OptimizerTest).

struct FeatureCase {
  const char* name;
  const char* base;          // the OptCase
  void (*off)(RefOptions*);  // switches the feature off
};

void PrintTo(const FeatureCase& f, std::ostream* os) { *os << f.name; }

class FeatureTest : public ::testing::TestWithParam<FeatureCase> {
 protected:
  TempDir dir_;
};

TEST_P(FeatureTest, ChangesTrajectory) {
  const FeatureCase& f = GetParam();
  SyncRun run = FindCase(f.base).run;
  run.workers = 2;
  RefOptions off = run.opt;
  f.off(&off);
  const RefComparison r = CompareWithReference(run, dir_);
  ASSERT_FALSE(r.w0.empty());
  const std::vector<double> without = RefTrain(run.spec, r.w0, run.Data(), off, run.steps);
  const double apart = MaxScaledDiff(r.got, without);
  std::printf("[ feature ] %s (%s P=2): %.3g from the run without it, %.3g from the reference\n",
              f.name, f.base, apart, r.diff);
  RecordProperty("distance_without_feature", std::to_string(apart));
  EXPECT_LE(r.diff, kRefTol);
  EXPECT_GT(apart, kFeatureEffect);
}

std::vector<FeatureCase> Features() {
  return {FeatureCase{"Nesterov", "NesterovMomentum", [](RefOptions* o) { o->nesterov = false; }},
          FeatureCase{"Adam", "Adam", [](RefOptions* o) { o->optimizer = RefOptimizer::kSgd; }},
          // Decoupled decay is not Adam's L2 decay of the same strength...
          FeatureCase{"AdamWDecoupled", "AdamW",
                      [](RefOptions* o) {
                        o->optimizer = RefOptimizer::kAdam;
                        o->weight_decay = 0.01;
                      }},
          // ...and AdamW decays by default.
          FeatureCase{"AdamWDefaultDecay", "AdamW", [](RefOptions* o) { o->weight_decay = 0.0; }},
          FeatureCase{"SgdWeightDecay", "SgdWeightDecay",
                      [](RefOptions* o) { o->weight_decay.reset(); }},
          FeatureCase{"AdamWeightDecay", "AdamWeightDecay",
                      [](RefOptions* o) { o->weight_decay.reset(); }},
          FeatureCase{"Beta1", "AdamWeightDecay", [](RefOptions* o) { o->beta1.reset(); }},
          FeatureCase{"Beta2", "AdamWeightDecay", [](RefOptions* o) { o->beta2.reset(); }},
          FeatureCase{"Eps", "AdamWeightDecay", [](RefOptions* o) { o->eps.reset(); }},
          FeatureCase{"StepSchedule", "Step",
                      [](RefOptions* o) { o->schedule = RefSchedule::kConstant; }},
          FeatureCase{"StepGamma", "Step", [](RefOptions* o) { o->gamma.reset(); }},
          FeatureCase{"CosineSchedule", "Cosine",
                      [](RefOptions* o) { o->schedule = RefSchedule::kConstant; }},
          FeatureCase{"CosineLrMin", "Cosine", [](RefOptions* o) { o->lr_min = 0; }},
          FeatureCase{"ExponentialSchedule", "Exponential",
                      [](RefOptions* o) { o->schedule = RefSchedule::kConstant; }},
          FeatureCase{"MultiStepSchedule", "MultiStep",
                      [](RefOptions* o) {
                        o->schedule = RefSchedule::kConstant;
                        o->milestones.clear();
                      }},
          FeatureCase{"MultiStepGamma", "MultiStep", [](RefOptions* o) { o->gamma.reset(); }},
          // Milestones count from the end of the warmup: 60 after 30, not update 60.
          FeatureCase{"MilestonesAfterTheWarmup", "MultiStepWarmup",
                      [](RefOptions* o) { o->milestones = {30}; }},
          FeatureCase{"Warmup", "ConstantWarmup", [](RefOptions* o) { o->warmup = 0; }},
          FeatureCase{"WarmupBeforeSchedule", "ExponentialWarmup",
                      [](RefOptions* o) { o->warmup = 0; }},
          FeatureCase{"Clip", "Clip", [](RefOptions* o) { o->clip_norm = 0; }},
          FeatureCase{"ClipWithAdam", "AdamCosineWarmupClipDecay",
                      [](RefOptions* o) { o->clip_norm = 0; }}};
}

INSTANTIATE_TEST_SUITE_P(Features, FeatureTest, ::testing::ValuesIn(Features()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace shmtrain
