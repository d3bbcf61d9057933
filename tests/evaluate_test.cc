// nn::Evaluate (nn/metrics.cc), which eval, validation, simulate and a run's final loss use:
// over several chunks, its mean loss is LossSum's chunk by chunk to the bit (not training: no
// dropout, batch norm's running statistics), its accuracy is Predict's argmax, and the rows
// whose loss is not finite are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nn/layer.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {
namespace {

constexpr int64_t kRows = 9000;  // three chunks of at most 4096 (EvalChunk)

ModelSpec Spec(Loss loss, const char* text) {
  ModelSpec spec;
  spec.input = {1, 4, 4};
  spec.loss = loss;
  const Status s = ParseModelText(text, &spec.layers);
  EXPECT_TRUE(s.ok()) << s.message();
  return spec;
}

std::vector<float> Uniform(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(g);
  return v;
}

// What Evaluate must give, from LossSum and Predict run over the same chunks.
struct Reference {
  double loss = 0;
  int64_t correct = 0;
};

Reference ChunkByChunk(const ModelSpec& spec, const std::vector<float>& p,
                       const std::vector<float>& x, const std::vector<float>& y) {
  Workspace<float> ws;
  Reference r;
  const int64_t chunk = EvalChunk(spec), in = spec.inputs(), out = spec.outputs();
  std::vector<float> prob;
  for (int64_t r0 = 0; r0 < kRows; r0 += chunk) {
    const int64_t k = std::min(chunk, kRows - r0);
    r.loss += LossSum<float>(spec, p.data(), x.data() + r0 * in, y.data() + r0, k, ws);
    prob.resize(static_cast<size_t>(k * out));
    Predict<float>(spec, p.data(), x.data() + r0 * in, k, prob.data(), ws);
    for (int64_t i = 0; i < k; ++i) {
      const float* q = prob.data() + i * out;
      r.correct += std::max_element(q, q + out) - q == static_cast<int64_t>(y[r0 + i]);
    }
  }
  return r;
}

TEST(Evaluate, IsLossSumAndPredictChunkByChunkWithoutDropoutAndWithRunningStatistics) {
  const ModelSpec spec =
      Spec(Loss::kXent, "conv2d(4,3,padding=1),batchnorm2d,relu,dropout(p=0.5),flatten,linear(3)");
  ASSERT_LT(EvalChunk(spec), kRows / 2);
  // Positive parameters keep batch norm's running variances positive.
  const std::vector<float> p = Uniform(spec.ParamCount(), 0.05f, 1.0f, 1);
  const std::vector<float> x = Uniform(static_cast<size_t>(kRows * spec.inputs()), -1, 1, 2);
  std::vector<float> y(kRows);
  std::mt19937 g(3);
  for (float& label : y) label = static_cast<float>(g() % 3);

  const Reference want = ChunkByChunk(spec, p, x, y);
  const Metrics m = Evaluate(spec, p.data(), x.data(), y.data(), kRows);
  EXPECT_EQ(m.rows, kRows);
  EXPECT_EQ(m.loss, want.loss / kRows);
  EXPECT_EQ(m.accuracy, static_cast<double>(want.correct) / kRows);
  EXPECT_GT(want.correct, kRows / 4);  // the labels are not all one class's
  EXPECT_LT(want.correct, kRows);
  EXPECT_TRUE(m.finite());
}

TEST(Evaluate, MseGivesTheMeanLossAndItsRmse) {
  const ModelSpec spec = Spec(Loss::kMse, "flatten,linear(5),tanh,linear(1)");
  const std::vector<float> p = Uniform(spec.ParamCount(), -1, 1, 4);
  const std::vector<float> x = Uniform(static_cast<size_t>(kRows * spec.inputs()), -1, 1, 5);
  const std::vector<float> y = Uniform(kRows, -2, 2, 6);
  const Metrics m = Evaluate(spec, p.data(), x.data(), y.data(), kRows);
  EXPECT_EQ(m.loss, ChunkByChunk(spec, p, x, y).loss / kRows);
  EXPECT_EQ(m.rmse, std::sqrt(m.loss));
  EXPECT_EQ(m.accuracy, 0);
}

TEST(Evaluate, NamesTheRowsWhoseLossIsNotFiniteInEveryChunk) {
  const ModelSpec spec =
      Spec(Loss::kXent, "conv2d(2,3,padding=1),batchnorm2d,relu,flatten,linear(3)");
  const std::vector<float> p = Uniform(spec.ParamCount(), 0.05f, 1.0f, 7);
  std::vector<float> x = Uniform(static_cast<size_t>(kRows * spec.inputs()), -1, 1, 8);
  const std::vector<float> y(kRows, 1.0f);
  for (int64_t row : {5, 4097, 8999}) {
    x[static_cast<size_t>(row * spec.inputs() + 3)] = std::numeric_limits<float>::quiet_NaN();
  }
  x[static_cast<size_t>(6000 * spec.inputs())] = std::numeric_limits<float>::infinity();
  const Metrics m = Evaluate(spec, p.data(), x.data(), y.data(), kRows);
  EXPECT_FALSE(m.finite());
  EXPECT_EQ(m.nonfinite.count, 4);
  EXPECT_EQ(m.nonfinite.Text(), "4 rows, the first 5, 4097 and 6000 (0-based)");
}

}  // namespace
}  // namespace shmtrain::nn
