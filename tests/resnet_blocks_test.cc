// ResNet's blocks on the convolution's direct kernels (nn/layers/conv2d.cc), through real
// processes: 16- and 32-channel blocks on 16x16 and 8x8 maps, as ResNet-20's first stages are
// (every convolution there takes the direct kernels; the identity blocks' input gradients the
// direct input-gradient kernel, the strided block's the product), with batch norm whose
// statistics cross the workers. P workers train what one trains, a rank killed at a fault point
// of a step ends with the bits of the undisturbed run, and a master killed past a checkpoint
// resumes to those bits too. Each in float and, where the CPU has avx512_bf16, in bf16.
#include <signal.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "nn/cpu.h"
#include "tests/proc_util.h"
#include "tests/reference.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::ExitedWith;
using test::Num;
using test::ProcResult;
using test::SameBytes;
using test::SummaryOf;
using test::TempDir;

constexpr milliseconds kRunTimeout{240'000};

constexpr const char* kModel =
    "conv2d(16,3,padding=1,bias=false),batchnorm2d,relu,"
    "residual(conv2d(16,3,padding=1,bias=false),batchnorm2d,relu,"
    "conv2d(16,3,padding=1,bias=false),batchnorm2d),relu,"
    "residual(conv2d(32,3,stride=2,padding=1,bias=false),batchnorm2d,relu,"
    "conv2d(32,3,padding=1,bias=false),batchnorm2d|conv2d(32,1,stride=2,bias=false),batchnorm2d),"
    "relu,adaptiveavgpool2d(1),flatten,linear(3)";

// 48 images of 3x16x16 in 3 classes: a class's mean brightness differs in one channel, so the
// net learns something in a few steps. CSV rows: 768 values, then the label.
std::string ImagesCsv(const TempDir& dir) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::string csv;
  for (int row = 0; row < 48; ++row) {
    const int label = row % 3;
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 256; ++p) {
        csv += std::to_string(u(rng) * 0.5f + (c == label ? 0.5f : 0.0f)) + ",";
      }
    }
    csv += std::to_string(label) + "\n";
  }
  return dir.Write("images.csv", csv);
}

std::vector<std::string> Precisions() {
  std::vector<std::string> p = {"float"};
  if (nn::UsedCpu().avx512_bf16) p.push_back("bf16");
  return p;
}

std::vector<std::string> Train(const std::string& data, int workers, int steps,
                               const std::string& precision,
                               const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {
      SHMTRAIN_BIN, "train", "--no-metrics", "--no-progress", "--log-format", "json",
      "--log-every", "10", "--data", data, "--input-shape", "3,16,16", "--model", kModel,
      "--loss", "xent", "--workers", std::to_string(workers), "--seed", "5", "--steps",
      std::to_string(steps), "--batch", "12", "--lr", "0.05", "--momentum", "0.9",
      "--precision", precision};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

ProcResult Finish(const std::vector<std::string>& argv) {
  ProcResult r = test::RunProcess(argv, kRunTimeout);
  test::ExpectCleanedUp(r);
  return r;
}

// The model file of an undisturbed run.
std::string Reference(const TempDir& dir, const std::string& data, int workers, int steps,
                      const std::string& precision) {
  const std::string path = dir.File("ref-" + std::to_string(workers) + precision + ".model");
  const ProcResult r = Finish(Train(data, workers, steps, precision, {"--save", path}));
  EXPECT_TRUE(ExitedWith(r, 0)) << test::Clip(r.Describe());
  EXPECT_EQ(Num(SummaryOf(r), "restarts"), 0);
  return test::ReadWholeFile(path);
}

// Two and three workers take the step one takes, to float rounding (their shares' gradients
// are summed rather than one batch's; the statistics cross exactly): 1.5e-8 of the largest
// parameter here. One step: over more, batch norm centres the activations on ReLU's corner,
// and a value that float rounding moves across it changes a gradient by a whole term (measured:
// 3e-8 after two steps, then jumps to 4e-6 by step 5 and 1e-4 by step 30, as often for P = 3
// as for P = 2, and sooner in bf16, whose rounding of the inputs makes such crossings likelier).
TEST(ResNetBlocks, PWorkersTrainWhatOneTrains) {
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  for (const std::string& precision : Precisions()) {
    SCOPED_TRACE(precision);
    std::vector<double> one;
    for (const int workers : {1, 2, 3}) {
      const std::string path = dir.File("p" + std::to_string(workers) + ".model");
      const ProcResult r = Finish(Train(data, workers, 1, precision, {"--save", path}));
      ASSERT_TRUE(ExitedWith(r, 0)) << test::Clip(r.Describe());
      const Model m = test::LoadSaved(path);
      if (workers == 1) {
        EXPECT_EQ(m.spec.Text(), kModel);
        one.assign(m.params.begin(), m.params.end());
        continue;
      }
      const double diff = test::MaxScaledDiff(m.params, one);
      std::printf("[ resnet blocks, %s ] P = %d against P = 1: %.3g\n", precision.c_str(),
                  workers, diff);
      EXPECT_LE(diff, 1e-6) << workers << " workers";
    }
  }
}

// f(dir, data, precision, ref) in each precision, ref the bytes of the undisturbed run of
// kSteps steps at P = 2.
constexpr int kSteps = 25;
template <class F>
void AgainstTheUndisturbedRun(F&& f) {
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  for (const std::string& precision : Precisions()) {
    SCOPED_TRACE(precision);
    const std::string ref = Reference(dir, data, 2, kSteps, precision);
    ASSERT_FALSE(ref.empty());
    f(dir, data, precision, ref);
  }
}

// Rank 1 dies at step 12 with half its gradient slot NaN (3), and after arriving at barrier 2
// (6): replaced, it redoes its share, and the run ends with the undisturbed run's bytes.
TEST(ResNetBlocks, AWorkerKilledInAStepEndsByteIdentical) {
  AgainstTheUndisturbedRun([](const TempDir& dir, const std::string& data,
                              const std::string& precision, const std::string& ref) {
    for (const char* point : {"3", "6"}) {
      SCOPED_TRACE(std::string("--fault-point ") + point);
      const std::string path = dir.File("fault.model");
      const ProcResult r = Finish(Train(data, 2, kSteps, precision,
                                        {"--fault-rank", "1", "--fault-step", "12",
                                         "--fault-point", point, "--save", path}));
      ASSERT_TRUE(ExitedWith(r, 0)) << test::Clip(r.Describe());
      EXPECT_EQ(Num(SummaryOf(r), "restarts"), 1) << SummaryOf(r);
      EXPECT_TRUE(SameBytes(test::ReadWholeFile(path), ref));
    }
  });
}

// A run of 15 steps with a checkpoint every 10, resumed from its checkpoint to the end, ends
// with the bytes of the run that went straight through.
TEST(ResNetBlocks, AResumedCheckpointEndsByteIdentical) {
  AgainstTheUndisturbedRun([](const TempDir& dir, const std::string& data,
                              const std::string& precision, const std::string& ref) {
    const std::string ckpt = dir.File(precision + ".ckpt");
    const std::vector<std::string> opts = {"--checkpoint", ckpt, "--checkpoint-every", "10"};
    ProcResult first = Finish(Train(data, 2, 15, precision, opts));
    ASSERT_TRUE(ExitedWith(first, 0)) << test::Clip(first.Describe());
    Checkpoint c;
    ASSERT_TRUE(LoadCheckpoint(ckpt, &c).ok());
    std::printf("[ resnet blocks resume, %s ] from the checkpoint of step %lld\n",
                precision.c_str(), static_cast<long long>(c.step));
    std::vector<std::string> resume = opts;
    const std::string path = dir.File("resumed.model");
    resume.insert(resume.end(), {"--resume", ckpt, "--save", path});
    const ProcResult r = Finish(Train(data, 2, kSteps, precision, resume));
    ASSERT_TRUE(ExitedWith(r, 0)) << test::Clip(r.Describe());
    EXPECT_EQ(Num(SummaryOf(r), "first_step"), c.step);
    EXPECT_TRUE(SameBytes(test::ReadWholeFile(path), ref));
  });
}

}  // namespace
}  // namespace shmtrain
