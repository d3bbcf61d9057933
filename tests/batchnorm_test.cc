// Batch norm against PyTorch's definitions written as loops in the test: the running
// statistics a training pass moves, evaluation with them, and P = 1, 2, 3 sync workers through
// the CLI against an independent reference in double that normalises with the statistics of
// the whole batch (so P workers train what one process trains at the full batch).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/crc32.h"
#include "data/pipeline.h"
#include "gtest/gtest.h"
#include "nn/batch_norm.h"
#include "nn/model.h"
#include "shmtrain/options.h"
#include "tests/line_images.h"
#include "tests/proc_util.h"
#include "tests/reference.h"

namespace shmtrain {
namespace {

using test::Images;
using test::ProcResult;

constexpr double kEps = 1e-5, kMomentum = 0.1;

// ---- the layer and its running statistics, one process ------------------------------------

// x: n samples of c channels of `pixels` values, channels-last. The batch's mean and biased
// variance per channel, in double, as torch.var(unbiased=False) over (N, H, W).
void Moments(const std::vector<double>& x, int64_t c, std::vector<double>* mean,
             std::vector<double>* var) {
  const int64_t m = static_cast<int64_t>(x.size()) / c;
  mean->assign(c, 0.0);
  var->assign(c, 0.0);
  for (int64_t p = 0; p < m; ++p)
    for (int64_t k = 0; k < c; ++k) (*mean)[k] += x[p * c + k] / m;
  for (int64_t p = 0; p < m; ++p)
    for (int64_t k = 0; k < c; ++k) (*var)[k] += (x[p * c + k] - (*mean)[k]) * (x[p * c + k] - (*mean)[k]) / m;
}

ModelSpec OneLayer(Shape in, const std::string& text) {
  ModelSpec spec;
  spec.input = in;
  spec.loss = Loss::kMse;
  EXPECT_TRUE(nn::ParseModelText(text, &spec.layers).ok());
  return spec;
}

// Training normalises with the batch's statistics; three passes move the running statistics
// as torch.nn.BatchNorm2d(momentum=0.1) does (the variance unbiased), and num_batches_tracked
// counts them; evaluation normalises with the running statistics.
TEST(BatchNorm, TrainingMovesTheRunningStatisticsAndEvaluationUsesThem) {
  const Shape in{3, 4, 5};
  const int64_t c = 3, n = 4, m = n * 20;
  const ModelSpec spec = OneLayer(in, "batchnorm2d");
  auto layer = nn::FindLayerType("batchnorm2d")->make_double(spec.layers[0], in, in);
  std::vector<float> w(spec.ParamCount());
  nn::InitParams(spec, Init::kTorch, 1, w.data());
  for (int64_t k = 0; k < c; ++k) {  // weight, bias off their defaults
    w[k] = 0.5f + static_cast<float>(k);
    w[c + k] = -0.25f * static_cast<float>(k);
  }
  std::vector<double> rm(c, 0.0), rv(c, 1.0);
  const std::vector<nn::NormSite> sites = nn::NormSites(spec);
  ASSERT_EQ(sites.size(), 1u);
  nn::RecordedStats recorded(spec);
  for (int step = 0; step < 3; ++step) {
    std::vector<double> x(static_cast<size_t>(m * c));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * i + step) * (1 + step) + step;
    nn::PassInfo pass;
    pass.train = true;
    pass.stats = &recorded;
    std::vector<double> wd(w.begin(), w.end()), y(x.size());
    layer->Forward(wd.data(), x.data(), n, pass, y.data());
    std::vector<double> mean, var;
    Moments(x, c, &mean, &var);
    for (int64_t p = 0; p < m; ++p)
      for (int64_t k = 0; k < c; ++k) {
        const double want = (x[p * c + k] - mean[k]) / std::sqrt(var[k] + kEps) * w[k] + w[c + k];
        ASSERT_NEAR(y[p * c + k], want, 1e-12) << "step " << step;
      }
    nn::AdvanceRunningStats(sites, recorded.data(), w.data(), w.data(), 0,
                            static_cast<int64_t>(w.size()));
    for (int64_t k = 0; k < c; ++k) {
      rm[k] = (1 - kMomentum) * rm[k] + kMomentum * mean[k];
      rv[k] = (1 - kMomentum) * rv[k] + kMomentum * var[k] * m / (m - 1);
      EXPECT_NEAR(w[2 * c + k], rm[k], 1e-6 * std::max(1.0, std::abs(rm[k]))) << "running_mean";
      EXPECT_NEAR(w[3 * c + k], rv[k], 1e-6 * std::max(1.0, rv[k])) << "running_var";
    }
    EXPECT_EQ(w[4 * c], static_cast<float>(step + 1)) << "num_batches_tracked";
  }
  // Evaluation: (x - running_mean) / sqrt(running_var + eps) * weight + bias.
  std::vector<double> x(static_cast<size_t>(m * c)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11 * i);
  std::vector<double> wd(w.begin(), w.end());
  layer->Forward(wd.data(), x.data(), n, nn::PassInfo{}, y.data());
  for (int64_t p = 0; p < m; ++p)
    for (int64_t k = 0; k < c; ++k) {
      const double want = (x[p * c + k] - wd[2 * c + k]) / std::sqrt(wd[3 * c + k] + kEps) * wd[k] + wd[c + k];
      ASSERT_NEAR(y[p * c + k], want, 1e-12);
    }
}

// The crossings of a pass, in its order (nn::PassCrossings, which the combiner of several hosts
// follows): batch norm's forward sums (2C + 1) and, unless it is the first layer with
// parameters (no input gradient), its backward sums (2C) at their place after them.
TEST(BatchNorm, PassCrossingsAreForwardThenBackwardInPassOrder) {
  const Shape in{1, 6, 6};
  auto crossings = [&](const std::string& text) {
    std::string out;
    for (const nn::Crossing& c : nn::PassCrossings(OneLayer(in, text))) {
      out += "(" + std::to_string(c.offset) + "," + std::to_string(c.count) + ")";
    }
    return out;
  };
  EXPECT_EQ(crossings("conv2d(4,3,padding=1),batchnorm2d,relu,flatten,linear(3)"), "(0,9)(9,8)");
  EXPECT_EQ(crossings("conv2d(4,3,padding=1),batchnorm2d,relu,conv2d(2,3,padding=1),batchnorm2d,"
                      "flatten,linear(3)"),
            "(0,9)(17,5)(22,4)(9,8)");
  EXPECT_EQ(crossings("batchnorm2d,flatten,linear(3)"), "(0,3)");
  EXPECT_EQ(crossings("flatten,linear(3)"), "");
}

// ---- batches that give a layer one value per channel ---------------------------------------

ModelSpec Spec(const std::string& text, Shape input) {
  ModelSpec spec;
  spec.input = input;
  spec.loss = Loss::kXent;
  EXPECT_TRUE(nn::ParseModelText(text, &spec.layers).ok()) << text;
  return spec;
}

nn::ResolvedModel Resolved(const ModelSpec& spec) {
  nn::ResolvedModel m;
  EXPECT_TRUE(nn::ResolveModel(spec, /*flat_input=*/false, &m).ok()) << spec.Text();
  return m;
}

// One value per channel: a batchnorm1d at one sample, a batchnorm2d at one sample of a 1x1
// map (PyTorch counts N x H x W), one inside a block too; two values, or one sample of a
// larger map, are enough.
TEST(BatchNorm, LoneValueLayerNamesTheLayerThatABatchGivesOneValuePerChannel) {
  const ModelSpec mlp = Spec("flatten,linear(4),batchnorm1d,relu,linear(3)", {1, 6, 6});
  EXPECT_EQ(nn::LoneValueLayer(Resolved(mlp), 1), "batchnorm1d #1 (layer 3)");
  EXPECT_EQ(nn::LoneValueLayer(Resolved(mlp), 2), "");
  const ModelSpec pooled =
      Spec("conv2d(4,3),batchnorm2d,adaptiveavgpool2d(1),batchnorm2d,flatten,linear(3)", {1, 6, 6});
  EXPECT_EQ(nn::LoneValueLayer(Resolved(pooled), 1), "batchnorm2d #2 (layer 4)");
  EXPECT_EQ(nn::LoneValueLayer(Resolved(pooled), 2), "");
  const ModelSpec block = Spec("conv2d(4,3),adaptiveavgpool2d(1),residual(conv2d(4,1),batchnorm2d),"
                               "flatten,linear(3)", {1, 6, 6});
  EXPECT_EQ(nn::LoneValueLayer(Resolved(block), 1), "batchnorm2d in residual #1 (layer 3)");
  const ModelSpec padded = Spec("conv2d(4,3,padding=1),batchnorm2d,flatten,linear(3)", {1, 6, 6});
  EXPECT_EQ(nn::LoneValueLayer(Resolved(padded), 1), "");
}

// The smallest batch a run meets: --batch, the full batch, or the last of an epoch when the
// run gets there.
TEST(BatchNorm, ARunWhoseBatchGivesOneValuePerChannelIsRefusedNamingTheBatch) {
  TrainOptions o;
  o.model = Spec("flatten,linear(4),batchnorm1d,relu,linear(3)", {1, 6, 6});
  o.batch = 1;
  o.epochs = 1;
  Status s = data::CheckBatchNormBatches(o, Resolved(o.model), 30);
  EXPECT_EQ(s.code(), Status::Code::kUsage);
  EXPECT_NE(s.message().find("--batch 1: a training batch of 1 sample gives batchnorm1d #1 "
                             "(layer 3) one value per channel"), std::string::npos) << s.message();
  o.batch = 29;  // 30 = 29 + 1
  s = data::CheckBatchNormBatches(o, Resolved(o.model), 30);
  EXPECT_NE(s.message().find("--batch 29: the 30 training rows leave the last batch of every "
                             "epoch 1 sample (30 = 1 x 29 + 1)"), std::string::npos) << s.message();
  o.epochs = 0;
  o.steps = 1;  // never at the epoch's last batch
  EXPECT_TRUE(data::CheckBatchNormBatches(o, Resolved(o.model), 30).ok());
  o.steps = 2;
  EXPECT_FALSE(data::CheckBatchNormBatches(o, Resolved(o.model), 30).ok());
  o.batch = 0;
  EXPECT_TRUE(data::CheckBatchNormBatches(o, Resolved(o.model), 30).ok());
  EXPECT_NE(data::CheckBatchNormBatches(o, Resolved(o.model), 1).message().find("has 1 row: a full batch of it gives "
                                                       "batchnorm1d #1 (layer 3)"),
            std::string::npos);
  o.model = Spec("flatten,linear(4),relu,linear(3)", {1, 6, 6});
  o.batch = 1;
  EXPECT_TRUE(data::CheckBatchNormBatches(o, Resolved(o.model), 30).ok());
}

// Through the command line: refused before a worker starts, exit 2, nothing left behind;
// --batch 1 used to train silently into a model at chance.
TEST(BatchNormRun, ABatchOfOneSampleIsRefusedAtTheStart) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", Images().Csv());
  for (const char* batch : {"1", "29"}) {
    SCOPED_TRACE(std::string("--batch ") + batch);
    const ProcResult r = test::Shmtrain(
        {"train", "--data", data, "--input-shape", "1,6,6", "--model",
         "flatten,linear(4),batchnorm1d,relu,linear(3)", "--loss", "xent", "--workers", "2",
         "--lr", "0.1", "--epochs", "1", "--batch", batch, "--save", dir.File("m.bin")},
        test::milliseconds{60'000});
    EXPECT_EQ(r.exit_code, 2) << r.Describe();
    EXPECT_NE(r.err.find(std::string("--batch ") + batch + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("batchnorm1d #1 (layer 3) one value per channel"), std::string::npos)
        << r.err;
    EXPECT_FALSE(test::FileExists(dir.File("m.bin")));
    EXPECT_TRUE(test::SegmentsOf(r.pid).empty());
  }
}

// ---- P sync workers through the CLI against a reference in double -------------------------

// conv2d(4,3,padding=1,bias=false),batchnorm2d,relu,adaptiveavgpool2d(1),flatten,linear(3) on
// 30 images of 1x6x6. Parameters in the product's layout: the convolution's W (4 x 9,
// column-major: W[o + t*4], t = ky*3 + kx), batch norm's weight, bias, running_mean,
// running_var, num_batches_tracked (4, 4, 4, 4, 1), the linear layer's W (3 x 4, column-major)
// and b (3).
const char* kModel = "conv2d(4,3,padding=1,bias=false),batchnorm2d,relu,adaptiveavgpool2d(1),"
                     "flatten,linear(3)";
constexpr int K = 4, kBn = 9 * K, kLin = kBn + 4 * K + 1, kParams = kLin + 3 * K + 3;

// The mean cross-entropy of the full batch, batch norm with the full batch's statistics; the
// batch's per-channel mean and biased variance into *mean, *var when given.
double RefLoss(const std::vector<double>& w, const Images& d, std::vector<double>* mean = nullptr,
               std::vector<double>* var = nullptr) {
  const int rows = Images::kRows;
  std::vector<double> z(static_cast<size_t>(rows * 36 * K));  // [i][pixel][o]
  for (int i = 0; i < rows; ++i) {
    const double* img = d.x.data() + i * Images::kPixels;
    for (int o = 0; o < K; ++o)
      for (int y = 0; y < 6; ++y)
        for (int x = 0; x < 6; ++x) {
          double s = 0;
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = y + ky - 1, ix = x + kx - 1;
              if (iy >= 0 && iy < 6 && ix >= 0 && ix < 6) s += w[o + (ky * 3 + kx) * K] * img[iy * 6 + ix];
            }
          z[(i * 36 + y * 6 + x) * K + o] = s;
        }
  }
  std::vector<double> mu, v;
  Moments(z, K, &mu, &v);
  double total = 0;
  for (int i = 0; i < rows; ++i) {
    double pooled[K] = {};
    for (int p = 0; p < 36; ++p)
      for (int o = 0; o < K; ++o) {
        const double b = (z[(i * 36 + p) * K + o] - mu[o]) / std::sqrt(v[o] + kEps) * w[kBn + o] + w[kBn + K + o];
        pooled[o] += std::max(b, 0.0) / 36;
      }
    double out[3];
    for (int u = 0; u < 3; ++u) {
      out[u] = w[kLin + 3 * K + u];
      for (int j = 0; j < K; ++j) out[u] += w[kLin + u + j * 3] * pooled[j];
    }
    const double mx = std::max({out[0], out[1], out[2]});
    total += mx + std::log(std::exp(out[0] - mx) + std::exp(out[1] - mx) + std::exp(out[2] - mx)) -
             out[d.y[i]];
  }
  if (mean != nullptr) *mean = mu;
  if (var != nullptr) *var = v;
  return total / rows;
}

// SGD on the full batch (the gradient by central differences, the buffers left out), then the
// running statistics moved by the step's batch statistics.
std::vector<double> RefTrain(std::vector<double> w, const Images& d, int steps, double lr) {
  const double h = 1e-6, m = Images::kRows * 36;
  for (int t = 0; t < steps; ++t) {
    std::vector<double> mean, var, g(w.size(), 0.0);
    RefLoss(w, d, &mean, &var);
    for (size_t p = 0; p < w.size(); ++p) {
      if (p >= kBn + 2 * K && p < kLin) continue;  // a buffer
      const double keep = w[p];
      w[p] = keep + h;
      const double up = RefLoss(w, d);
      w[p] = keep - h;
      const double down = RefLoss(w, d);
      w[p] = keep;
      g[p] = (up - down) / (2 * h);
    }
    for (size_t p = 0; p < w.size(); ++p) w[p] -= lr * g[p];
    for (int o = 0; o < K; ++o) {
      w[kBn + 2 * K + o] = (1 - kMomentum) * w[kBn + 2 * K + o] + kMomentum * mean[o];
      w[kBn + 3 * K + o] = (1 - kMomentum) * w[kBn + 3 * K + o] + kMomentum * var[o] * m / (m - 1);
    }
    w[kBn + 4 * K] += 1;
  }
  return w;
}

std::vector<std::string> Train(const std::string& data, int workers, int steps, const std::string& lr,
                               const std::string& save) {
  return {"train", "--data", data, "--input-shape", "1,6,6", "--model", kModel, "--loss", "xent",
          "--workers", std::to_string(workers), "--lr", lr, "--steps", std::to_string(steps),
          "--seed", "5", "--save", save};
}

TEST(BatchNormRun, PSyncWorkersTrainWhatTheFullBatchReferenceTrains) {
  test::TempDir dir;
  const Images d;
  const std::string data = dir.Write("images.csv", d.Csv());
  ProcResult r = test::Shmtrain(Train(data, 1, 1, "1e-30", dir.File("init.model")), test::milliseconds{120'000});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const Model m0 = test::LoadSaved(dir.File("init.model"));
  ASSERT_EQ(m0.params.size(), static_cast<size_t>(kParams));
  std::vector<double> w0(m0.params.begin(), m0.params.end());
  // The initial buffers: one step at a rate that moves nothing else moved them once.
  for (int o = 0; o < K; ++o) {
    w0[kBn + 2 * K + o] = 0;
    w0[kBn + 3 * K + o] = 1;
  }
  w0[kBn + 4 * K] = 0;
  const int steps = 5;
  const std::vector<double> want = RefTrain(w0, d, steps, 0.5);
  EXPECT_GT(test::MaxScaledDiff(std::vector<double>(w0.begin(), w0.end()), want), 1e-2)
      << "the reference barely trained: the comparison says little";
  for (const int workers : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    r = test::Shmtrain(Train(data, workers, steps, "0.5", dir.File("trained.model")), test::milliseconds{120'000});
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    // The summary says what the crossings cost, a part of the barrier's wait: at each one every
    // rank but the last to arrive waits.
    if (workers > 1) {
      EXPECT_NE((r.out + r.err).find("(batch norm's crossings "), std::string::npos)
          << r.Describe();
    }
    const std::vector<float> got = test::LoadSaved(dir.File("trained.model")).params;
    const double diff = test::MaxScaledDiff(got, want);
    std::printf("[ batch norm P=%d ] against the full-batch reference: %.3g\n", workers, diff);
    // Float rounding leaves about 1e-8; a biased running variance leaves 2e-6.
    EXPECT_LE(diff, 1e-6);
    EXPECT_EQ(got[kBn + 4 * K], static_cast<float>(steps)) << "num_batches_tracked";
  }
}

// A worker whose share of a step is empty still makes every crossing, the backward ones too
// (nn/net.cc): 3 workers on minibatches of 2 rows, one of them without rows each step, train
// what one worker trains (before, that worker skipped batch norm's backward crossing in its
// first pass, and the others waited for it until the barrier's deadline, again and again).
TEST(BatchNormRun, AWorkerWithoutRowsStillCrosses) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", Images().Csv());
  std::vector<std::vector<float>> got;
  for (const int workers : {1, 3}) {
    std::vector<std::string> a = Train(data, workers, 5, "0.5", dir.File("trained.model"));
    a.insert(a.end(), {"--batch", "2", "--barrier-timeout", "5s", "--max-restarts", "0"});
    const ProcResult r = test::Shmtrain(a, test::milliseconds{120'000});
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    got.push_back(test::LoadSaved(dir.File("trained.model")).params);
  }
  EXPECT_LE(test::MaxScaledDiff(got[1], std::vector<double>(got[0].begin(), got[0].end())), 1e-6);
}

// bytes with the float at `at` set to v and the CRC-32 that ends the file recomputed: a model
// file or a checkpoint made by hand, which only its contents can tell from a written one.
std::string WithFloat(std::string bytes, size_t at, float v) {
  std::memcpy(bytes.data() + at, &v, sizeof v);
  const uint32_t crc = Crc32(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, sizeof crc);
  return bytes;
}

// A negative running variance in a model file or a checkpoint: eval, export and --resume
// refuse it, naming the layer's buffer (eval used to print a loss and exit 0, export to take
// it, a resumed run to meet it at its first validation).
TEST(BatchNormRun, ANegativeRunningVarianceIsRefusedByEvalExportAndResume) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", Images().Csv());
  std::vector<std::string> a = Train(data, 1, 4, "0.5", dir.File("m.bin"));
  a.insert(a.end(), {"--checkpoint", dir.File("ck.bin"), "--checkpoint-every", "2"});
  ProcResult r = test::Shmtrain(a, test::milliseconds{120'000});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const int var = kBn + 3 * K + 1;  // running_var[1]
  const std::string name = "batchnorm2d #1 (layer 2) running_var, element 1 of 4";
  const std::string model = test::ReadWholeFile(dir.File("m.bin"));
  // The parameters end the file, before its checksum.
  const size_t at = model.size() - 4 - (kParams - var) * 4;
  const std::string bad = dir.Write("bad.bin", WithFloat(model, at, -3));
  for (const std::string cmd : {"eval", "export"}) {
    SCOPED_TRACE(cmd);
    std::vector<std::string> args = {cmd, "--model", bad};
    if (cmd == "eval") args.insert(args.end(), {"--data", data});
    if (cmd == "export") args.insert(args.end(), {"--out", dir.File("m.npz")});
    r = test::Shmtrain(args, test::milliseconds{60'000});
    EXPECT_EQ(r.exit_code, 2) << r.Describe();
    EXPECT_NE(r.err.find("bad.bin: not a usable model file: parameter " + std::to_string(var) +
                         " of " + std::to_string(kParams) + " is -3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    EXPECT_FALSE(test::FileExists(dir.File("m.npz")));
  }
  // A checkpoint: magic, version, mode, step, fingerprint, n, K, m (48 bytes), the optimizer's
  // m bytes, then W.
  const std::string ck = test::ReadWholeFile(dir.File("ck.bin"));
  uint32_t m = 0;
  ASSERT_GT(ck.size(), 48u);
  std::memcpy(&m, ck.data() + 44, sizeof m);
  dir.Write("ck.bin", WithFloat(ck, 48 + m + var * 4, -3));
  a = Train(data, 1, 8, "0.5", dir.File("m.bin"));
  a.insert(a.end(), {"--resume", dir.File("ck.bin")});
  r = test::Shmtrain(a, test::milliseconds{120'000});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_NE(r.err.find("ck.bin: not a usable checkpoint: parameter " + std::to_string(var)),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
  EXPECT_TRUE(test::SegmentsOf(r.pid).empty());
}

}  // namespace
}  // namespace shmtrain
