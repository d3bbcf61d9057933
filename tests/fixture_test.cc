// Files written by the release before layered models (tests/fixtures/v0.1/README.md): this
// build loads the model file and the checkpoint, predicts what that release predicted,
// resumes the checkpoint, and trains the MLP to that release's model, each kernel path to
// float rounding. That release computed its products with Eigen's, whose order of summation
// depends on the batch's size; both paths of nn/gemm.h now run kernels of our own that sum in
// an order fixed by the shapes (nn/kernels/), so no path has that release's bits any more.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/files/model_file.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using test::ProcResult;

constexpr const char* kBin = SHMTRAIN_BIN;
const std::string kDir = std::string(SHMTRAIN_SOURCE_DIR) + "/tests/fixtures/v0.1/";
constexpr test::milliseconds kTimeout{60'000};
// How far a model trained for 60 steps (or resumed for 30) may be from mlp-60.model's
// parameters when its products sum in another order than that release's: each product differs
// by float rounding, and 60 steps of lr 0.1 carry that into the parameters (magnitudes below
// 0.65). Measured on both of our kernels (g++ 12, -O3): at most 6e-8 (an ulp or two at 0.65);
// 1e-5 leaves a factor of 150 for other compilers' roundings of the rest of the step (exp,
// the loss, the optimizer), and is still far below what a wrong product would move.
constexpr float kRounding = 1e-5f;

// The kernels of the runs: the AVX2 path of nn/gemm.h, which every CPU this build runs on
// has; "" leaves the path to the CPU (AVX-512 where it is there).
ProcResult Shm(std::vector<std::string> args, const char* cpu = "avx2") {
  args.insert(args.begin(), kBin);
  const char* old = std::getenv("SHMTRAIN_CPU");
  const std::string saved = old == nullptr ? "" : old;
  setenv("SHMTRAIN_CPU", cpu, 1);
  const ProcResult r = test::RunProcess(args, kTimeout);
  if (old == nullptr) {
    unsetenv("SHMTRAIN_CPU");
  } else {
    setenv("SHMTRAIN_CPU", saved.c_str(), 1);
  }
  EXPECT_EQ(test::SegmentsOf(r.pid), std::vector<std::string>()) << "segments left by " << r.pid;
  return r;
}

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> v;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == ',') {
      v.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  }
  return v;
}

Model Decode(const std::string& path) {
  Model m;
  const Status s = DecodeModel(test::ReadWholeFile(path), path, &m);
  EXPECT_TRUE(s.ok()) << s.message();
  return m;
}

// The flags of the run that wrote the fixtures.
std::vector<std::string> Train(std::vector<std::string> extra) {
  std::vector<std::string> a = {"train",     "--workers",    "2",         "--data",
                                kDir + "blobs.csv", "--layers", "6,12,3", "--activation",
                                "relu",      "--loss",       "xent",      "--normalize",
                                "standard",  "--lr",         "0.1",       "--batch",
                                "16",        "--seed",       "3",         "--log-every",
                                "0",         "--no-metrics"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(OldFiles, TheModelLoadsAsTheMlpItWas) {
  const Model m = Decode(kDir + "mlp-60.model");
  EXPECT_EQ(m.spec.Text(), "linear(12),relu,linear(3)");
  EXPECT_EQ(m.spec.input, (Shape{6, 1, 1}));
  EXPECT_EQ(m.spec.loss, Loss::kXent);
  EXPECT_EQ(m.params.size(), 6u * 12 + 12 + 12 * 3 + 3);
  EXPECT_EQ(m.classes.names, (std::vector<std::string>{"cat", "dog", "owl"}));
  EXPECT_EQ(m.norm.kind, Normalize::kStandard);
}

TEST(OldFiles, TheModelPredictsWhatItPredicted) {
  test::TempDir dir;
  const ProcResult r = Shm({"predict", "--model", kDir + "mlp-60.model", "--data",
                            kDir + "blobs.csv", "--out", dir.File("p.csv")});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  // Described as that release described it.
  EXPECT_NE(r.err.find("6-12-3 relu, xent, normalize standard, 3 classes"), std::string::npos)
      << r.err;
  const std::vector<std::string> got = test::SplitLines(test::ReadWholeFile(dir.File("p.csv")));
  const std::vector<std::string> want =
      test::SplitLines(test::ReadWholeFile(kDir + "predictions.csv"));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(got[0], want[0]);
  for (size_t i = 1; i < want.size(); ++i) {
    const std::vector<std::string> g = Cells(got[i]), w = Cells(want[i]);
    ASSERT_EQ(g.size(), w.size()) << got[i];
    EXPECT_EQ(g[0], w[0]) << "row " << i;
    for (size_t j = 1; j < w.size(); ++j) {
      EXPECT_NEAR(std::strtod(g[j].c_str(), nullptr), std::strtod(w[j].c_str(), nullptr), 2e-6)
          << "row " << i << ": " << got[i] << " against " << want[i];
    }
  }
}

TEST(OldFiles, TheCheckpointResumesToTheSameModel) {
  test::TempDir dir;
  const ProcResult r = Shm(Train({"--steps", "60", "--resume", kDir + "mlp-30.ckpt", "--save",
                                  dir.File("resumed.model")}));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const Model got = Decode(dir.File("resumed.model")), want = Decode(kDir + "mlp-60.model");
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    ASSERT_NEAR(got.params[i], want.params[i], kRounding) << "parameter " << i;
  }
}

// The MLP of --layers runs through the layers of nn/layers/ now, and its products through our
// AVX2 kernel: it must train to the model it trained to before them, to float rounding.
TEST(OldFiles, TheAvx2PathTrainsTheSameModelToRounding) {
  test::TempDir dir;
  const ProcResult r = Shm(Train({"--steps", "60", "--save", dir.File("again.model")}));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const Model got = Decode(dir.File("again.model")), want = Decode(kDir + "mlp-60.model");
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    ASSERT_NEAR(got.params[i], want.params[i], kRounding) << "parameter " << i;
  }
}

// The path the CPU chooses (AVX-512 where it is there) trains the same model to float rounding.
TEST(OldFiles, TheCpusOwnPathTrainsTheSameModelToRounding) {
  test::TempDir dir;
  const ProcResult r = Shm(Train({"--steps", "60", "--save", dir.File("native.model")}), "");
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const Model got = Decode(dir.File("native.model")), want = Decode(kDir + "mlp-60.model");
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    ASSERT_NEAR(got.params[i], want.params[i], kRounding) << "parameter " << i;
  }
}

}  // namespace
}  // namespace shmtrain
