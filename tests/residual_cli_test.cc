// A residual CNN through the CLI: trained by P workers, exported, and its export run by numpy
// (tests/npz_numpy_forward.py, which builds each block as docs/models.md's Residual module from
// the arrays under "i.body." and "i.shortcut.") to the probabilities `predict` prints; and
// `simulate` on the same model.
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/files/model_file.h"
#include "tests/line_images.h"
#include "tests/proc_util.h"
#include "tests/reference.h"

namespace shmtrain {
namespace {

using test::ProcResult;

constexpr test::milliseconds kTimeout{120'000};

// A stem, a block with an identity shortcut, a strided block with a 1x1 projection and batch
// norm in its body and its shortcut (their statistics cross the workers), a block nested in a
// body, and ResNet's head, on 1x6x6 images.
constexpr const char* kModel =
    "conv2d(4,3,padding=1,bias=false),relu,residual(conv2d(4,3,padding=1,bias=false),relu,"
    "conv2d(4,3,padding=1)),relu,residual(conv2d(8,3,stride=2,padding=1,bias=false),"
    "batchnorm2d,relu,conv2d(8,3,padding=1,bias=false),batchnorm2d|conv2d(8,1,stride=2,"
    "bias=false),batchnorm2d),residual(residual(conv2d(8,1),tanh),relu),adaptiveavgpool2d(1),"
    "flatten,linear(3)";

std::vector<std::string> Train(const std::string& data, int workers, const std::string& save) {
  return {"train",
          "--data",
          data,
          "--input-shape",
          "1,6,6",
          "--model",
          kModel,
          "--loss",
          "xent",
          "--workers",
          std::to_string(workers),
          "--lr",
          "0.3",
          "--steps",
          "25",
          "--batch",
          "10",
          "--seed",
          "5",
          "--save",
          save};
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (const char ch : s) {
    if (ch == sep) {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

// Two workers train what one does (to float rounding: their shares are summed, not one batch),
// batch norm in the blocks normalising by the whole batch's statistics.
TEST(ResidualCli, PWorkersTrainWhatOneDoes) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", test::Images().Csv());
  for (const int workers : {1, 2}) {
    const ProcResult r = test::Shmtrain(
        Train(data, workers, dir.File("p" + std::to_string(workers) + ".model")), kTimeout);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
  }
  const Model one = test::LoadSaved(dir.File("p1.model"));
  EXPECT_EQ(one.spec.Text(), kModel);
  const Model two = test::LoadSaved(dir.File("p2.model"));
  const std::vector<double> want(one.params.begin(), one.params.end());
  EXPECT_LE(test::MaxScaledDiff(two.params, want), 1e-5);
}

// The export names the blocks' arrays as PyTorch's state dict of the model's nn.Sequential
// does, with each block the Residual module of docs/models.md; numpy's forward pass over them
// predicts what `predict` does.
TEST(ResidualCli, TheExportIsPyTorchsAndNumpyPredictsWhatPredictDoes) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", test::Images().Csv());
  const std::string m = dir.File("m.model");
  ProcResult r = test::Shmtrain(Train(data, 2, m), kTimeout);
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
    const std::vector<std::string> cells = Split(line, '\t');
    if (!cells[0].empty() && std::isdigit(static_cast<unsigned char>(cells[0][0]))) {
      params.push_back(cells[0] + " " + cells[1] + " " + cells[2]);
    }
  }
  std::vector<std::string> want = {"0.weight <f4 4,1,3,3", "2.body.0.weight <f4 4,4,3,3",
                                   "2.body.2.weight <f4 4,4,3,3", "2.body.2.bias <f4 4",
                                   "4.body.0.weight <f4 8,4,3,3"};
  // Batch norm's blocks and buffers, num_batches_tracked a 0-d int64 as PyTorch keeps it.
  auto norm = [&](const std::string& p) {
    for (const char* b : {"weight", "bias", "running_mean", "running_var"}) {
      want.push_back(p + b + " <f4 8");
    }
    want.push_back(p + "num_batches_tracked <i8 ");
  };
  norm("4.body.1.");
  want.push_back("4.body.3.weight <f4 8,8,3,3");
  norm("4.body.4.");
  want.push_back("4.shortcut.0.weight <f4 8,4,1,1");
  norm("4.shortcut.1.");
  want.insert(want.end(), {"5.body.0.body.0.weight <f4 8,8,1,1", "5.body.0.body.0.bias <f4 8",
                           "8.weight <f4 3,8", "8.bias <f4 3"});
  EXPECT_EQ(params, want);

  const ProcResult np =
      test::RunProcess({NUMPY_PYTHON, NPZ_NUMPY_FORWARD_PY, dir.File("m.npz"), data}, kTimeout);
  ASSERT_EQ(np.exit_code, 0) << np.Describe();
  const std::vector<std::string> mine = test::SplitLines(np.out);
  const std::vector<std::string> pred = test::SplitLines(test::ReadWholeFile(dir.File("p.csv")));
  ASSERT_EQ(mine.size(), static_cast<size_t>(test::Images::kRows));
  ASSERT_EQ(mine.size() + 1, pred.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::vector<std::string> a = Split(mine[i], '\t'), b = Split(pred[i + 1], ',');
    ASSERT_EQ(a.size(), 4u) << mine[i];
    ASSERT_EQ(b.size(), 4u) << pred[i + 1];
    EXPECT_EQ(a[0], b[0]) << "row " << i;
    for (size_t k = 1; k < 4; ++k) {
      EXPECT_NEAR(std::stod(a[k]), std::stod(b[k]), 2e-5)
          << "row " << i << ": " << mine[i] << " against " << pred[i + 1];
    }
  }
}

// simulate builds the same model in-process and trains it under each M.
TEST(ResidualCli, SimulateTrainsAModelOfBlocks) {
  test::TempDir dir;
  const std::string data = dir.Write("images.csv", test::Images().Csv());
  const ProcResult r = test::Shmtrain(
      {"simulate", "--data", data, "--input-shape", "1,6,6", "--model", kModel, "--loss", "xent",
       "--workers", "1,2", "--lr", "0.3", "--steps", "10", "--batch", "10"},
      kTimeout);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_NE(r.out.find("M=2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shmtrain
