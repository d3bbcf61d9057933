// Shapes a run is given, checked at its start: a run configuration the workers would refuse,
// image shapes that differ between a model and its data, and the memory a model's
// activations need. Each is refused before a worker starts, naming the flag or the file.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/npz_writer.h"
#include "gtest/gtest.h"
#include "master/files/model_file.h"
#include "master/files/output_write.h"
#include "nn/layer.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using test::ExitedWith;
using test::ProcResult;

constexpr test::milliseconds kTimeout{120'000};

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

ProcResult Shm(std::vector<std::string> args) { return test::Shmtrain(std::move(args), kTimeout); }

// An .npy file of float32 `shape` in dir, its values 0, 1/n, 2/n, ...
std::string Npy(const test::TempDir& dir, const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) / static_cast<float>(n);
  std::string bytes;
  const std::string path = dir.File(name);
  const Status s = data::EncodeNpy(data::NpyArray::Float32("x", std::move(shape), v), path, &bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  return dir.Write(name, bytes);
}

// Labels 0, 1, 0, 1, ... of n rows as an .npy file.
std::string Labels(const test::TempDir& dir, const std::string& name, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 2);
  std::string bytes;
  const Status s = data::EncodeNpy(data::NpyArray::Float32("y", {n}, v), dir.File(name), &bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  return dir.Write(name, bytes);
}

// An IDX file of uint8 images of h x w.
std::string Idx(const test::TempDir& dir, const std::string& name, int n, int h, int w) {
  std::string b = {0, 0, 0x08, 3};
  for (uint32_t d :
       {static_cast<uint32_t>(n), static_cast<uint32_t>(h), static_cast<uint32_t>(w)}) {
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<char>((d >> (8 * k)) & 0xFF));
  }
  for (int64_t i = 0; i < int64_t{n} * h * w; ++i) b.push_back(static_cast<char>(i % 251));
  return dir.Write(name, b);
}

// Trial 3: an input wider than a run takes passed the master, and every worker refused the
// segment (exit 14) until --max-restarts gave up. The master now makes the workers' own check
// of the run configuration before a row is stored: exit 2, naming where the width came from.
TEST(RunConfig, WhatTheWorkersRefuseIsRefusedAtTheStart) {
  test::TempDir dir;
  const std::string y = Labels(dir, "y.npy", 4);
  const std::string flat = Npy(dir, "flat.npy", {4, 70000});
  const std::string idx = Idx(dir, "wide-idx3-ubyte", 4, 1, 70000);
  struct Case {
    std::vector<std::string> args;
    std::string named;
    std::string why = "(each must be 1 to 65536)";
  };
  const std::vector<std::string> run = {"--loss",  "xent", "--lr",           "0.1",
                                        "--steps", "5",    "--max-restarts", "0"};
  for (const Case& c : std::vector<Case>{
           // The flag's own range is the run's now.
           {{"--example", "blobs", "--rows", "20", "--features", "100000", "--model", "linear(4)"},
            "--features: ",
            "100000 is out of range (1..65536)"},
           {{"--data", flat, "--labels", y, "--model", "linear(2)"}, flat + ": "},
           {{"--data", idx, "--labels", y, "--model", "flatten,linear(2)"}, idx + ": "},
       }) {
    std::vector<std::string> a = {"train"};
    a.insert(a.end(), c.args.begin(), c.args.end());
    a.insert(a.end(), run.begin(), run.end());
    const ProcResult r = Shm(a);
    EXPECT_TRUE(ExitedWith(r, 2)) << c.named;
    EXPECT_TRUE(Has(r.err, "shmtrain: error: " + c.named)) << r.err;
    EXPECT_TRUE(Has(r.err, c.why)) << r.err;
    EXPECT_FALSE(Has(r.err, "shmtrain-worker") || Has(r.err, "exited with code"))
        << "no worker may start: " << r.err;
  }
}

// What --save would write must be a model file eval, predict and export read back: an input of
// more than 2^24 values (which model files refuse) is refused before the training, not found
// after it in a file nothing can read.
TEST(RunConfig, AModelThatItsFileCannotHoldIsRefusedBeforeTraining) {
  test::TempDir dir;
  const std::string x = Idx(dir, "big-idx3-ubyte", 1, 4097, 4097);  // 16785409 > 2^24 values
  const std::string y = Labels(dir, "y.npy", 1);
  const ProcResult r = Shm({"train", "--data", x, "--labels", y, "--model", "flatten,linear(1)",
                            "--loss", "mse", "--lr", "0.01", "--steps", "1", "--save",
                            dir.File("m.bin")});
  EXPECT_TRUE(ExitedWith(r, 2));
  EXPECT_TRUE(Has(r.err, "--save: the model file of this run could not be read back: ")) << r.err;
  EXPECT_FALSE(Has(r.err, "worker")) << r.err;
  EXPECT_FALSE(test::FileExists(dir.File("m.bin")));
}

// Trial 4: a model of 4x8x8 images evaluated 1x16x16 images (as many values) with exit 0, and
// validated on them. Where both the model and the data give an image shape (IDX, .npy of 3 or
// 4 dimensions, --input-shape), they must be the same: exit 2 naming both. Flat data of as
// many values stays accepted by an image model, and image data by a flat one.
TEST(ImageShapes, AModelAndItsDataMustAgree) {
  test::TempDir dir;
  const std::string y = Labels(dir, "y.npy", 8);
  const std::string a = Npy(dir, "a.npy", {8, 4, 8, 8});
  const std::string b = Npy(dir, "b.npy", {8, 1, 16, 16});
  const std::string flat = Npy(dir, "flat.npy", {8, 256});
  const std::string idx = Idx(dir, "b-idx3-ubyte", 8, 16, 16);
  const std::string conv = dir.File("conv.bin"), mlp = dir.File("mlp.bin");
  const std::vector<std::string> train = {"--loss", "xent", "--lr", "0.1", "--steps", "2"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), train.begin(), train.end());
    return args;
  };
  ASSERT_TRUE(ExitedWith(Shm(with({"train", "--data", a, "--labels", y, "--model",
                                   "conv2d(4,3),relu,flatten,linear(2)", "--save", conv})),
                         0));
  ASSERT_TRUE(ExitedWith(
      Shm(with({"train", "--data", flat, "--labels", y, "--layers", "256,2", "--save", mlp})), 0));
  struct Case {
    std::vector<std::string> args;
    std::string want;  // "" : accepted
  };
  const std::string refused = ": images of 1x16x16, but the model's input is 4x8x8 (";
  for (const Case& c : std::vector<Case>{
           {{"eval", "--model", conv, "--data", b, "--labels", y}, b + refused + conv + ")"},
           {{"predict", "--model", conv, "--data", b}, b + refused + conv + ")"},
           {{"eval", "--model", conv, "--data", idx, "--labels", y}, idx + refused + conv + ")"},
           {with({"train", "--data", a, "--labels", y, "--val-data", b, "--val-labels", y,
                  "--model", "conv2d(4,3),relu,flatten,linear(2)"}),
            b + refused + a + ")"},
           {with({"train", "--data", b, "--labels", y, "--input-shape", "4,8,8", "--model",
                  "conv2d(4,3),relu,flatten,linear(2)"}),
            b + refused + "--input-shape)"},
           {{"eval", "--model", conv, "--data", a, "--labels", y}, ""},
           {{"eval", "--model", conv, "--data", flat, "--labels", y}, ""},
           {{"predict", "--model", mlp, "--data", b}, ""},
           {with({"train", "--data", flat, "--labels", y, "--input-shape", "4,8,8", "--model",
                  "conv2d(4,3),relu,flatten,linear(2)"}),
            ""},
       }) {
    const ProcResult r = Shm(c.args);
    if (c.want.empty()) {
      EXPECT_TRUE(ExitedWith(r, 0)) << c.args[0] << " " << c.args[4];
    } else {
      EXPECT_TRUE(ExitedWith(r, 2)) << c.want;
      EXPECT_TRUE(Has(r.err, "shmtrain: error: " + c.want)) << r.err;
    }
  }
}

// Trial 4: a model of 17k parameters whose convolution's im2col matrix alone is 64 GB for one
// sample of 4x2048x2048 (a 31x31 kernel over 4 channels at every one of 4M pixels) passed
// every check: the workers crash-looped on bad_alloc, eval and predict said "internal error:
// out of memory". The activations and scratch a pass takes (nn::PassBytes, what the net
// allocates) are now checked with the data, before a row is read: exit 4 with the figure.
TEST(ActivationMemory, IsCheckedBeforeARowIsRead) {
  test::TempDir dir;
  const int64_t values = int64_t{4} * 2048 * 2048;
  const std::string x = test::SparseNpy(dir, "x.npy", "<f4", "2, 4, 2048, 2048", 2 * values * 4);
  const std::string y = Labels(dir, "y.npy", 2);
  const char* kModel = "conv2d(4,31,padding=15),maxpool2d(128),flatten,linear(2)";
  ProcResult r = Shm({"train", "--data", x, "--labels", y, "--model", kModel, "--loss", "xent",
                      "--lr", "0.1", "--steps", "1", "--max-restarts", "0"});
  EXPECT_TRUE(ExitedWith(r, 4));
  EXPECT_TRUE(Has(r.err, "shmtrain: error: " + x + ": the run needs about ")) << r.err;
  // Floats of a training pass over 2 samples: the input turned channels-last (2 x 4 x 2048^2),
  // the outputs (2 x 4 x 2048^2, and 2 x 2050 more), two deltas as large as the largest layer
  // input after the first (2 x 2 x 4 x 2048^2), one sample's im2col matrix (3844 x 2048^2:
  // one sample a chunk) and the pool's 4 flags: 16257126408 floats, 60.6 GiB.
  EXPECT_TRUE(Has(r.err,
                  "the model's activations and scratch: 60.6 GiB for each of 1 worker "
                  "(2 samples a pass)"))
      << r.err;
  EXPECT_TRUE(Has(r.err, " is available")) << r.err;
  EXPECT_FALSE(Has(r.err, "shmtrain-worker") || Has(r.err, "exited with code")) << r.err;

  // The same model, saved as training would have saved it, for eval and predict.
  Model m;
  m.spec.input = {4, 2048, 2048};
  m.spec.loss = Loss::kXent;
  ASSERT_TRUE(nn::ParseModelText(kModel, &m.spec.layers).ok());
  m.params.assign(m.spec.ParamCount(), 0.01f);
  m.classes = data::ClassMap::Build({"0", "1"});
  const std::string model = dir.File("m.bin");
  ASSERT_TRUE(master::WriteFileDurably(model, EncodeModel(m)).ok());
  for (const char* cmd : {"eval", "predict"}) {
    std::vector<std::string> a = {cmd, "--model", model, "--data", x};
    if (std::string(cmd) == "eval") a.insert(a.end(), {"--labels", y});
    r = Shm(a);
    EXPECT_TRUE(ExitedWith(r, 4)) << cmd;
    EXPECT_TRUE(Has(r.err, "shmtrain: error: " + x + ": the run needs about ")) << r.err;
    // Forward only, one sample a chunk (nn::EvalChunk): 16156461058 floats, and 2 outputs.
    EXPECT_TRUE(Has(r.err,
                    "the model's activations and scratch: 60.2 GiB for evaluation (1 "
                    "sample a pass)"))
        << r.err;
  }
}

// Columns split at tabs or commas.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out(1);
  for (char ch : line) {
    if (ch == '\t' || ch == ',') {
      out.emplace_back();
    } else {
      out.back() += ch;
    }
  }
  return out;
}

// Trial 4: a 1x1 feature map was taken for flat data, so a convolution could not read it. As
// in PyTorch, conv2d(8,8) on 8x8 images leaves 8x1x1 maps that conv2d(4,1) reads, and
// --input-shape 4,1,1 gives rows a 1x1 image; both train, and predict computes what numpy does
// with PyTorch's definitions of the layers on the export (tests/npz_numpy_forward.py).
TEST(OneByOneMaps, TrainAndPredictAsPyTorchComputes) {
  test::TempDir dir;
  struct Case {
    std::string model, shape;
    int values;
  };
  for (const Case& c : std::vector<Case>{
           {"conv2d(8,8),relu,conv2d(4,1),conv2d(3,3,padding=1),flatten,linear(2)", "1,8,8", 64},
           {"conv2d(6,1),tanh,conv2d(5,1),maxpool2d(1),flatten,linear(2)", "4,1,1", 4},
       }) {
    SCOPED_TRACE(c.model);
    std::string csv;
    for (int i = 0; i < 12; ++i) {
      for (int j = 0; j < c.values; ++j) {
        csv += std::to_string(((i * 7 + j * 3) % 11) / 10.0 + (j % 2 == i % 2 ? 0.5 : 0)) + ",";
      }
      csv += std::to_string(i % 2) + "\n";
    }
    const std::string data = dir.Write("d.csv", csv);
    const std::string model = dir.File("m.bin");
    ProcResult r =
        Shm({"train", "--data", data, "--input-shape", c.shape, "--model", c.model, "--loss",
             "xent", "--lr", "0.1", "--steps", "3", "--workers", "2", "--save", model});
    ASSERT_TRUE(ExitedWith(r, 0));
    r = Shm({"predict", "--model", model, "--data", data, "--out", dir.File("p.csv")});
    ASSERT_TRUE(ExitedWith(r, 0));
    r = Shm({"export", "--model", model, "--out", dir.File("m.npz")});
    ASSERT_TRUE(ExitedWith(r, 0));
    const ProcResult np =
        test::RunProcess({NUMPY_PYTHON, NPZ_NUMPY_FORWARD_PY, dir.File("m.npz"), data}, kTimeout);
    ASSERT_TRUE(ExitedWith(np, 0));
    const std::vector<std::string> want = test::SplitLines(np.out);
    const std::vector<std::string> got =
        test::SplitLines(test::ReadWholeFile(dir.File("p.csv")));  // a header line first
    ASSERT_EQ(want.size(), 12u);
    ASSERT_EQ(got.size(), 13u);
    for (size_t i = 0; i < want.size(); ++i) {
      const std::vector<std::string> w = Cells(want[i]), g = Cells(got[i + 1]);
      ASSERT_EQ(w.size(), 3u) << want[i];
      ASSERT_EQ(g.size(), 3u) << got[i + 1];
      EXPECT_EQ(w[0], g[0]) << "row " << i;
      for (size_t k = 1; k < 3; ++k) {
        EXPECT_NEAR(std::stod(w[k]), std::stod(g[k]), 2e-5) << "row " << i;
      }
    }
  }
}

}  // namespace
}  // namespace shmtrain
