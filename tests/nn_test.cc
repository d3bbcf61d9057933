// Tests of the pure-maths layer: model vocabulary, Rng, MLP loss/gradient/prediction,
// initialisation and the update rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <numeric>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/decimal.h"
#include "core/utf8.h"
#include "data/batch_plan.h"
#include "data/format.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "nn/rng.h"
#include "nn/schedule.h"
#include "nn/update.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {
namespace {

// The MLPs of these tests, as --layers and --activation give them.
ModelSpec Mlp(const std::vector<int>& sizes, Activation f = Activation::kTanh,
              Loss loss = Loss::kMse) {
  return ModelSpec::Mlp(sizes, f, loss);
}
std::vector<int> Sizes(const ModelSpec& spec) {
  std::vector<int> sizes;
  Activation f;
  EXPECT_TRUE(spec.AsMlp(&sizes, &f)) << spec.Text();
  return sizes;
}
Activation ActivationOf(const ModelSpec& spec) {
  std::vector<int> sizes;
  Activation f = Activation::kTanh;
  EXPECT_TRUE(spec.AsMlp(&sizes, &f)) << spec.Text();
  return f;
}


// ---------------------------------------------------------------------------------------------
// ModelSpec vocabulary

// Every enum with names (shmtrain/enum_names.h): each name of its one table parses to its
// value and the value prints as a name that parses back; no name twice; the values are 0..N-1
// (the stored ones are append-only) and each has a name, the next one none.
template <class E>
class EnumNamesTest : public ::testing::Test {};
using NamedEnums = ::testing::Types<Activation, Loss, Init, Mode, LogFormat, HeaderMode,
                                    AsyncRule, Normalize, ComputeType, Task>;
TYPED_TEST_SUITE(EnumNamesTest, NamedEnums);

TYPED_TEST(EnumNamesTest, EveryNameRoundTripsThroughTheOneTable) {
  using E = TypeParam;
  std::set<std::string> names;
  std::set<uint32_t> values;
  for (const EnumName<E>& n : NameTable(E{})) {
    EXPECT_EQ(ParseEnum<E>(n.name), n.value) << n.name;
    EXPECT_EQ(ParseEnum<E>(ToString(n.value)), n.value) << n.name;
    EXPECT_TRUE(names.insert(n.name).second) << "two entries named " << n.name;
    values.insert(static_cast<uint32_t>(n.value));
  }
  for (uint32_t v = 0; v < values.size(); ++v) {
    EXPECT_TRUE(values.count(v)) << "value " << v << " has no name";
  }
  const E beyond = static_cast<E>(values.size());
  EXPECT_STREQ(ToString(beyond), "unknown");
  EXPECT_FALSE(ParseEnum<E>(ToString(beyond)).has_value());
  EXPECT_FALSE(ParseEnum<E>("").has_value());
}

// The spellings flags, logs and files have always used, in --help's order; aliases parse only.
TEST(EnumNames, AreTheSpellingsOfEveryRelease) {
  EXPECT_EQ(EnumNames<Activation>("|"), "tanh|relu|sigmoid|identity");
  EXPECT_EQ(EnumNames<Loss>("|"), "mse|xent");
  EXPECT_EQ(EnumNames<Init>("|"), "torch|normal|xavier|he");
  EXPECT_EQ(EnumNames<Mode>("|"), "sync|async");
  EXPECT_EQ(EnumNames<LogFormat>("|"), "text|json");
  EXPECT_EQ(EnumNames<HeaderMode>("|"), "auto|yes|no");
  EXPECT_EQ(data::FormatNames(", "), "auto, csv, libsvm, idx, npy, npz, images");  // data/format.h
  EXPECT_EQ(EnumNames<AsyncRule>("|"), "asgd|dc-asgd-c|dc-asgd-a");
  EXPECT_EQ(EnumNames<Normalize>("|"), "none|minmax|standard|channel");
  EXPECT_EQ(EnumNames<ComputeType>("|"), "float|bf16");
  EXPECT_EQ(EnumNames<Task>("|"), "classification|regression");
  EXPECT_EQ(data::FindFormat("svmlight"), data::FindFormat("libsvm"));
  EXPECT_STREQ(data::FindFormat("svmlight")->name, "libsvm");
  EXPECT_STREQ(ToString(Init::kTorch), "torch");
  EXPECT_STREQ(ToString(Init::kNormal), "normal");
  EXPECT_STREQ(ToString(Task::kRegression), "regression");
  EXPECT_STREQ(ToString(AsyncRule::kDcAsgdC), "dc-asgd-c");
}

// The number formats of messages, files and logs (core/decimal.h), each written once: where
// two of them differ, each keeps its own text.
TEST(NumberText, EachFormatKeepsItsText) {
  EXPECT_EQ(ShortestText(100000), "1e+05");  // class names, layer arguments, JSON numbers
  EXPECT_EQ(ShortestDecimal(100000), "100000");  // flag values and defaults
  EXPECT_EQ(Fmt("%g", 100000), "100000");
  EXPECT_EQ(ShortestText(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(ShortestDecimal(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(Fmt("%g", 0.1 + 0.2), "0.3");
  EXPECT_EQ(ShortestText(-2.5), "-2.5");
  EXPECT_EQ(ShortestText(1e-7), "1e-07");
  EXPECT_EQ(Fmt("%.9g", 1.0f / 3), "0.333333343");
  EXPECT_EQ(Fmt("%gs", 0.05), "0.05s");
  EXPECT_EQ(Plural(1, "worker"), "1 worker");
  EXPECT_EQ(Plural(0, "row"), "0 rows");
  EXPECT_EQ(Plural(-1, "row"), "-1 rows");
  EXPECT_EQ(EscapedByte(0), "\\x00");
  EXPECT_EQ(EscapedByte(0xff), "\\xff");
}

TEST(ModelSpecTest, RejectsUnknownNames) {
  for (const char* s : {"", "Tanh", "TANH", "tanh ", " relu", "softmax", "linear", "mse"}) {
    EXPECT_FALSE(ParseEnum<Activation>(s).has_value()) << '"' << s << '"';
  }
  for (const char* s : {"", "MSE", "mae", "xentropy", "cross_entropy", "tanh"}) {
    EXPECT_FALSE(ParseEnum<Loss>(s).has_value()) << '"' << s << '"';
  }
  for (const char* s : {"", "Normal", "uniform", "glorot", "kaiming", "he "}) {
    EXPECT_FALSE(ParseEnum<Init>(s).has_value()) << '"' << s << '"';
  }
}

TEST(ModelSpecTest, OutOfRangeEnumHasUnparseableName) {
  const char* name = ToString(static_cast<Activation>(99));
  ASSERT_NE(name, nullptr);
  EXPECT_FALSE(ParseEnum<Activation>(name).has_value());
  EXPECT_FALSE(ParseEnum<Loss>(ToString(static_cast<Loss>(99))).has_value());
  EXPECT_FALSE(ParseEnum<Init>(ToString(static_cast<Init>(99))).has_value());
}

TEST(ModelSpecTest, ParamCount) {
  EXPECT_EQ(Mlp({1, 5, 1}).ParamCount(), 16u);
  EXPECT_EQ(Mlp({64, 128, 10}).ParamCount(), 9610u);
  EXPECT_EQ(Mlp({3, 2}).ParamCount(), 8u);
  // Above 2^32 parameters the count must not wrap.
  EXPECT_EQ(Mlp({65536, 65536, 65536}).ParamCount(), 2 * (size_t{65536} * 65536 + 65536));
  EXPECT_EQ(Mlp({1, 5, 1}).CheckedParamCount(), std::optional<uint64_t>(16));
}

// The one count of the parameters (the segment's check and model files use it too) says when
// it does not fit in 64 bits instead of wrapping. The model text's limits keep a parsed model
// far below that; layers built directly need not respect them: each linear(2^31 - 1) after
// the first holds about 2^62 parameters, and five of them pass 2^64.
TEST(ModelSpecTest, ParamCountPast64BitsIsNoCount) {
  ModelSpec spec;
  spec.input = {65536, 1, 1};
  const LayerSpec wide{"linear", {2147483647.0}};
  spec.layers = {wide, wide, wide, wide, wide, LayerSpec{"linear", {1.0}}};
  std::vector<Shape> shapes;
  ASSERT_TRUE(ResolveShapes(spec.input, spec.layers, &shapes).ok());
  EXPECT_EQ(spec.CheckedParamCount(), std::nullopt);
  EXPECT_EQ(spec.ParamCount(), 0u);
  spec.layers.resize(2);  // about 2^62: still a count
  const uint64_t wide_out = 2147483647;
  EXPECT_EQ(spec.CheckedParamCount(),
            std::optional<uint64_t>(wide_out * 65536 + wide_out + wide_out * wide_out + wide_out));
}

// A broken invariant dies through the one helper, naming its file and line.
TEST(DieTest, CheckNamesFileAndLine) {
  EXPECT_DEATH(SHMTRAIN_CHECK(1 + 1 == 3, "arithmetic " + std::to_string(2)),
               "shmtrain: internal error at .*nn_test\\.cc:[0-9]+: arithmetic 2");
  SHMTRAIN_CHECK(1 + 1 == 2, "never evaluated");
}

// Out-of-range arguments are a caller's bug: the plan dies through the project's one check,
// naming its file and line (docs/errors.md), not a private abort.
TEST(BatchPlanDeathTest, BadArgumentsDieNamingFileAndLine) {
  const char* where = "shmtrain: internal error at .*batch_plan\\.cc:[0-9]+: BatchPlan: ";
  EXPECT_DEATH(data::BatchPlan(0, 1, 1), std::string(where) + "rows must be >= 1");
  EXPECT_DEATH(data::BatchPlan(5, -1, 1), std::string(where) + "batch must be >= 0");
  EXPECT_DEATH((void)data::BatchPlan(5, 1, 1).BatchRows(-1), std::string(where) + "step must be");
  EXPECT_DEATH(data::BatchPlan::ShareOf(5, 0, 0), std::string(where) + "P must be >= 1");
  EXPECT_DEATH(data::BatchPlan::ShareOf(5, 2, 2), std::string(where) + "rank must be in");
  EXPECT_DEATH(data::BatchPlan::ShareOf(-1, 0, 1), std::string(where) + "batch rows must be");
}

// ---------------------------------------------------------------------------------------------
// Rng

TEST(RngTest, PinnedSequenceForSeed1) {
  // xoshiro256** seeded by SplitMix64(1), as computed by an independent implementation.
  Rng rng(1);
  EXPECT_EQ(rng.Next(), 0xb3f2af6d0fc710c5ULL);
  EXPECT_EQ(rng.Next(), 0x853b559647364ceaULL);
  EXPECT_EQ(rng.Next(), 0x92f89756082a4514ULL);
  EXPECT_EQ(rng.Next(), 0x642e1c7bc266a3a7ULL);
}

TEST(RngTest, SameSeedSameStreamDifferentSeedDifferentStream) {
  Rng a(42), b(42), c(43);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const uint64_t va = a.Next();
    EXPECT_EQ(va, b.Next());
    differ += va != c.Next();
  }
  EXPECT_EQ(differ, 100);
}

TEST(RngTest, SeedZeroIsUsable) {
  Rng rng(0);
  uint64_t any = 0;
  for (int i = 0; i < 8; ++i) any |= rng.Next();
  EXPECT_NE(any, 0u);
}

TEST(RngTest, BelowStaysInRange) {
  Rng rng(7);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(rng.Below(1), 0u);
  for (uint64_t bound : {uint64_t{2}, uint64_t{3}, uint64_t{10}, uint64_t{1} << 32,
                         (uint64_t{1} << 63) + 1, std::numeric_limits<uint64_t>::max()}) {
    for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.Below(bound), bound) << bound;
  }
}

TEST(RngTest, BelowIsRoughlyUniform) {
  Rng rng(123);
  constexpr int kBound = 7;
  constexpr int kPerBucket = 10000;
  std::vector<int> counts(kBound, 0);
  for (int i = 0; i < kBound * kPerBucket; ++i) ++counts[rng.Below(kBound)];
  // Standard deviation per bucket is about 93; 5% is over 5 sigma.
  for (int c : counts) EXPECT_NEAR(c, kPerBucket, kPerBucket * 0.05);
}

TEST(RngTest, BelowLargeBoundCoversBothHalves) {
  // With bound = 2^63 + 1 about half of the draws are >= 2^62 * 2; a biased or truncated
  // multiply would skew this.
  Rng rng(5);
  const uint64_t bound = (uint64_t{1} << 63) + 1;
  int upper = 0;
  constexpr int kDraws = 20000;
  for (int i = 0; i < kDraws; ++i) upper += rng.Below(bound) >= (uint64_t{1} << 62);
  EXPECT_NEAR(upper, kDraws / 2, kDraws * 0.03);
}

TEST(RngTest, UniformRangeAndMoments) {
  Rng rng(9);
  constexpr int kDraws = 200000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    // A multiple of 2^-53.
    ASSERT_EQ(std::ldexp(u, 53), std::floor(std::ldexp(u, 53)));
    sum += u;
    sum2 += u * u;
  }
  const double mean = sum / kDraws;
  EXPECT_NEAR(mean, 0.5, 0.005);
  EXPECT_NEAR(sum2 / kDraws - mean * mean, 1.0 / 12.0, 0.002);
}

TEST(RngTest, UniformIsTopBitsOfNext) {
  Rng a(77), b(77);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(a.Uniform(), static_cast<double>(b.Next() >> 11) * 0x1.0p-53);
  }
}

TEST(RngTest, NormalIsBoxMullerOfTwoUniforms) {
  Rng a(31), b(31);
  for (int i = 0; i < 100; ++i) {
    const double u1 = 1.0 - b.Uniform();
    const double u2 = b.Uniform();
    EXPECT_EQ(a.Normal(), std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }
  // Exactly two draws per value: the streams are still in step.
  EXPECT_EQ(a.Next(), b.Next());
}

TEST(RngTest, NormalMoments) {
  Rng rng(2024);
  constexpr int kDraws = 200000;
  double sum = 0, sum2 = 0, sum4 = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double z = rng.Normal();
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum2 += z * z;
    sum4 += z * z * z * z;
  }
  EXPECT_NEAR(sum / kDraws, 0.0, 0.01);
  EXPECT_NEAR(sum2 / kDraws, 1.0, 0.015);
  EXPECT_NEAR(sum4 / kDraws, 3.0, 0.1);
}

TEST(RngTest, MixSeed) {
  EXPECT_EQ(MixSeed(1, 2), MixSeed(1, 2));
  EXPECT_NE(MixSeed(1, 2), MixSeed(1, 3));
  EXPECT_NE(MixSeed(1, 2), MixSeed(2, 2));
  std::vector<uint64_t> seeds;
  for (uint64_t stream = 0; stream < 1000; ++stream) seeds.push_back(MixSeed(12345, stream));
  std::sort(seeds.begin(), seeds.end());
  EXPECT_EQ(std::adjacent_find(seeds.begin(), seeds.end()), seeds.end());
  // Streams of neighbouring epochs start differently.
  Rng e0(MixSeed(1, 0)), e1(MixSeed(1, 1));
  EXPECT_NE(e0.Next(), e1.Next());
}

TEST(RngTest, PermutationIsAPermutation) {
  for (int64_t n : {0, 1, 2, 3, 10, 1000}) {
    Rng rng(static_cast<uint64_t>(n) + 1);
    std::vector<int64_t> perm = {99, 98};  // stale contents must be replaced
    Permutation(n, rng, &perm);
    ASSERT_EQ(perm.size(), static_cast<size_t>(n));
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(static_cast<size_t>(n));
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(sorted, iota) << "n=" << n;
  }
}

TEST(RngTest, PermutationIsDeterministic) {
  std::vector<int64_t> a, b, c;
  Rng ra(8), rb(8), rc(9);
  Permutation(500, ra, &a);
  Permutation(500, rb, &b);
  Permutation(500, rc, &c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(RngTest, PermutationPinned) {
  // Pins Fisher-Yates from the top with Below(i + 1), so a change to the shuffle (which would
  // change every minibatch of every run) is caught.
  Rng rng(1);
  std::vector<int64_t> perm;
  Permutation(10, rng, &perm);
  EXPECT_EQ(perm, (std::vector<int64_t>{3, 6, 1, 5, 0, 9, 2, 8, 4, 7}));
}

TEST(RngTest, PermutationOfThreeIsUniform) {
  Rng rng(4);
  std::map<std::vector<int64_t>, int> counts;
  constexpr int kTrials = 60000;
  std::vector<int64_t> perm;
  for (int i = 0; i < kTrials; ++i) {
    Permutation(3, rng, &perm);
    ++counts[perm];
  }
  ASSERT_EQ(counts.size(), 6u);
  // Expected 10000 each, standard deviation about 91.
  for (const auto& [p, c] : counts) EXPECT_NEAR(c, kTrials / 6, 500);
}

// ---------------------------------------------------------------------------------------------
// MLP: helpers

// An independent, loop-by-loop forward pass in double: the loss sum, the outputs (softmax
// probabilities for xent) and the smallest |z| over hidden pre-activations (to keep finite
// differences away from relu's kink).
struct Reference {
  double loss = 0;
  std::vector<double> outputs;  // n x outputs, row-major
  double min_abs_hidden_z = std::numeric_limits<double>::infinity();
};

double RefActivate(Activation f, double z) {
  switch (f) {
    case Activation::kTanh:
      return std::tanh(z);
    case Activation::kRelu:
      return z > 0 ? z : 0;
    case Activation::kSigmoid:
      return 1 / (1 + std::exp(-z));
    case Activation::kIdentity:
      return z;
  }
  return 0;
}

template <class S>
Reference RunReference(const ModelSpec& spec, const std::vector<S>& params, const std::vector<S>& x,
                       const std::vector<S>& y, int64_t n) {
  Reference ref;
  const size_t num_layers = Sizes(spec).size() - 1;
  for (int64_t s = 0; s < n; ++s) {
    std::vector<double> a(x.begin() + s * spec.inputs(), x.begin() + (s + 1) * spec.inputs());
    size_t off = 0;
    for (size_t l = 0; l < num_layers; ++l) {
      const int in = Sizes(spec)[l], out = Sizes(spec)[l + 1];
      std::vector<double> z(out);
      for (int i = 0; i < out; ++i) {
        double acc = params[off + out * in + i];
        for (int j = 0; j < in; ++j) acc += params[off + i + j * out] * a[j];
        z[i] = acc;
      }
      off += out * in + out;
      if (l + 1 < num_layers) {
        for (double& v : z) {
          ref.min_abs_hidden_z = std::min(ref.min_abs_hidden_z, std::abs(v));
          v = RefActivate(ActivationOf(spec), v);
        }
      }
      a = z;
    }
    if (spec.loss == Loss::kMse) {
      for (double v : a) {
        ref.loss += (v - y[s]) * (v - y[s]);
        ref.outputs.push_back(v);
      }
    } else {
      double sum = 0;
      for (double v : a) sum += std::exp(v);
      for (double v : a) ref.outputs.push_back(std::exp(v) / sum);
      ref.loss += std::log(sum) - a[static_cast<int>(y[s])];
    }
  }
  return ref;
}

// Random parameters, inputs and targets for spec, from a fixed seed.
struct Problem {
  ModelSpec spec;
  int64_t n = 0;
  std::vector<double> params, x, y;
};

Problem MakeProblem(const ModelSpec& spec, int64_t n, uint64_t seed, double param_scale = 0.7) {
  Problem p{spec, n, {}, {}, {}};
  Rng rng(seed);
  p.params.resize(spec.ParamCount());
  for (double& v : p.params) v = param_scale * rng.Normal();
  p.x.resize(static_cast<size_t>(n * spec.inputs()));
  for (double& v : p.x) v = rng.Normal();
  p.y.resize(static_cast<size_t>(n));
  for (double& v : p.y) {
    v = spec.loss == Loss::kMse ? rng.Normal() : static_cast<double>(rng.Below(spec.outputs()));
  }
  return p;
}

template <class S>
std::vector<S> Cast(const std::vector<double>& v) {
  return std::vector<S>(v.begin(), v.end());
}

// A 3-4-5-k net (two hidden layers) with the given activation and loss; for relu the
// parameters are redrawn until no hidden pre-activation is within 1e-3 of the kink.
Problem MakeGradProblem(Activation act, Loss loss) {
  ModelSpec spec = Mlp({3, 4, 5, loss == Loss::kMse ? 1 : 4}, act, loss);
  for (uint64_t seed = 1;; ++seed) {
    Problem p = MakeProblem(spec, 6, seed);
    const Reference ref = RunReference(spec, p.params, p.x, p.y, p.n);
    if (ref.min_abs_hidden_z > 1e-3) return p;
  }
}

// ---------------------------------------------------------------------------------------------
// MLP: gradient checks for every activation x loss

struct Combo {
  Activation activation;
  Loss loss;
};

void PrintTo(const Combo& c, std::ostream* os) {
  *os << ToString(c.activation) << "/" << ToString(c.loss);
}

class GradTest : public ::testing::TestWithParam<Combo> {};

TEST_P(GradTest, LossMatchesReference) {
  const Problem p = MakeGradProblem(GetParam().activation, GetParam().loss);
  Workspace<double> ws;
  const double loss = LossSum(p.spec, p.params.data(), p.x.data(), p.y.data(), p.n, ws);
  const Reference ref = RunReference(p.spec, p.params, p.x, p.y, p.n);
  EXPECT_NEAR(loss, ref.loss, 1e-12 * std::max(1.0, std::abs(ref.loss)));
}

TEST_P(GradTest, FiniteDifferences) {
  Problem p = MakeGradProblem(GetParam().activation, GetParam().loss);
  Workspace<double> ws;
  std::vector<double> grad(p.spec.ParamCount(), 0.0);
  const double loss =
      LossAndGrad(p.spec, p.params.data(), p.x.data(), p.y.data(), p.n, grad.data(), ws);
  EXPECT_GT(loss, 0.0);

  constexpr double kH = 1e-6;
  double max_abs_grad = 0;
  for (size_t i = 0; i < grad.size(); ++i) {
    const double saved = p.params[i];
    p.params[i] = saved + kH;
    const double plus = LossSum(p.spec, p.params.data(), p.x.data(), p.y.data(), p.n, ws);
    p.params[i] = saved - kH;
    const double minus = LossSum(p.spec, p.params.data(), p.x.data(), p.y.data(), p.n, ws);
    p.params[i] = saved;
    const double numeric = (plus - minus) / (2 * kH);
    EXPECT_NEAR(grad[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "param " << i;
    max_abs_grad = std::max(max_abs_grad, std::abs(grad[i]));
  }
  // The check means something only if the gradient is not trivially zero.
  EXPECT_GT(max_abs_grad, 1e-2);
}

TEST_P(GradTest, FloatMatchesDouble) {
  const Problem p = MakeGradProblem(GetParam().activation, GetParam().loss);
  // Both instantiations see the same (float-representable) numbers.
  const std::vector<float> pf = Cast<float>(p.params), xf = Cast<float>(p.x), yf = Cast<float>(p.y);
  const std::vector<double> pd(pf.begin(), pf.end()), xd(xf.begin(), xf.end()),
      yd(yf.begin(), yf.end());
  Workspace<float> wsf;
  Workspace<double> wsd;
  std::vector<float> gf(p.spec.ParamCount());
  std::vector<double> gd(p.spec.ParamCount());
  const double lf = LossAndGrad(p.spec, pf.data(), xf.data(), yf.data(), p.n, gf.data(), wsf);
  const double ld = LossAndGrad(p.spec, pd.data(), xd.data(), yd.data(), p.n, gd.data(), wsd);
  EXPECT_NEAR(lf, ld, 1e-4 * std::abs(ld));
  for (size_t i = 0; i < gd.size(); ++i) {
    EXPECT_NEAR(gf[i], gd[i], 1e-4 * std::max(1.0, std::abs(gd[i]))) << "param " << i;
  }
}

TEST_P(GradTest, HalvesAddUpToTheWholeBatch) {
  // The distributed average relies on this: workers' gradient sums over disjoint shares add
  // up to the gradient of the full batch.
  const Combo c = GetParam();
  ModelSpec spec = Mlp({3, 4, 5, c.loss == Loss::kMse ? 1 : 4}, c.activation, c.loss);
  const Problem p = MakeProblem(spec, 10, 17);
  const std::vector<float> params = Cast<float>(p.params), x = Cast<float>(p.x),
                           y = Cast<float>(p.y);
  const size_t np = spec.ParamCount();
  Workspace<float> ws;
  std::vector<float> whole(np), first(np), second(np);
  for (int64_t split : {5, 3, 0, 10}) {
    const double l_whole =
        LossAndGrad(spec, params.data(), x.data(), y.data(), 10, whole.data(), ws);
    const double l_first =
        LossAndGrad(spec, params.data(), x.data(), y.data(), split, first.data(), ws);
    const double l_second = LossAndGrad(spec, params.data(), x.data() + split * spec.inputs(),
                                        y.data() + split, 10 - split, second.data(), ws);
    EXPECT_NEAR(l_first + l_second, l_whole, 1e-5 * std::max(1.0, l_whole)) << split;
    for (size_t i = 0; i < np; ++i) {
      EXPECT_NEAR(first[i] + second[i], whole[i], 1e-5 * std::max(1.0f, std::abs(whole[i])))
          << "split " << split << " param " << i;
    }
  }
}

TEST_P(GradTest, LossSumEqualsLossAndGradLoss) {
  const Problem p = MakeGradProblem(GetParam().activation, GetParam().loss);
  const std::vector<float> params = Cast<float>(p.params), x = Cast<float>(p.x),
                           y = Cast<float>(p.y);
  Workspace<float> ws;
  std::vector<float> grad(p.spec.ParamCount());
  const double with_grad =
      LossAndGrad(p.spec, params.data(), x.data(), y.data(), p.n, grad.data(), ws);
  EXPECT_EQ(LossSum(p.spec, params.data(), x.data(), y.data(), p.n, ws), with_grad);
}

std::string ComboName(const ::testing::TestParamInfo<Combo>& info) {
  return std::string(ToString(info.param.activation)) + "_" + ToString(info.param.loss);
}

INSTANTIATE_TEST_SUITE_P(AllActivationsAndLosses, GradTest,
                         ::testing::Values(Combo{Activation::kTanh, Loss::kMse},
                                           Combo{Activation::kTanh, Loss::kXent},
                                           Combo{Activation::kRelu, Loss::kMse},
                                           Combo{Activation::kRelu, Loss::kXent},
                                           Combo{Activation::kSigmoid, Loss::kMse},
                                           Combo{Activation::kSigmoid, Loss::kXent},
                                           Combo{Activation::kIdentity, Loss::kMse},
                                           Combo{Activation::kIdentity, Loss::kXent}),
                         ComboName);

// ---------------------------------------------------------------------------------------------
// MLP: hand-computed cases and edge cases

TEST(MlpTest, TinyIdentityMseByHand) {
  // yhat = w1 * (w0 * x + b0) + b1 with w0 = 2, b0 = 1, w1 = 3, b1 = -1.
  // x = {1, 2}: hidden {3, 5}, yhat {8, 14}; y = {5, 10}: residuals {3, 4}, loss 9 + 16 = 25.
  // dL/dyhat = 2r = {6, 8}: db1 = 14, dw1 = 6*3 + 8*5 = 58, db0 = 3*14 = 42,
  // dw0 = 3 * (6*1 + 8*2) = 66.
  const ModelSpec spec = Mlp({1, 1, 1}, Activation::kIdentity, Loss::kMse);
  const std::vector<double> params = {2, 1, 3, -1};
  const std::vector<double> x = {1, 2}, y = {5, 10};
  Workspace<double> ws;
  std::vector<double> grad(4);
  EXPECT_DOUBLE_EQ(LossAndGrad(spec, params.data(), x.data(), y.data(), 2, grad.data(), ws), 25.0);
  EXPECT_EQ(grad, (std::vector<double>{66, 42, 58, 14}));

  const std::vector<float> pf = {2, 1, 3, -1}, xf = {1, 2}, yf = {5, 10};
  Workspace<float> wsf;
  std::vector<float> gf(4);
  EXPECT_DOUBLE_EQ(LossAndGrad(spec, pf.data(), xf.data(), yf.data(), 2, gf.data(), wsf), 25.0);
  EXPECT_EQ(gf, (std::vector<float>{66, 42, 58, 14}));

  std::vector<double> out(2);
  Predict(spec, params.data(), x.data(), 2, out.data(), ws);
  EXPECT_EQ(out, (std::vector<double>{8, 14}));
}

TEST(MlpTest, XentOfZeroLogitsIsNLogK) {
  for (int k : {2, 3, 10}) {
    const ModelSpec spec = Mlp({2, 3, k}, Activation::kTanh, Loss::kXent);
    const std::vector<float> params(spec.ParamCount(), 0.0f);
    const int64_t n = 5;
    std::vector<float> x(n * 2), y(n);
    for (int64_t i = 0; i < n; ++i) {
      x[2 * i] = static_cast<float>(i);
      x[2 * i + 1] = -1.0f;
      y[i] = static_cast<float>(i % k);
    }
    Workspace<float> ws;
    std::vector<float> grad(spec.ParamCount());
    const double loss = LossAndGrad(spec, params.data(), x.data(), y.data(), n, grad.data(), ws);
    EXPECT_NEAR(loss, n * std::log(static_cast<double>(k)), 1e-5) << k;
    // Output bias gradient: sum over samples of (1/K - onehot).
    const size_t b_off = spec.ParamCount() - k;
    for (int c = 0; c < k; ++c) {
      int hits = 0;
      for (int64_t i = 0; i < n; ++i) hits += (i % k) == c;
      EXPECT_NEAR(grad[b_off + c], static_cast<double>(n) / k - hits, 1e-6) << k << " " << c;
    }
  }
}

TEST(MlpTest, XentIsStableForHugeLogits) {
  // Logits of +-1e4 overflow exp() unless the max is subtracted.
  const ModelSpec spec = Mlp({1, 3}, Activation::kIdentity, Loss::kXent);
  const std::vector<float> params = {1e4f, 0.0f, -1e4f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> x = {1.0f, 1.0f}, y = {0.0f, 2.0f};
  Workspace<float> ws;
  std::vector<float> grad(spec.ParamCount());
  const double loss = LossAndGrad(spec, params.data(), x.data(), y.data(), 2, grad.data(), ws);
  // Sample 0 is right with certainty (loss ~0); sample 1 is wrong by 2e4.
  EXPECT_NEAR(loss, 2e4, 1e-2);
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
  std::vector<float> out(6);
  Predict(spec, params.data(), x.data(), 2, out.data(), ws);
  EXPECT_NEAR(out[0], 1.0f, 1e-6);
  EXPECT_NEAR(out[2], 0.0f, 1e-6);
}

TEST(MlpTest, EmptyBatch) {
  for (Loss loss : {Loss::kMse, Loss::kXent}) {
    const ModelSpec spec = Mlp({3, 4, 5, loss == Loss::kMse ? 1 : 3}, Activation::kRelu, loss);
    const Problem p = MakeProblem(spec, 0, 3);
    Workspace<float> ws;
    const std::vector<float> params = Cast<float>(p.params);
    std::vector<float> grad(spec.ParamCount(), 7.0f);
    // No sample is read, so null x and y are fine.
    EXPECT_EQ(LossAndGrad<float>(spec, params.data(), nullptr, nullptr, 0, grad.data(), ws), 0.0);
    for (float g : grad) EXPECT_EQ(g, 0.0f);
    EXPECT_EQ(LossSum<float>(spec, params.data(), nullptr, nullptr, 0, ws), 0.0);

    Workspace<double> wsd;
    std::vector<double> gd(spec.ParamCount(), 7.0);
    EXPECT_EQ(LossAndGrad<double>(spec, p.params.data(), nullptr, nullptr, 0, gd.data(), wsd), 0.0);
    for (double g : gd) EXPECT_EQ(g, 0.0);
    Predict<double>(spec, p.params.data(), nullptr, 0, nullptr, wsd);
  }
}

TEST(MlpTest, WorkspaceReuseAcrossSizesAndSpecs) {
  // One workspace serving batches of varying size and two different nets must give exactly
  // what a fresh workspace gives.
  const ModelSpec a = Mlp({3, 8, 2}, Activation::kTanh, Loss::kXent);
  const ModelSpec b = Mlp({5, 2, 6, 1}, Activation::kSigmoid, Loss::kMse);
  const Problem pa = MakeProblem(a, 20, 1), pb = MakeProblem(b, 20, 2);
  Workspace<double> shared;
  for (int64_t n : {20, 3, 0, 11, 20, 1}) {
    for (const Problem* p : {&pa, &pb}) {
      std::vector<double> g_shared(p->spec.ParamCount()), g_fresh(p->spec.ParamCount());
      Workspace<double> fresh;
      const double l_shared = LossAndGrad(p->spec, p->params.data(), p->x.data(), p->y.data(), n,
                                          g_shared.data(), shared);
      const double l_fresh = LossAndGrad(p->spec, p->params.data(), p->x.data(), p->y.data(), n,
                                         g_fresh.data(), fresh);
      EXPECT_EQ(l_shared, l_fresh);
      EXPECT_EQ(g_shared, g_fresh);
    }
  }
}

TEST(MlpTest, MseWithoutHiddenLayerIsLinearRegression) {
  // yhat = w . x + b; grad_w = sum 2 r x, grad_b = sum 2 r.
  const ModelSpec spec = Mlp({2, 1}, Activation::kRelu, Loss::kMse);
  const std::vector<double> params = {0.5, -1.0, 2.0};
  const std::vector<double> x = {1, 2, -3, 0.5}, y = {0, 1};
  // yhat = {0.5 - 2 + 2, -1.5 - 0.5 + 2} = {0.5, 0}; r = {0.5, -1}.
  Workspace<double> ws;
  std::vector<double> grad(3);
  EXPECT_DOUBLE_EQ(LossAndGrad(spec, params.data(), x.data(), y.data(), 2, grad.data(), ws), 1.25);
  EXPECT_DOUBLE_EQ(grad[0], 2 * (0.5 * 1 + -1 * -3));
  EXPECT_DOUBLE_EQ(grad[1], 2 * (0.5 * 2 + -1 * 0.5));
  EXPECT_DOUBLE_EQ(grad[2], 2 * (0.5 - 1));
}

TEST(MlpTest, PredictXentRowsSumToOne) {
  const ModelSpec spec = Mlp({3, 6, 4}, Activation::kRelu, Loss::kXent);
  const Problem p = MakeProblem(spec, 9, 11, 2.0);
  const std::vector<float> params = Cast<float>(p.params), x = Cast<float>(p.x);
  Workspace<float> ws;
  std::vector<float> out(9 * 4);
  Predict(spec, params.data(), x.data(), 9, out.data(), ws);
  const Reference ref = RunReference(spec, params, x, Cast<float>(p.y), 9);
  for (int64_t i = 0; i < 9; ++i) {
    double sum = 0;
    for (int k = 0; k < 4; ++k) {
      const float prob = out[i * 4 + k];
      EXPECT_GE(prob, 0.0f);
      EXPECT_LE(prob, 1.0f);
      EXPECT_NEAR(prob, ref.outputs[i * 4 + k], 1e-5);
      sum += prob;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << i;
  }
}

TEST(MlpTest, PredictMseIsTheLinearOutput) {
  const ModelSpec spec = Mlp({2, 5, 1}, Activation::kSigmoid, Loss::kMse);
  const Problem p = MakeProblem(spec, 7, 12);
  Workspace<double> ws;
  std::vector<double> out(7);
  Predict(spec, p.params.data(), p.x.data(), 7, out.data(), ws);
  const Reference ref = RunReference(spec, p.params, p.x, p.y, 7);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(out[i], ref.outputs[i], 1e-12);
}

TEST(MlpTest, LargerModelGradientSpotCheck) {
  // A model of realistic shape (blocked GEMM paths) against finite differences on a few
  // coordinates of every layer.
  const ModelSpec spec = Mlp({40, 64, 48, 10}, Activation::kTanh, Loss::kXent);
  Problem p = MakeProblem(spec, 128, 21, 0.15);
  Workspace<double> ws;
  std::vector<double> grad(spec.ParamCount());
  LossAndGrad(spec, p.params.data(), p.x.data(), p.y.data(), p.n, grad.data(), ws);
  Rng pick(3);
  for (int t = 0; t < 40; ++t) {
    const size_t i = pick.Below(grad.size());
    const double saved = p.params[i];
    p.params[i] = saved + 1e-6;
    const double plus = LossSum(spec, p.params.data(), p.x.data(), p.y.data(), p.n, ws);
    p.params[i] = saved - 1e-6;
    const double minus = LossSum(spec, p.params.data(), p.x.data(), p.y.data(), p.n, ws);
    p.params[i] = saved;
    const double numeric = (plus - minus) / 2e-6;
    EXPECT_NEAR(grad[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "param " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// InitParams

TEST(InitTest, DeterministicPerSeed) {
  const ModelSpec spec = Mlp({10, 20, 3});
  for (Init init : {Init::kNormal, Init::kXavier, Init::kHe}) {
    std::vector<float> a(spec.ParamCount()), b(spec.ParamCount()), c(spec.ParamCount());
    InitParams(spec, init, 5, a.data());
    InitParams(spec, init, 5, b.data());
    InitParams(spec, init, 6, c.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << ToString(init);
    EXPECT_NE(a, c) << ToString(init);
  }
}

TEST(InitTest, DrawsInParameterOrder) {
  const ModelSpec spec = Mlp({3, 4, 2});
  std::vector<float> normal(spec.ParamCount()), xavier(spec.ParamCount()), he(spec.ParamCount());
  InitParams(spec, Init::kNormal, 99, normal.data());
  InitParams(spec, Init::kXavier, 99, xavier.data());
  InitParams(spec, Init::kHe, 99, he.data());

  Rng rng(99);
  for (float v : normal) EXPECT_EQ(v, static_cast<float>(rng.Normal()));

  // Xavier/He: the weights take consecutive draws, the biases take none.
  Rng rx(99), rh(99);
  size_t off = 0;
  for (size_t l = 0; l + 1 < Sizes(spec).size(); ++l) {
    const int in = Sizes(spec)[l], out = Sizes(spec)[l + 1];
    const double sx = std::sqrt(2.0 / (in + out)), sh = std::sqrt(2.0 / in);
    for (int i = 0; i < out * in; ++i, ++off) {
      EXPECT_EQ(xavier[off], static_cast<float>(sx * rx.Normal()));
      EXPECT_EQ(he[off], static_cast<float>(sh * rh.Normal()));
    }
    for (int i = 0; i < out; ++i, ++off) {
      EXPECT_EQ(xavier[off], 0.0f);
      EXPECT_EQ(he[off], 0.0f);
    }
  }
}

// Mean and variance of the weights of layer 0 of spec, and whether its biases are all zero.
struct LayerStats {
  double mean, variance;
  bool biases_zero;
};

LayerStats Layer0Stats(const ModelSpec& spec, const std::vector<float>& params) {
  const size_t nw = static_cast<size_t>(Sizes(spec)[0]) * Sizes(spec)[1];
  double sum = 0, sum2 = 0;
  for (size_t i = 0; i < nw; ++i) {
    sum += params[i];
    sum2 += static_cast<double>(params[i]) * params[i];
  }
  const double mean = sum / nw;
  bool zero = true;
  for (int i = 0; i < Sizes(spec)[1]; ++i) zero = zero && params[nw + i] == 0.0f;
  return {mean, sum2 / nw - mean * mean, zero};
}

TEST(InitTest, NormalIsStandardNormal) {
  const ModelSpec spec = Mlp({500, 400});
  std::vector<float> params(spec.ParamCount());
  InitParams(spec, Init::kNormal, 1, params.data());
  const LayerStats s = Layer0Stats(spec, params);
  EXPECT_NEAR(s.mean, 0.0, 0.01);
  EXPECT_NEAR(s.variance, 1.0, 0.02);
  EXPECT_FALSE(s.biases_zero);
}

TEST(InitTest, XavierAndHeVariances) {
  const ModelSpec spec = Mlp({300, 200, 7});
  std::vector<float> params(spec.ParamCount());
  InitParams(spec, Init::kXavier, 1, params.data());
  LayerStats s = Layer0Stats(spec, params);
  EXPECT_NEAR(s.mean, 0.0, 0.002);
  EXPECT_NEAR(s.variance, 2.0 / 500, 2.0 / 500 * 0.03);
  EXPECT_TRUE(s.biases_zero);

  InitParams(spec, Init::kHe, 1, params.data());
  s = Layer0Stats(spec, params);
  EXPECT_NEAR(s.mean, 0.0, 0.002);
  EXPECT_NEAR(s.variance, 2.0 / 300, 2.0 / 300 * 0.03);
  EXPECT_TRUE(s.biases_zero);
  // The last layer's biases too.
  for (int i = 0; i < 7; ++i) EXPECT_EQ(params[params.size() - 1 - i], 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Optimizers (nn/optimizer.h), one update at a time, against hand-computed values.

// An OptimConfig for `name` with the given hyper-parameter flags (others at their defaults).
OptimConfig Config(const std::string& name, std::map<std::string, double, std::less<>> hyper,
                   double lr, double wd = NAN) {
  TrainOptions o;
  o.optimizer = name;
  o.hyper = std::move(hyper);
  o.lr = lr;
  o.weight_decay = wd;
  OptimConfig c;
  EXPECT_TRUE(ResolveOptim(o, 100, &c).ok());
  return c;
}

// One update of an n-element slice; states in/out sized by the optimizer.
struct Step {
  std::vector<float> w, g;
  std::vector<std::vector<float>> s;  // K state vectors
  void Run(const OptimConfig& c, int64_t t) {
    const int64_t n = static_cast<int64_t>(w.size());
    std::vector<float> w_out(w.size());
    std::vector<std::vector<float>> s_out(s.size(), std::vector<float>(w.size()));
    UpdateArgs a;
    a.n = n;
    a.w_in = w.data();
    a.w_out = w_out.data();
    for (size_t k = 0; k < s.size(); ++k) {
      a.s_in[k] = s[k].data();
      a.s_out[k] = s_out[k].data();
    }
    a.g = g.data();
    a.lr = c.lr;
    a.weight_decay = c.weight_decay;
    a.t = t;
    Update(c, a);
    w = w_out;
    s = s_out;
  }
};

TEST(OptimizerTest, StatesPerOptimizer) {
  EXPECT_EQ(Config("sgd", {}, 0.1).num_states, 0u);
  EXPECT_EQ(Config("sgd", {{"--momentum", 0.9}}, 0.1).num_states, 1u);
  EXPECT_EQ(Config("adam", {}, 0.1).num_states, 2u);
  EXPECT_EQ(Config("adamw", {}, 0.1).num_states, 2u);
  EXPECT_EQ(Config("adamw", {}, 0.1).weight_decay, 0.01);  // PyTorch's AdamW default
  EXPECT_EQ(Config("adam", {}, 0.1).weight_decay, 0.0);
}

TEST(OptimizerTest, SgdWithWeightDecay) {
  // w - lr * (g + wd * w): 1 - 0.1 * (0.5 + 0.1) = 0.94; -2 - 0.1 * (-1 - 0.2) = -1.88.
  Step st{{1.0f, -2.0f}, {0.5f, -1.0f}, {}};
  st.Run(Config("sgd", {}, 0.1, 0.1), 0);
  EXPECT_FLOAT_EQ(st.w[0], 0.94f);
  EXPECT_FLOAT_EQ(st.w[1], -1.88f);
}

TEST(OptimizerTest, TwoMomentumSteps) {
  // mu = 0.9, lr = 0.1, w0 = {1, 2}, v0 = {0, 1}.
  // Step 1, g = {0.5, -1}:   v1 = {0.5, 0.9 - 1 = -0.1},  w1 = {0.95, 2.01}.
  // Step 2, g = {0.25, 0.5}: v2 = {0.7, 0.41},  w2 = {0.88, 1.969}.
  const OptimConfig c = Config("sgd", {{"--momentum", 0.9}}, 0.1);
  Step st{{1.0f, 2.0f}, {0.5f, -1.0f}, {{0.0f, 1.0f}}};
  st.Run(c, 0);
  EXPECT_FLOAT_EQ(st.s[0][0], 0.5f);
  EXPECT_FLOAT_EQ(st.s[0][1], -0.1f);
  EXPECT_FLOAT_EQ(st.w[0], 0.95f);
  EXPECT_FLOAT_EQ(st.w[1], 2.01f);
  st.g = {0.25f, 0.5f};
  st.Run(c, 1);
  EXPECT_FLOAT_EQ(st.s[0][0], 0.7f);
  EXPECT_FLOAT_EQ(st.s[0][1], 0.41f);
  EXPECT_FLOAT_EQ(st.w[0], 0.88f);
  EXPECT_FLOAT_EQ(st.w[1], 1.969f);
}

TEST(OptimizerTest, NesterovStepsAlongGradientPlusMomentum) {
  // mu = 0.9, lr = 0.1, v0 = 1, g = 0.5: v1 = 1.4; w1 = 1 - 0.1 * (0.5 + 0.9 * 1.4) = 0.824.
  Step st{{1.0f}, {0.5f}, {{1.0f}}};
  st.Run(Config("sgd", {{"--momentum", 0.9}, {"--nesterov", 1}}, 0.1), 0);
  EXPECT_FLOAT_EQ(st.s[0][0], 1.4f);
  EXPECT_FLOAT_EQ(st.w[0], 0.824f);
}

TEST(OptimizerTest, AdamFirstStepMovesByLrTimesSign) {
  // At t = 0 the bias-corrected moments are g and g^2: the step is lr * g / (|g| + eps).
  Step st{{1.0f, 1.0f}, {0.5f, -4.0f}, {{0, 0}, {0, 0}}};
  st.Run(Config("adam", {}, 0.01), 0);
  EXPECT_FLOAT_EQ(st.w[0], static_cast<float>(1 - 0.01 * 0.5 / (0.5 + 1e-8)));
  EXPECT_FLOAT_EQ(st.w[1], static_cast<float>(1 + 0.01 * 4 / (4 + 1e-8)));
  EXPECT_FLOAT_EQ(st.s[0][0], 0.05f);              // (1 - 0.9) * 0.5
  EXPECT_FLOAT_EQ(st.s[1][1], 0.001f * 16);        // (1 - 0.999) * 16
}

TEST(OptimizerTest, AdamSecondStepIsBiasCorrected) {
  // b1 0.5, b2 0.75, eps 0.1, lr 1. Step 0, g = 1: m = 0.5, v = 0.25. Step 1, g = 2: m = 0.5*0.5
  // + 0.5*2 = 1.25, v = 0.75*0.25 + 0.25*4 = 1.1875; mhat = 1.25/(1-0.25) = 5/3, vhat =
  // 1.1875/(1-0.5625) = 2.7142857; step = (5/3) / (sqrt(2.7142857) + 0.1) = 0.9540.
  const OptimConfig c = Config("adam", {{"--beta1", 0.5}, {"--beta2", 0.75}, {"--eps", 0.1}}, 1.0);
  Step st{{0.0f}, {1.0f}, {{0.0f}, {0.0f}}};
  st.Run(c, 0);
  const float w1 = st.w[0];
  st.g = {2.0f};
  st.Run(c, 1);
  const double vhat = 1.1875 / (1 - 0.5625);
  EXPECT_NEAR(st.w[0], w1 - (1.25 / 0.75) / (std::sqrt(vhat) + 0.1), 1e-6);
  EXPECT_FLOAT_EQ(st.s[0][0], 1.25f);
  EXPECT_FLOAT_EQ(st.s[1][0], 1.1875f);
}

TEST(OptimizerTest, AdamWDecaysWeightsApartFromTheGradient) {
  // g = 0: adam with weight decay moves w along wd*w normalised (a full lr step); adamw only
  // shrinks w by lr*wd and leaves the moments at zero.
  Step a{{2.0f}, {0.0f}, {{0.0f}, {0.0f}}};
  a.Run(Config("adamw", {}, 0.1, 0.5), 0);
  EXPECT_FLOAT_EQ(a.w[0], 2.0f * (1 - 0.1f * 0.5f));
  EXPECT_EQ(a.s[0][0], 0.0f);
  Step b{{2.0f}, {0.0f}, {{0.0f}, {0.0f}}};
  b.Run(Config("adam", {}, 0.1, 0.5), 0);
  EXPECT_NEAR(b.w[0], 2.0 - 0.1, 1e-6);  // m = 0.1 * 1, v = 0.001 * 1: a step of lr
  EXPECT_FLOAT_EQ(b.s[0][0], 0.1f);
}

// A worker whose slice is empty (more workers than parameters) updates n = 0 elements: no
// memory is touched, so null pointers are fine.
TEST(OptimizerTest, EmptySliceIsANoOp) {
  for (const std::string name : {"sgd", "adam", "adamw"}) {
    UpdateArgs a;
    a.lr = 0.1;
    Update(Config(name, {}, 0.1), a);
  }
  UpdateArgs a;
  Update(Config("sgd", {{"--momentum", 0.9}, {"--nesterov", 1}}, 0.1), a);
}

TEST(OptimizerTest, ResolvedConfigsDifferInEveryHyperParameter) {
  // The fingerprint hashes OptimConfig's bytes: each setting must change them.
  auto bytes = [](const OptimConfig& c) {
    return std::string(reinterpret_cast<const char*>(&c), sizeof c);
  };
  const std::string base = bytes(Config("adam", {}, 0.1));
  EXPECT_EQ(base, bytes(Config("adam", {}, 0.1)));
  EXPECT_NE(base, bytes(Config("adam", {{"--beta1", 0.8}}, 0.1)));
  EXPECT_NE(base, bytes(Config("adam", {{"--beta2", 0.99}}, 0.1)));
  EXPECT_NE(base, bytes(Config("adam", {{"--eps", 1e-7}}, 0.1)));
  EXPECT_NE(base, bytes(Config("adam", {}, 0.1, 0.1)));
  EXPECT_NE(base, bytes(Config("adamw", {}, 0.1, 0.0)));
}

// Checkpoint refusals name the settings by Describe: different settings, different words.
TEST(OptimizerTest, DescribeIsShortAndTellsSettingsApart) {
  const std::string a = Describe(Config("adam", {}, 0.01));
  EXPECT_EQ(a, "adam (beta1 0.9, beta2 0.999, eps 1e-08, weight decay 0), lr 0.01");
  EXPECT_NE(a, Describe(Config("adam", {}, 0.01000001)));
  EXPECT_EQ(Describe(Config("sgd", {{"--momentum", 0.9}, {"--nesterov", 1}}, 0.1)),
            "sgd (momentum 0.9, nesterov, weight decay 0), lr 0.1");
  TrainOptions o;
  o.lr = 0.1;
  o.lr_schedule = "cosine";
  o.lr_min = 0.001;
  o.warmup_steps = 10;
  o.clip_norm = 1;
  OptimConfig c300, c400;
  ASSERT_TRUE(ResolveOptim(o, 300, &c300).ok());
  ASSERT_TRUE(ResolveOptim(o, 400, &c400).ok());
  EXPECT_EQ(Describe(c300), "sgd (momentum 0, weight decay 0), lr 0.1, cosine schedule to 0.001 "
                            "over 300 steps, warmup 10 steps, clip-norm 1");
  EXPECT_NE(Describe(c300), Describe(c400));
}

// ---------------------------------------------------------------------------------------------
// Learning-rate schedules (nn/schedule.h)

OptimConfig Sched(const char* name, int64_t warmup, int64_t every, double gamma, double lr_min) {
  OptimConfig c{};
  c.lr = 1.0;
  c.schedule = FindSchedule(name)->id;
  c.warmup_steps = warmup;
  c.step_every = every;
  c.gamma = gamma;
  c.lr_min = lr_min;
  c.total_steps = 110;
  return c;
}

TEST(ScheduleTest, PyTorchDefinitions) {
  const OptimConfig step = Sched("step", 0, 30, 0.1, 0);
  EXPECT_DOUBLE_EQ(LearningRate(step, 0), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(step, 29), 1.0);
  EXPECT_NEAR(LearningRate(step, 30), 0.1, 1e-15);
  EXPECT_NEAR(LearningRate(step, 65), 0.01, 1e-15);
  const OptimConfig ex = Sched("exponential", 0, 0, 0.5, 0);
  EXPECT_DOUBLE_EQ(LearningRate(ex, 3), 0.125);
  const OptimConfig cos = Sched("cosine", 10, 0, 0, 0.2);
  // Warmup: (t + 1) / W of the rate.
  EXPECT_DOUBLE_EQ(LearningRate(cos, 0), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(cos, 9), 1.0);
  // Then cosine over the remaining 100 steps from 1 down towards 0.2.
  EXPECT_DOUBLE_EQ(LearningRate(cos, 10), 1.0);
  EXPECT_NEAR(LearningRate(cos, 60), 0.6, 1e-15);
  EXPECT_NEAR(LearningRate(cos, 109), 0.2 + 0.8 * (1 + std::cos(M_PI * 99 / 100)) / 2, 1e-15);
  const OptimConfig flat = Sched("constant", 4, 0, 0, 0);
  EXPECT_DOUBLE_EQ(LearningRate(flat, 1), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(flat, 50), 1.0);
}

// The rate a run shows after `done` updates: the update in progress, the last once all are done.
TEST(ScheduleTest, RateAfterDoneUpdatesStopsAtTheLastUpdate) {
  const OptimConfig cos = Sched("cosine", 10, 0, 0, 0.2);  // 110 updates
  EXPECT_DOUBLE_EQ(LearningRateAfter(cos, 0), LearningRate(cos, 0));
  EXPECT_DOUBLE_EQ(LearningRateAfter(cos, 60), LearningRate(cos, 60));
  EXPECT_DOUBLE_EQ(LearningRateAfter(cos, 110), LearningRate(cos, 109));
  EXPECT_DOUBLE_EQ(LearningRateAfter(cos, 1000), LearningRate(cos, 109));
}

// multistep against MultiStepLR's closed form written here, lr * G^bisect_right(milestones, s):
// the number of milestones at or below s, counted by std::upper_bound.
double RefMultiStep(double lr, double gamma, const std::vector<int64_t>& milestones, int64_t s) {
  const auto passed =
      std::upper_bound(milestones.begin(), milestones.end(), s) - milestones.begin();
  return lr * std::pow(gamma, static_cast<double>(passed));
}

OptimConfig MultiStep(double lr, double gamma, const std::vector<int64_t>& milestones,
                      int64_t warmup = 0) {
  OptimConfig c = Sched("multistep", warmup, 0, gamma, 0);
  c.lr = lr;
  for (size_t i = 0; i < milestones.size(); ++i) c.milestones[i] = milestones[i];
  return c;
}

// PyTorch's documented example (MultiStepLR(optimizer, milestones=[30, 80], gamma=0.1) with lr
// 0.05): 0.05 for s < 30, 0.005 for 30 <= s < 80, 0.0005 from 80 on; before, at and after each
// milestone, and at every s against the reference.
TEST(ScheduleTest, MultiStepIsPyTorchsExample) {
  const OptimConfig c = MultiStep(0.05, 0.1, {30, 80});
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(c, 29), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(c, 30), 0.005);
  EXPECT_DOUBLE_EQ(LearningRate(c, 31), 0.005);
  EXPECT_DOUBLE_EQ(LearningRate(c, 79), 0.005);
  EXPECT_DOUBLE_EQ(LearningRate(c, 80), 0.0005);
  EXPECT_DOUBLE_EQ(LearningRate(c, 81), 0.0005);
  EXPECT_DOUBLE_EQ(LearningRate(c, 1000000), 0.0005);
  for (int64_t s = 0; s < 200; ++s) {
    EXPECT_EQ(LearningRate(c, s), RefMultiStep(0.05, 0.1, {30, 80}, s)) << "s " << s;
  }
}

// As many milestones as a schedule may have, adjacent ones among them, another gamma, the rate
// before, at and after each; the defaults as PyTorch's (gamma 0.1) through the options.
TEST(ScheduleTest, MultiStepAtEveryMilestone) {
  const std::vector<int64_t> m = {1, 5, 6, 100};
  ASSERT_EQ(m.size(), static_cast<size_t>(kMaxMilestones));
  const OptimConfig c = MultiStep(0.8, 0.5, m);
  // s: the rate (worked out by hand) before, at and after each milestone.
  const std::vector<std::pair<int64_t, double>> want = {
      {0, 0.8},   {1, 0.4},   {2, 0.4},    {4, 0.4},     {5, 0.2},
      {6, 0.1},   {7, 0.1},   {99, 0.1},   {100, 0.05},  {101, 0.05}};
  for (const auto& [step, rate] : want) EXPECT_DOUBLE_EQ(LearningRate(c, step), rate) << step;
  for (int64_t s = 0; s < 120; ++s) {
    EXPECT_EQ(LearningRate(c, s), RefMultiStep(0.8, 0.5, m, s)) << "s " << s;
  }
  TrainOptions o;
  o.lr = 0.1;
  o.lr_schedule = "multistep";
  o.lr_milestones = {3, 7};
  OptimConfig r;
  ASSERT_TRUE(ResolveOptim(o, 20, &r).ok());
  EXPECT_EQ(r.gamma, 0.1);
  EXPECT_EQ(std::vector<int64_t>(r.milestones, r.milestones + kMaxMilestones),
            (std::vector<int64_t>{3, 7, 0, 0}));
  EXPECT_DOUBLE_EQ(LearningRate(r, 6), 0.01);
  EXPECT_DOUBLE_EQ(LearningRate(r, 7), 0.001);
  EXPECT_EQ(Describe(r), "sgd (momentum 0, weight decay 0), lr 0.1, multistep schedule (x0.1 at "
                         "3, 7)");
}

// After a warmup of W updates the milestones count from its end (s = t - W), as step's N does.
TEST(ScheduleTest, MultiStepAfterAWarmup) {
  const OptimConfig c = MultiStep(0.05, 0.1, {30, 80}, 10);
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 0.005);  // (t + 1) / W of the rate
  EXPECT_DOUBLE_EQ(LearningRate(c, 9), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(c, 39), 0.05);
  EXPECT_DOUBLE_EQ(LearningRate(c, 40), 0.005);
  EXPECT_DOUBLE_EQ(LearningRate(c, 89), 0.005);
  EXPECT_DOUBLE_EQ(LearningRate(c, 90), 0.0005);
  for (int64_t t = 10; t < 200; ++t) {
    EXPECT_EQ(LearningRate(c, t), RefMultiStep(0.05, 0.1, {30, 80}, t - 10)) << "t " << t;
  }
  // A milestone within the warmup's steps still counts from its end.
  const OptimConfig early = MultiStep(1.0, 0.5, {2}, 5);
  EXPECT_DOUBLE_EQ(LearningRate(early, 2), 0.6);
  EXPECT_DOUBLE_EQ(LearningRate(early, 6), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(early, 7), 0.5);
}

// The milestones' bytes are zero for every other schedule (the fingerprint of such a run hashes
// OptimConfig as before them), whatever the options hold; and the check refuses each bad list
// by the flag's name, quoting the list.
TEST(ScheduleTest, MultiStepMilestonesAreZeroElsewhereAndChecked) {
  for (const ScheduleDef* d : Schedules()) {
    SCOPED_TRACE(d->name);
    TrainOptions o;
    o.lr = 0.1;
    o.lr_schedule = d->name;
    o.lr_step_every = 5;
    o.lr_gamma = 0.5;
    o.lr_milestones = {3, 7};
    OptimConfig c;
    ASSERT_TRUE(ResolveOptim(o, 20, &c).ok());
    const int64_t want = d->name == std::string_view("multistep") ? 3 : 0;
    EXPECT_EQ(c.milestones[0], want);
    for (int i = 1 + (want != 0); i < kMaxMilestones; ++i) EXPECT_EQ(c.milestones[i], 0);
  }
  const std::vector<std::pair<std::vector<int64_t>, std::string>> refused = {
      {{}, "--lr-milestones: needs at least one step"},
      {{3, 3}, "--lr-milestones: must be strictly increasing, got 3 after 3 (in '3,3')"},
      {{7, 3}, "--lr-milestones: must be strictly increasing, got 3 after 7 (in '7,3')"},
      {{0}, "--lr-milestones: each must be >= 1, got 0 (in '0')"},
      {{5, -1}, "--lr-milestones: each must be >= 1, got -1 (in '5,-1')"},
      {{1, 2, 3, 4, 5}, "--lr-milestones: at most 4 milestones, got 5 (in '1,2,3,4,5')"},
  };
  for (const auto& [m, want] : refused) {
    TrainOptions o;
    o.lr = 0.1;
    o.lr_schedule = "multistep";
    o.given["--lr-schedule"] = "multistep";
    o.lr_milestones = m;
    std::string typed;
    for (int64_t x : m) typed += (typed.empty() ? "" : ",") + std::to_string(x);
    o.given["--lr-milestones"] = typed;
    const Status s = CheckOptimizerOptions(o);
    EXPECT_EQ(s.code(), Status::Code::kUsage) << want;
    EXPECT_EQ(s.message(), want);
  }
}

// ---------------------------------------------------------------------------------------------
// Every registered schedule (nn/schedule.h): one added later is checked here without a test of
// its own.

// A value within the limits of each flag that schedules take.
double ValidValue(const ScheduleFlag& f) {
  static const std::map<std::string, double, std::less<>> values = {
      {"--lr-step-every", 7}, {"--lr-gamma", 0.5}, {"--lr-min", 0.01}, {"--lr-milestones", 7}};
  const auto it = values.find(f.flag);
  if (it == values.end()) {
    ADD_FAILURE() << f.flag << ": a new schedule flag; give it a valid value here";
    return 1;
  }
  return it->second;
}

const ScheduleFlag& FlagNamed(std::string_view flag) {
  for (const ScheduleFlag& f : ScheduleFlags()) {
    if (flag == f.flag) return f;
  }
  ADD_FAILURE() << flag << " is not one of ScheduleFlags()";
  return ScheduleFlags().front();
}

// `flag` given on the command line with a valid value (a list flag: that value and twice it).
void Give(TrainOptions* o, std::string_view flag) {
  const ScheduleFlag& f = FlagNamed(flag);
  const double v = ValidValue(f);
  if (f.given_int != nullptr) {
    o->*f.given_int = static_cast<int64_t>(v);
  } else if (f.given_list != nullptr) {
    o->*f.given_list = {static_cast<int64_t>(v), 2 * static_cast<int64_t>(v)};
  } else {
    o->*f.given_real = v;
  }
  o->given[f.flag] = std::to_string(v);
}

// Options for schedule d, lr 0.1, with every flag d requires given except `missing`.
TrainOptions ScheduleOptions(const ScheduleDef& d, int64_t warmup = 0,
                             std::string_view missing = "") {
  TrainOptions o;
  o.lr = 0.1;
  o.given["--lr"] = "0.1";
  o.lr_schedule = d.name;
  o.given["--lr-schedule"] = d.name;
  o.warmup_steps = warmup;
  for (const ScheduleTakes& t : d.takes) {
    if (t.required && t.flag != missing) Give(&o, t.flag);
  }
  return o;
}

OptimConfig Resolved(const TrainOptions& o, int64_t total_steps) {
  OptimConfig c;
  EXPECT_TRUE(ResolveOptim(o, total_steps, &c).ok()) << o.lr_schedule;
  return c;
}

TEST(ScheduleRegistryTest, NamesAndIdsRoundTrip) {
  std::set<uint32_t> ids;
  std::set<std::string> names;
  for (const ScheduleDef* d : Schedules()) {
    SCOPED_TRACE(d->name);
    EXPECT_EQ(FindSchedule(d->name), d);
    EXPECT_EQ(FindSchedule(d->id), d);
    EXPECT_TRUE(ids.insert(d->id).second) << "id " << d->id << " taken twice";
    EXPECT_TRUE(names.insert(d->name).second);
    EXPECT_NE(ScheduleNames("|").find(d->name), std::string::npos);
    OptimConfig c = Resolved(ScheduleOptions(*d), 50);
    EXPECT_EQ(c.schedule, d->id);
    EXPECT_EQ(SpansRun(c), d->spans_run);
    for (const ScheduleTakes& t : d->takes) FlagNamed(t.flag);
  }
  EXPECT_EQ(FindSchedule("linear"), nullptr);
  EXPECT_EQ(TrainOptions().lr_schedule, "constant");
}

// Ids are stored in segments, checkpoints and fingerprints: these may never change.
TEST(ScheduleRegistryTest, StoredIdsNeverChange) {
  const std::map<std::string, uint32_t> stored = {
      {"constant", 0}, {"step", 1}, {"cosine", 2}, {"exponential", 3}, {"multistep", 4}};
  for (const auto& [name, id] : stored) {
    ASSERT_NE(FindSchedule(name), nullptr) << name;
    EXPECT_EQ(FindSchedule(name)->id, id) << name;
  }
}

// Every flag is taken by a schedule; given to one that does not take it, it is refused by name.
TEST(ScheduleRegistryTest, AFlagOfAnotherScheduleIsRefusedByName) {
  for (const ScheduleFlag& f : ScheduleFlags()) {
    int takers = 0;
    for (const ScheduleDef* d : Schedules()) {
      SCOPED_TRACE(std::string(d->name) + " " + f.flag);
      bool takes = false;
      for (const ScheduleTakes& t : d->takes) takes = takes || t.flag == std::string_view(f.flag);
      takers += takes;
      TrainOptions o = ScheduleOptions(*d);
      if (!o.Given(f.flag)) Give(&o, f.flag);
      const Status s = CheckOptimizerOptions(o);
      if (takes) {
        EXPECT_TRUE(s.ok()) << s.message();
      } else {
        EXPECT_FALSE(s.ok());
        EXPECT_EQ(s.message().rfind(std::string(f.flag) + ": applies to --lr-schedule ", 0), 0u)
            << s.message();
      }
    }
    EXPECT_GE(takers, 1) << f.flag << " is taken by no schedule";
  }
}

// Each flag's own check is a Status: Ok within its limits, else kUsage that names the flag
// (-1 is outside every flag's limits).
TEST(ScheduleRegistryTest, EachFlagCheckIsAStatusNamingItsFlag) {
  for (const ScheduleFlag& f : ScheduleFlags()) {
    SCOPED_TRACE(f.flag);
    ASSERT_NE(f.check, nullptr);
    TrainOptions o;
    o.lr = 0.1;
    Give(&o, f.flag);
    const Status ok = f.check(o);
    EXPECT_TRUE(ok.ok()) << ok.message();
    if (f.given_int != nullptr) {
      o.*f.given_int = -1;
    } else if (f.given_list != nullptr) {
      o.*f.given_list = {-1};
    } else {
      o.*f.given_real = -1;
    }
    const Status bad = f.check(o);
    EXPECT_EQ(bad.code(), Status::Code::kUsage);
    EXPECT_EQ(bad.message().rfind(std::string(f.flag) + ": ", 0), 0u) << bad.message();
  }
}

// Without a flag it requires, a schedule is refused with a message that names the flag.
TEST(ScheduleRegistryTest, RefusesAMissingRequiredFlagByName) {
  for (const ScheduleDef* d : Schedules()) {
    SCOPED_TRACE(d->name);
    const Status all = CheckOptimizerOptions(ScheduleOptions(*d));
    EXPECT_TRUE(all.ok()) << all.message();
    for (const ScheduleTakes& t : d->takes) {
      if (!t.required) continue;
      const Status s = CheckOptimizerOptions(ScheduleOptions(*d, 0, t.flag));
      EXPECT_FALSE(s.ok()) << t.flag;
      EXPECT_NE(s.message().find(std::string("--lr-schedule ") + d->name + ": needs " + t.flag),
                std::string::npos)
          << s.message();
    }
  }
}

// After a warmup of W updates (or none) the rate of update W is the base rate, and every rate
// of the run is a finite number in [0, lr].
TEST(ScheduleRegistryTest, RateAfterTheWarmupIsTheBaseRate) {
  for (const ScheduleDef* d : Schedules()) {
    for (const int64_t warmup : {0, 5}) {
      SCOPED_TRACE(std::string(d->name) + ", warmup " + std::to_string(warmup));
      const OptimConfig c = Resolved(ScheduleOptions(*d, warmup), 50);
      EXPECT_DOUBLE_EQ(LearningRate(c, warmup), 0.1);
      if (warmup > 0) {
        EXPECT_DOUBLE_EQ(LearningRate(c, 0), 0.1 / static_cast<double>(warmup));
      }
      for (int64_t t = 0; t < 50; ++t) {
        const double lr = LearningRate(c, t);
        EXPECT_TRUE(std::isfinite(lr) && lr >= 0 && lr <= 0.1) << "t " << t << ": " << lr;
      }
    }
  }
}

// A schedule that says it does not span the run gives the same rates for another --steps (its
// checkpoints resume with another length); one that spans it does not.
TEST(ScheduleRegistryTest, OnlyASpanningScheduleDependsOnTheRunsLength) {
  for (const ScheduleDef* d : Schedules()) {
    SCOPED_TRACE(d->name);
    const OptimConfig c40 = Resolved(ScheduleOptions(*d, 3), 40);
    const OptimConfig c80 = Resolved(ScheduleOptions(*d, 3), 80);
    bool differ = false;
    for (int64_t t = 0; t < 40; ++t) {
      differ = differ || LearningRate(c40, t) != LearningRate(c80, t);
    }
    EXPECT_EQ(differ, d->spans_run);
  }
}

// Checkpoint refusals name the settings by Describe: every two schedules describe apart.
TEST(ScheduleRegistryTest, DescribeTellsEveryScheduleApart) {
  std::map<std::string, std::string> seen;
  for (const ScheduleDef* d : Schedules()) {
    const std::string text = Describe(Resolved(ScheduleOptions(*d), 50));
    const auto [it, fresh] = seen.emplace(text, d->name);
    EXPECT_TRUE(fresh) << d->name << " describes as " << it->second << ": " << text;
  }
}

}  // namespace
}  // namespace shmtrain::nn
