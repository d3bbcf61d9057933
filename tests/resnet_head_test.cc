// A ResNet's stem and head through the CLI: a convolution without a bias (conv2d(bias=false))
// and global average pooling (adaptiveavgpool2d(1)) before flatten and linear. P workers
// against an independent reference in double on both kernel paths (SHMTRAIN_CPU), bf16 runs
// whose P agree as the project's bf16 runs do, and the export read by numpy.
//
// The reference is the forward pass in plain NCHW loops with PyTorch's definitions (conv2d
// with no bias, relu, the mean of each channel, linear, softmax cross-entropy) and its
// gradient by central differences: it shares no kernel with the product.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/files/model_file.h"
#include "nn/cpu.h"
#include "nn/rng.h"
#include "tests/line_images.h"
#include "tests/proc_util.h"
#include "tests/reference.h"

namespace shmtrain {
namespace {

using test::ProcResult;

constexpr test::milliseconds kTimeout{120'000};

using test::Images;


// conv2d(K,3,padding=1,bias=false),relu,adaptiveavgpool2d(1),flatten,linear(3). K = 8 takes
// the convolution's im2col and product path, K = 16 its direct kernels (nn/layers/conv2d.cc).
std::string ModelOf(int k) {
  return "conv2d(" + std::to_string(k) +
         ",3,padding=1,bias=false),relu,adaptiveavgpool2d(1),flatten,linear(3)";
}

// The mean cross-entropy of the full batch, parameters in the product's layout: the
// convolution's W (K x 9, column-major: W[o + t*K], t = ky*3 + kx), no bias; the linear
// layer's W (3 x K, column-major) and b (3).
double RefLoss(const std::vector<double>& w, int k, const Images& d) {
  const double* lw = w.data() + 9 * k;
  const double* lb = lw + 3 * k;
  double total = 0;
  for (int i = 0; i < Images::kRows; ++i) {
    const double* img = d.x.data() + i * Images::kPixels;
    std::vector<double> mean(k, 0.0);
    for (int o = 0; o < k; ++o) {
      double sum = 0;
      for (int y = 0; y < 6; ++y)
        for (int x = 0; x < 6; ++x) {
          double s = 0;  // bias=False
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = y + ky - 1, ix = x + kx - 1;
              if (iy < 0 || iy >= 6 || ix < 0 || ix >= 6) continue;
              s += w[o + (ky * 3 + kx) * k] * img[iy * 6 + ix];
            }
          sum += std::max(s, 0.0);
        }
      mean[o] = sum / 36;  // adaptive_avg_pool2d(., 1): one bin, the whole map
    }
    double z[3];
    for (int u = 0; u < 3; ++u) {
      z[u] = lb[u];
      for (int j = 0; j < k; ++j) z[u] += lw[u + j * 3] * mean[j];
    }
    const double m = std::max({z[0], z[1], z[2]});
    const double lse = m + std::log(std::exp(z[0] - m) + std::exp(z[1] - m) + std::exp(z[2] - m));
    total += lse - z[d.y[i]];
  }
  return total / Images::kRows;
}

// SGD on the full batch, the gradient by central differences.
std::vector<double> RefTrain(std::vector<double> w, int k, const Images& d, int steps, double lr) {
  const double h = 1e-6;
  for (int t = 0; t < steps; ++t) {
    std::vector<double> g(w.size());
    for (size_t p = 0; p < w.size(); ++p) {
      const double keep = w[p];
      w[p] = keep + h;
      const double up = RefLoss(w, k, d);
      w[p] = keep - h;
      const double down = RefLoss(w, k, d);
      w[p] = keep;
      g[p] = (up - down) / (2 * h);
    }
    for (size_t p = 0; p < w.size(); ++p) w[p] -= lr * g[p];
  }
  return w;
}

std::vector<std::string> Train(const std::string& data, const std::string& model, int workers,
                               int steps, const std::string& lr, const std::string& save) {
  return {"train",
          "--data",
          data,
          "--input-shape",
          "1,6,6",
          "--model",
          model,
          "--loss",
          "xent",
          "--workers",
          std::to_string(workers),
          "--lr",
          lr,
          "--steps",
          std::to_string(steps),
          "--seed",
          "5",
          "--save",
          save};
}

// The run of `args` with SHMTRAIN_CPU=cpu (null: unset).
ProcResult RunOn(const std::vector<std::string>& args, const char* cpu) {
  if (cpu != nullptr) setenv("SHMTRAIN_CPU", cpu, 1);
  ProcResult r = test::Shmtrain(args, kTimeout);
  if (cpu != nullptr) unsetenv("SHMTRAIN_CPU");
  return r;
}

// Both widths, one worker and two, on the AVX2 path and the CPU's own (AVX-512 where it has
// it): each trains the full batch to what the reference trains.
TEST(ResNetHead, PWorkersOnEachPathMatchTheReference) {
  test::TempDir dir;
  const Images d;
  const std::string data = dir.Write("images.csv", d.Csv());
  for (const int k : {8, 16}) {
    const std::string model = ModelOf(k);
    // The initial parameters: a run whose learning rate moves nothing.
    ProcResult r = RunOn(Train(data, model, 1, 1, "1e-30", dir.File("init.model")), nullptr);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    const Model m0 = test::LoadSaved(dir.File("init.model"));
    ASSERT_EQ(m0.spec.Text(), model);
    ASSERT_EQ(m0.params.size(), static_cast<size_t>(9 * k + 3 * k + 3));
    const int steps = 6;
    const std::vector<double> want =
        RefTrain(std::vector<double>(m0.params.begin(), m0.params.end()), k, d, steps, 0.5);
    double moved = 0, scale = 0;
    for (size_t p = 0; p < want.size(); ++p) {
      moved = std::max(moved, std::abs(want[p] - m0.params[p]));
      scale = std::max(scale, std::abs(want[p]));
    }
    EXPECT_GT(moved / scale, 1e-2) << "the reference barely trained: the comparison says little";
    for (const char* cpu : {"avx2", "native"}) {
      for (const int workers : {1, 2}) {
        SCOPED_TRACE(model + ", SHMTRAIN_CPU=" + cpu + ", " + std::to_string(workers) + " workers");
        r = RunOn(Train(data, model, workers, steps, "0.5", dir.File("trained.model")), cpu);
        ASSERT_EQ(r.exit_code, 0) << r.Describe();
        const double diff =
            test::MaxScaledDiff(test::LoadSaved(dir.File("trained.model")).params, want);
        std::printf("[ %s %s P=%d ] against the reference: %.3g\n", model.c_str(), cpu, workers,
                    diff);
        EXPECT_LE(diff, 1e-5);
      }
    }
  }
}

// --precision bf16 (as process_test.cc's Bf16Run): each P gives the same bits on every run, P =
// 2 trains what P = 1 does to float rounding (1e-5 of the largest parameter), and bf16 trains
// otherwise than float.
TEST(ResNetHead, Bf16RunsOfEachPAgree) {
  if (!nn::UsedCpu().avx512_bf16) GTEST_SKIP() << "this CPU has no avx512_bf16";
  test::TempDir dir;
  const Images d;
  const std::string data = dir.Write("images.csv", d.Csv());
  for (const int k : {8, 16}) {
    const std::string model = ModelOf(k);
    auto run = [&](int workers, const char* precision, const std::string& file) {
      std::vector<std::string> a = Train(data, model, workers, 60, "0.5", dir.File(file));
      a.insert(a.end(), {"--precision", precision, "--batch", "10"});
      const ProcResult r = RunOn(a, nullptr);
      EXPECT_EQ(r.exit_code, 0) << r.Describe();
      return test::ReadWholeFile(dir.File(file));
    };
    const std::string p2 = run(2, "bf16", "p2.model");
    ASSERT_FALSE(p2.empty());
    EXPECT_TRUE(p2 == run(2, "bf16", "p2again.model"))
        << model << ": two bf16 runs of P = 2 differ";
    run(1, "bf16", "p1.model");
    run(1, "float", "float.model");
    const Model one = test::LoadSaved(dir.File("p1.model"));
    const std::vector<double> want(one.params.begin(), one.params.end());
    const double p = test::MaxScaledDiff(test::LoadSaved(dir.File("p2.model")).params, want);
    const double f = test::MaxScaledDiff(test::LoadSaved(dir.File("float.model")).params, want);
    std::printf("[ %s bf16 ] P = 2 against P = 1: %.3g; float against bf16: %.3g\n", model.c_str(),
                p, f);
    EXPECT_LE(p, 1e-5) << model;
    EXPECT_GT(f, 1e-4) << model << ": --precision bf16 trained what float trains";
  }
}

// The export holds PyTorch's state dict of nn.Sequential(Conv2d(1, 8, 3, padding=1,
// bias=False), ReLU(), AdaptiveAvgPool2d(1), Flatten(), Linear(8, 3)): "0.weight" and no
// "0.bias"; numpy's forward pass over it (tests/npz_numpy_forward.py) predicts what predict
// does.
TEST(ResNetHead, TheExportIsPyTorchsAndNumpyPredictsWhatPredictDoes) {
  test::TempDir dir;
  const Images d;
  const std::string data = dir.Write("images.csv", d.Csv());
  const std::string m = dir.File("m.model");
  ProcResult r = RunOn(Train(data, ModelOf(8), 2, 40, "0.5", m), nullptr);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  r = test::Shmtrain({"predict", "--model", m, "--data", data, "--out", dir.File("p.csv")},
                     kTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  r = test::Shmtrain({"export", "--model", m, "--out", dir.File("m.npz")}, kTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();

  const ProcResult names =
      test::RunProcess({PYTHON3_BIN, NPZ_FORWARD_PY, "describe", dir.File("m.npz")}, kTimeout);
  ASSERT_EQ(names.exit_code, 0) << names.Describe();
  std::vector<std::string> params;
  for (const std::string& line : test::SplitLines(names.out)) {
    const std::string name = line.substr(0, line.find('\t'));
    if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
      const size_t shape = line.find('\t', name.size() + 1) + 1;
      params.push_back(name + " " + line.substr(shape, line.find('\t', shape) - shape));
    }
  }
  EXPECT_EQ(params, (std::vector<std::string>{"0.weight 8,1,3,3", "4.weight 3,8", "4.bias 3"}));

  const ProcResult np =
      test::RunProcess({NUMPY_PYTHON, NPZ_NUMPY_FORWARD_PY, dir.File("m.npz"), data}, kTimeout);
  ASSERT_EQ(np.exit_code, 0) << np.Describe();
  const std::vector<std::string> mine = test::SplitLines(np.out);
  const std::vector<std::string> pred = test::SplitLines(test::ReadWholeFile(dir.File("p.csv")));
  ASSERT_EQ(mine.size() + 1, pred.size());
  auto split = [](const std::string& s, char sep) {
    std::vector<std::string> out(1);
    for (const char ch : s) {
      if (ch == sep) {
        out.emplace_back();
      } else {
        out.back() += ch;
      }
    }
    return out;
  };
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::vector<std::string> a = split(mine[i], '\t'), b = split(pred[i + 1], ',');
    ASSERT_EQ(a.size(), 4u) << mine[i];
    ASSERT_EQ(b.size(), 4u) << pred[i + 1];
    EXPECT_EQ(a[0], b[0]) << "row " << i;
    for (size_t k = 1; k < 4; ++k) {
      EXPECT_NEAR(std::stod(a[k]), std::stod(b[k]), 2e-5)
          << "row " << i << ": " << mine[i] << " against " << pred[i + 1];
    }
  }
}

}  // namespace
}  // namespace shmtrain
