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
#include <tuple>
#include <vector>

#include "data/preprocess.h"
#include "gtest/gtest.h"
#include "master/files/model_file.h"
#include "nn/layer.h"
#include "nn/rng.h"
#include "tests/line_images.h"
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

using test::Images;


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
           // --normalize channel needs an image input, whether the flags or the data say so.
           {with({"--layers", "36,3", "--normalize", "channel"}),
            "--normalize: channel scales each channel of an image (rows of c x h x w, a --model "
            "on an image input), but --layers takes flat features: --normalize standard scales "
            "each feature"},
           {with({"--model", "linear(3)", "--input-shape", "36,1,1", "--normalize", "channel"}),
            "but --input-shape 36,1,1 is flat features: --normalize standard"},
           {{"train", "--example", "blobs", "--model", "linear(3)", "--loss", "xent", "--lr",
             "0.1", "--steps", "2", "--normalize", "channel"},
            "but the example blobs has flat features: --normalize standard"},
           {with({"--model", "linear(3)", "--normalize", "channel"}),
            "--normalize: channel scales each channel of an image (rows of c x h x w), but the "
            "model's input is 36 flat features: --normalize standard scales each feature"},
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

// --normalize channel end to end. 3x4x4 images whose channels have statistics of their own
// (near 100 and wide, near 0 and narrow, near -5), two classes; each value a multiple of 1/64
// so that the CSV holds it exactly.
struct ColourImages {
  static constexpr int kC = 3, kHw = 16, kFeatures = kC * kHw;
  data::Dataset d;
  ColourImages(int rows, uint64_t seed) {
    nn::Rng rng(seed);
    d.rows = rows;
    d.features = kFeatures;
    for (int i = 0; i < rows; ++i) {
      const int k = i % 2;
      auto sixty_fourths = [&](uint64_t n) { return static_cast<float>(rng.Below(n)) / 64; };
      for (int p = 0; p < kHw; ++p) d.x.push_back(sixty_fourths(64 * 40) + 80 + 20 * k);
      for (int p = 0; p < kHw; ++p) d.x.push_back(sixty_fourths(8));
      for (int p = 0; p < kHw; ++p) d.x.push_back(sixty_fourths(64) - 5 - k);
      d.y.push_back(static_cast<float>(k));
    }
  }
  // Rows of x, as `x` holds them, and the class.
  std::string Csv(const std::vector<float>& x) const {
    std::string s;
    char buf[40];
    for (int64_t i = 0; i < d.rows; ++i) {
      for (int j = 0; j < kFeatures; ++j) {
        std::snprintf(buf, sizeof buf, "%.9g,", x[i * kFeatures + j]);
        s += buf;
      }
      s += std::to_string(static_cast<int>(d.y[i])) + "\n";
    }
    return s;
  }
};

// The channel statistics of `rows` in double (numpy's mean and std, ddof 0, per channel).
void ChannelStats(const data::Dataset& rows, std::vector<double>* mean, std::vector<double>* sd) {
  mean->assign(ColourImages::kC, 0);
  sd->assign(ColourImages::kC, 0);
  for (int c = 0; c < ColourImages::kC; ++c) {
    std::vector<double> v;
    for (int64_t i = 0; i < rows.rows; ++i) {
      for (int p = 0; p < ColourImages::kHw; ++p) {
        v.push_back(rows.x[i * ColourImages::kFeatures + c * ColourImages::kHw + p]);
      }
    }
    for (const double x : v) (*mean)[c] += x / static_cast<double>(v.size());
    for (const double x : v) (*sd)[c] += (x - (*mean)[c]) * (x - (*mean)[c]);
    (*sd)[c] = std::sqrt((*sd)[c] / static_cast<double>(v.size()));
  }
}

// The numbers of `line`, cells split at `sep`.
std::vector<double> Numbers(const std::string& line, char sep) {
  std::vector<double> row;
  size_t start = 0;
  for (size_t k = 0; k <= line.size(); ++k) {
    if (k == line.size() || line[k] == sep) {
      row.push_back(std::stod(line.substr(start, k - start)));
      start = k + 1;
    }
  }
  return row;
}

// Each line's numbers (class, then the probabilities), `header` lines skipped.
std::vector<std::vector<double>> Rows(const std::string& text, char sep, size_t header) {
  std::vector<std::vector<double>> out;
  const std::vector<std::string> lines = test::SplitLines(text);
  for (size_t i = header; i < lines.size(); ++i) out.push_back(Numbers(lines[i], sep));
  return out;
}

void ExpectClose(const std::vector<std::vector<double>>& a,
                 const std::vector<std::vector<double>>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), 3u) << "row " << i;
    ASSERT_EQ(b[i].size(), a[i].size()) << "row " << i;
    for (size_t k = 0; k < a[i].size(); ++k) EXPECT_NEAR(a[i][k], b[i][k], tol) << "row " << i;
  }
}

// Each channel's mean and std of the rows --val-split 0.25 --seed 3 trains on (not of all
// rows), as a saved model must hold them: every feature of channel c has c's.
void ExpectTrainingRowsStatistics(const Model& m, const data::Dataset& all,
                                  std::vector<double>* mean, std::vector<double>* sd) {
  ASSERT_EQ(m.norm.kind, Normalize::kChannel);
  ASSERT_EQ(m.norm.offset.size(), static_cast<size_t>(ColourImages::kFeatures));
  ASSERT_EQ(m.norm.scale.size(), static_cast<size_t>(ColourImages::kFeatures));
  data::Dataset train, held_out;
  ASSERT_TRUE(data::SplitValidation(all, 0.25, 3, &train, &held_out).ok());
  ASSERT_EQ(train.rows, 30);
  std::vector<double> all_mean, all_sd;
  ChannelStats(train, mean, sd);
  ChannelStats(all, &all_mean, &all_sd);
  for (int c = 0; c < ColourImages::kC; ++c) {
    ASSERT_NE(static_cast<float>((*mean)[c]), static_cast<float>(all_mean[c])) << "channel " << c;
    for (int p = 0; p < ColourImages::kHw; ++p) {
      const int j = c * ColourImages::kHw + p;
      EXPECT_FLOAT_EQ(m.norm.offset[j], static_cast<float>((*mean)[c])) << "feature " << j;
      EXPECT_FLOAT_EQ(m.norm.scale[j], static_cast<float>(1 / (*sd)[c])) << "feature " << j;
    }
  }
}

// eval's loss in its JSON line.
double EvalLoss(const std::string& model, const std::string& data) {
  const ProcResult r = Shm({"eval", "--model", model, "--data", data, "--log-format", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  const size_t at = r.out.find("\"loss\":");
  EXPECT_NE(at, std::string::npos) << r.out;
  return at == std::string::npos ? NAN : std::stod(r.out.substr(at + 7));
}

// A model trained with --normalize channel holds each channel's mean and 1 / std of the
// training rows only (not the held-out ones), and eval, predict and the export on new images
// give what the same model without scaling gives on those images scaled by hand.
TEST(CnnFiles, ChannelNormalisationIsFittedSavedAndApplied) {
  test::TempDir dir;
  const ColourImages all(40, 21);
  const std::string data = dir.Write("train.csv", all.Csv(all.d.x));
  const std::string saved = dir.File("m.model");
  ProcResult r = Shm({"train", "--data", data, "--input-shape", "3,4,4", "--model",
                      "conv2d(2,3,padding=1),relu,flatten,linear(2)", "--loss", "xent",
                      "--normalize", "channel", "--val-split", "0.25", "--seed", "3", "--lr",
                      "0.05", "--steps", "30", "--workers", "2", "--save", saved});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const Model m = Decode(saved);
  std::vector<double> mean, sd;
  ExpectTrainingRowsStatistics(m, all.d, &mean, &sd);
  if (HasFatalFailure()) return;
  // New images, raw for the saved model and scaled by hand for the same model without scaling.
  const ColourImages fresh(12, 77);
  std::vector<float> scaled = fresh.d.x;
  for (size_t j = 0; j < scaled.size(); ++j) {
    const int c = static_cast<int>(j % ColourImages::kFeatures) / ColourImages::kHw;
    scaled[j] = static_cast<float>((fresh.d.x[j] - mean[c]) / sd[c]);
  }
  Model plain = m;
  plain.norm = data::Normalizer{};
  const std::string plain_model = dir.Write("plain.model", EncodeModel(plain));
  const std::string raw_data = dir.Write("new.csv", fresh.Csv(fresh.d.x));
  const std::string scaled_data = dir.Write("scaled.csv", fresh.Csv(scaled));
  for (const auto& [model, rows, out] :
       {std::tuple{saved, raw_data, "p.csv"}, std::tuple{plain_model, scaled_data, "q.csv"}}) {
    r = Shm({"predict", "--model", model, "--data", rows, "--out", dir.File(out)});
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }
  const auto p = Rows(test::ReadWholeFile(dir.File("p.csv")), ',', 1);
  ASSERT_EQ(p.size(), 12u);
  ExpectClose(p, Rows(test::ReadWholeFile(dir.File("q.csv")), ',', 1), 1e-5);
  const double loss = EvalLoss(saved, raw_data);
  EXPECT_NEAR(loss, EvalLoss(plain_model, scaled_data), 1e-6 * loss);
  // The export holds the same per-feature offsets and scales: numpy's forward pass of it
  // (tests/npz_numpy_forward.py) on the raw images predicts what predict does.
  r = Shm({"export", "--model", saved, "--out", dir.File("m.npz")});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const ProcResult np =
      test::RunProcess({NUMPY_PYTHON, NPZ_NUMPY_FORWARD_PY, dir.File("m.npz"), raw_data}, kTimeout);
  ASSERT_EQ(np.exit_code, 0) << np.Describe();
  ExpectClose(Rows(np.out, '\t', 0), p, 2e-5);
}

}  // namespace
}  // namespace shmtrain
