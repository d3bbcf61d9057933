// Layered models end to end (--model): P workers against an independent reference written
// here, refusals that name the layer, and files that hold a layered model.
//
// The reference is a convolutional network's forward pass in plain NCHW loops in double,
// with PyTorch's definitions (conv2d, relu, max pooling, flatten, dropout's mask as docs/models.md
// defines it, linear, softmax cross-entropy), and its gradient by central differences: it
// shares no kernel with the product (nn/layers/), so a wrong forward or backward pass there
// shows up as a difference.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/files/model_file.h"
#include "nn/layer.h"
#include "nn/rng.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using test::ProcResult;

constexpr test::milliseconds kTimeout{120'000};

ProcResult Shm(std::vector<std::string> args) { return test::Shmtrain(std::move(args), kTimeout); }

Model Decode(const std::string& path) {
  Model m;
  const Status s = DecodeModel(test::ReadWholeFile(path), path, &m);
  EXPECT_TRUE(s.ok()) << s.message();
  return m;
}

// 30 images of 1x6x6 in 3 classes (a bright row, column or diagonal, with noise), as CSV rows
// of 36 pixels in (c, h, w) order and the class.
struct Images {
  static constexpr int kRows = 30, kSide = 6, kPixels = 36;
  std::vector<double> x;
  std::vector<int> y;
  Images() {
    nn::Rng rng(11);
    for (int i = 0; i < kRows; ++i) {
      const int k = i % 3, at = static_cast<int>(rng.Below(kSide));
      for (int r = 0; r < kSide; ++r) {
        for (int c = 0; c < kSide; ++c) {
          const bool on = k == 0 ? r == at : k == 1 ? c == at : r == c;
          x.push_back(std::round((on ? 0.8 : 0.1) * 1000 + 100 * rng.Uniform()) / 1000);
        }
      }
      y.push_back(k);
    }
  }
  std::string Csv() const {
    std::string s;
    char buf[32];
    for (int i = 0; i < kRows; ++i) {
      for (int j = 0; j < kPixels; ++j) {
        std::snprintf(buf, sizeof buf, "%g,", x[i * kPixels + j]);
        s += buf;
      }
      s += std::to_string(y[i]) + "\n";
    }
    return s;
  }
};

// The model of these tests: conv2d(3,3,padding=1),relu,maxpool2d(2),flatten,dropout(0.25),
// linear(3) on 1x6x6, parameters in the product's layout (docs/models.md, "Model files"): the
// convolution's W (3 x 9, column-major: W[o + k*3], k = ky*3 + kx), b (3); the linear layer's W
// (3 x 27, column-major: W[o + j*3], j the flattened (c, h, w) index), b (3).
constexpr const char* kModel = "conv2d(3,3,padding=1),relu,maxpool2d(2),flatten,dropout(p=0.25),linear(3)";
constexpr int kConvW = 27, kConvB = 3, kLinW = 81, kLinB = 3;
constexpr int kParams = kConvW + kConvB + kLinW + kLinB;
constexpr double kDrop = 0.25;

// Dropout's mask as docs/models.md defines it: unit u of row r at step t of seed s is dropped when
// the uniform draw of (s, t, r, u) is below p.
bool Dropped(uint64_t seed, int64_t step, int64_t row, int64_t unit) {
  const uint64_t base = nn::MixSeed(nn::MixSeed(seed, 0x64726f706f7574ULL), step);
  const uint64_t v = nn::MixSeed(nn::MixSeed(base, row), unit);
  return static_cast<double>(v >> 11) * 0x1p-53 < kDrop;
}

// The mean cross-entropy of the full batch at step t, in NCHW loops.
double RefLoss(const std::vector<double>& w, const Images& d, uint64_t seed, int64_t step) {
  const double* cw = w.data();
  const double* cb = cw + kConvW;
  const double* lw = cb + kConvB;
  const double* lb = lw + kLinW;
  double total = 0;
  for (int i = 0; i < Images::kRows; ++i) {
    const double* img = d.x.data() + i * Images::kPixels;
    double conv[3][6][6];
    for (int o = 0; o < 3; ++o)
      for (int y = 0; y < 6; ++y)
        for (int x = 0; x < 6; ++x) {
          double s = cb[o];
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = y + ky - 1, ix = x + kx - 1;
              if (iy < 0 || iy >= 6 || ix < 0 || ix >= 6) continue;
              s += cw[o + (ky * 3 + kx) * 3] * img[iy * 6 + ix];
            }
          conv[o][y][x] = std::max(s, 0.0);
        }
    double flat[27];
    for (int o = 0; o < 3; ++o)
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 3; ++x) {
          const double m = std::max(std::max(conv[o][2 * y][2 * x], conv[o][2 * y][2 * x + 1]),
                                    std::max(conv[o][2 * y + 1][2 * x], conv[o][2 * y + 1][2 * x + 1]));
          const int u = (o * 3 + y) * 3 + x;
          flat[u] = Dropped(seed, step, i, u) ? 0 : m / (1 - kDrop);
        }
    double z[3];
    for (int o = 0; o < 3; ++o) {
      z[o] = lb[o];
      for (int j = 0; j < 27; ++j) z[o] += lw[o + j * 3] * flat[j];
    }
    const double m = std::max({z[0], z[1], z[2]});
    const double lse = m + std::log(std::exp(z[0] - m) + std::exp(z[1] - m) + std::exp(z[2] - m));
    total += lse - z[d.y[i]];
  }
  return total / Images::kRows;
}

// SGD on the full batch, the gradient by central differences.
std::vector<double> RefTrain(std::vector<double> w, const Images& d, uint64_t seed, int steps,
                             double lr) {
  const double h = 1e-6;
  for (int t = 0; t < steps; ++t) {
    std::vector<double> g(w.size());
    for (size_t k = 0; k < w.size(); ++k) {
      const double keep = w[k];
      w[k] = keep + h;
      const double up = RefLoss(w, d, seed, t);
      w[k] = keep - h;
      const double down = RefLoss(w, d, seed, t);
      w[k] = keep;
      g[k] = (up - down) / (2 * h);
    }
    for (size_t k = 0; k < w.size(); ++k) w[k] -= lr * g[k];
  }
  return w;
}

std::vector<std::string> Train(const std::string& data, int workers, int steps,
                               const std::string& lr, const std::string& save) {
  return {"train", "--data", data, "--input-shape", "1,6,6", "--model", kModel, "--loss", "xent",
          "--workers", std::to_string(workers), "--lr", lr, "--steps", std::to_string(steps),
          "--seed", "5", "--save", save};
}

class CnnWorkers : public ::testing::TestWithParam<int> {};

// P workers train the full batch to what the reference trains, dropout included: each drops
// what one process drops.
TEST_P(CnnWorkers, MatchTheReferenceWithDropoutAndMaxPooling) {
  const int workers = GetParam();
  test::TempDir dir;
  const Images d;
  const std::string data = dir.Write("images.csv", d.Csv());
  // The initial parameters: a run whose learning rate moves nothing.
  const ProcResult init = Shm(Train(data, 1, 1, "1e-30", dir.File("init.model")));
  ASSERT_EQ(init.exit_code, 0) << init.Describe();
  const Model m0 = Decode(dir.File("init.model"));
  ASSERT_EQ(m0.spec.Text(), kModel);
  ASSERT_EQ(m0.params.size(), static_cast<size_t>(kParams));
  const int steps = 6;
  const std::vector<double> want =
      RefTrain(std::vector<double>(m0.params.begin(), m0.params.end()), d, 5, steps, 0.5);
  const ProcResult r = Shm(Train(data, workers, steps, "0.5", dir.File("trained.model")));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const Model m = Decode(dir.File("trained.model"));
  ASSERT_EQ(m.params.size(), want.size());
  double worst = 0, scale = 0, moved = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    worst = std::max(worst, std::abs(m.params[k] - want[k]));
    scale = std::max(scale, std::abs(want[k]));
    moved = std::max(moved, std::abs(want[k] - m0.params[k]));
  }
  EXPECT_GT(moved, 1e-2) << "the reference barely trained: the comparison would say little";
  EXPECT_LE(worst / scale, 1e-5) << workers << " workers against the reference";
}

INSTANTIATE_TEST_SUITE_P(P, CnnWorkers, ::testing::Values(1, 2, 3));

// What a user gets wrong in a model is refused before anything runs, naming the layer.
TEST(CnnRefusals, NameTheLayerAndExitTwo) {
  test::TempDir dir;
  const Images d;
  const std::string data = dir.Write("images.csv", d.Csv());
  const std::string save = dir.File("m.model");
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  const std::vector<std::string> base = {"train", "--data", data, "--loss", "xent", "--lr",
                                         "0.1", "--steps", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  for (const Case& c : std::vector<Case>{
           {with({"--model", "conv2d(3,3),softmax,linear(3)", "--input-shape", "1,6,6"}),
            "--model: layer 2 'softmax': unknown layer 'softmax' (layers: linear, conv2d,"},
           {with({"--model", "conv2d(3,x),flatten,linear(3)", "--input-shape", "1,6,6"}),
            "--model: layer 1 'conv2d(3,x)': kernel wants a number, not 'x'"},
           {with({"--model", "conv2d(3,3),relu,maxpool2d(2),conv2d(4,3),flatten,linear(3)",
                  "--input-shape", "1,6,6"}),
            "--model: conv2d #2 (layer 4): input 3x2x2, kernel 3 with padding 0 leaves no output"},
           {with({"--model", "conv2d(3,3),flatten,linear(3)"}),
            "--model: conv2d #1 (layer 1): input 36 has no image shape (--input-shape C,H,W gives "
            "flat data one)"},
           {with({"--model", "conv2d(3,3),linear(3)", "--input-shape", "1,6,6"}),
            "--model: linear #1 (layer 2): input 3x4x4 is not flat (put flatten before it)"},
           {with({"--model", "flatten,linear(3)", "--input-shape", "1,5,5"}),
            "--input-shape: the input 1x5x5 is 25 values but " + data + " has 36 features"},
           {with({"--model", "linear(3)", "--layers", "36,3"}),
            "--layers and --model: give one of them"},
           {with({"--layers", "36,3", "--input-shape", "1,6,6"}),
            "--input-shape: goes with --model"},
           {with({"--model", "linear(4)", "--input-shape", "1,6,6"}),
            "--model: linear #1 (layer 1): input 1x6x6 is not flat (put flatten before it)"},
           {with({"--model", "flatten,linear(4)", "--input-shape", "1,6,6"}),
            "--model: the model's outputs are 4 but " + data + " has 3 classes"},
       }) {
    const ProcResult r = Shm(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.want << "\n" << r.Describe();
    EXPECT_NE(r.err.find(c.want), std::string::npos) << "want: " << c.want << "\ngot: " << r.err;
    EXPECT_FALSE(test::FileExists(save));
  }
}

// A layered model goes through every file a run writes and reads: the model file (eval,
// predict, export) and a checkpoint that resumes to the bits of the uninterrupted run.
TEST(CnnFiles, SaveEvalPredictExportAndResume) {
  test::TempDir dir;
  const Images d;
  const std::string data = dir.Write("images.csv", d.Csv());
  std::vector<std::string> args = Train(data, 2, 40, "0.3", dir.File("whole.model"));
  args.insert(args.end(), {"--batch", "10"});
  ProcResult r = Shm(args);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  // Stopped at step 20 by the length of the run, then resumed to 40.
  std::vector<std::string> first = Train(data, 2, 21, "0.3", dir.File("first.model"));
  first.insert(first.end(), {"--batch", "10", "--checkpoint", dir.File("c.ckpt"),
                             "--checkpoint-every", "20"});
  r = Shm(first);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::vector<std::string> rest = Train(data, 2, 40, "0.3", dir.File("resumed.model"));
  rest.insert(rest.end(), {"--batch", "10", "--resume", dir.File("c.ckpt")});
  r = Shm(rest);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(test::ReadWholeFile(dir.File("resumed.model")), test::ReadWholeFile(dir.File("whole.model")))
      << "a resumed layered run must end with the uninterrupted run's bytes";

  r = Shm({"eval", "--model", dir.File("whole.model"), "--data", data, "--log-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.out.find(std::string("\"model\":\"") + kModel + " on 1x6x6, xent"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"accuracy\":"), std::string::npos) << r.out;
  r = Shm({"predict", "--model", dir.File("whole.model"), "--data", data, "--out",
           dir.File("p.csv")});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(test::SplitLines(test::ReadWholeFile(dir.File("p.csv"))).size(), 31u);
  r = Shm({"export", "--model", dir.File("whole.model"), "--out", dir.File("m.npz")});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  // numpy reads the export and, with PyTorch's definitions of the layers written in numpy
  // (tests/npz_numpy_forward.py), predicts what predict does.
  const ProcResult np =
      test::RunProcess({NUMPY_PYTHON, NPZ_NUMPY_FORWARD_PY, dir.File("m.npz"), data}, kTimeout);
  ASSERT_EQ(np.exit_code, 0) << np.Describe();
  const std::vector<std::string> mine = test::SplitLines(np.out);
  const std::vector<std::string> pred = test::SplitLines(test::ReadWholeFile(dir.File("p.csv")));
  ASSERT_EQ(mine.size() + 1, pred.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    std::vector<std::string> m;
    size_t start = 0;
    for (size_t k = 0; k <= mine[i].size(); ++k) {
      if (k == mine[i].size() || mine[i][k] == '\t') {
        m.push_back(mine[i].substr(start, k - start));
        start = k + 1;
      }
    }
    std::vector<std::string> p;
    start = 0;
    const std::string& line = pred[i + 1];
    for (size_t k = 0; k <= line.size(); ++k) {
      if (k == line.size() || line[k] == ',') {
        p.push_back(line.substr(start, k - start));
        start = k + 1;
      }
    }
    ASSERT_EQ(m.size(), 4u) << mine[i];
    ASSERT_EQ(p.size(), 4u) << line;
    EXPECT_EQ(m[0], p[0]) << "row " << i;
    for (size_t k = 1; k < 4; ++k) {
      EXPECT_NEAR(std::stod(m[k]), std::stod(p[k]), 2e-5) << "row " << i << ": " << mine[i]
                                                          << " against " << line;
    }
  }
}

}  // namespace
}  // namespace shmtrain
