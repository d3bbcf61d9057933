// `shmtrain train --init-from W.npz` (master/files/init_from.h) through the real binary.
//
// RoundTrip*: a model trained here and exported (`shmtrain export`) is fed back to a run of 0
// steps (`--steps 0`: master/run/zero_steps.h), whose saved model is the trained one, byte for
// byte, and predicts what it does, bit for bit: an MLP, and a CNN with batch norm (its running
// statistics come from the file) and a residual block.
// Refuses*: every refusal (a missing, extra or misshapen array, a wrong type, NaN and
// infinite values, a negative running variance, a header claiming far more than the file, a
// truncated, damaged or non-zip file, --resume or --init with it) exits 2, names the file and
// the array, and leaves no --save or --checkpoint file and no segment.
// FirstLossIsPyTorchs: tests/init_from_torch.py builds the network in PyTorch and saves its
// state_dict with numpy.savez; the first step's loss shmtrain reports from it is PyTorch's on
// the same full batch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "data/npz_writer.h"
#include "gtest/gtest.h"
#include "tests/line_images.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::ExitedWith;
using test::ProcResult;
using test::TempDir;

constexpr milliseconds kTimeout{120'000};
constexpr const char* kPython = PYTHON3_BIN;
constexpr const char* kNumpyPython = NUMPY_PYTHON;  // Debian's python3, where torch is too
const std::string kTorchScript = std::string(SHMTRAIN_SOURCE_DIR) + "/tests/init_from_torch.py";

// The CNN of the round trip and of PyTorch's test (tests/init_from_torch.py builds it).
constexpr const char* kCnn =
    "conv2d(4,3,padding=1,bias=false),batchnorm2d,relu,residual(conv2d(4,3,padding=1),relu,"
    "conv2d(4,3,padding=1,bias=false),batchnorm2d),relu,maxpool2d(2),flatten,linear(3)";
// A run of no step: the weights saved as they are.
const std::vector<std::string> kNoStep = {"--lr", "0.1", "--steps", "0"};

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

ProcResult Shm(std::vector<std::string> args) {
  return test::Shmtrain(std::move(args), kTimeout);
}

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// n rows of 3 features on scales of their own and a class 0, 1 or 2 last, no header.
std::string ThreeFeaturesCsv(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::string csv;
  char buf[96];
  for (int i = 0; i < n; ++i) {
    const double a = u(rng), b = u(rng), c = u(rng);
    const int k = (a + b > 0) + (c > 0.3);
    std::snprintf(buf, sizeof buf, "%.5f,%.5f,%.5f,%d\n", 3 * a + 5, b / 4, 40 * c, k);
    csv += buf;
  }
  return csv;
}

// Trains `train` into dir/name.bin, exports it to dir/name.npz, runs kNoStep from the export
// with `again` into dir/name-again.bin, and expects the same model file and both models'
// predictions on `data` to be the same text.
void ExpectRoundTrip(const TempDir& dir, const std::string& name, const std::string& data,
                     const std::vector<std::string>& train, const std::vector<std::string>& flags) {
  const std::string model = dir.File(name + ".bin"), npz = dir.File(name + ".npz");
  const std::string again = dir.File(name + "-again.bin");
  ASSERT_TRUE(ExitedWith(Shm(Cat({"train", "--data", data, "--save", model}, train)), 0));
  ASSERT_TRUE(ExitedWith(Shm({"export", "--model", model, "--out", npz}), 0));
  const ProcResult r =
      Shm(Cat(Cat({"train", "--data", data, "--init-from", npz, "--save", again}, flags), kNoStep));
  ASSERT_TRUE(ExitedWith(r, 0));
  EXPECT_TRUE(Contains(r.err + r.out, "done: 0 steps")) << r.err << r.out;
  // Nothing but the weights could differ, and they do not: the same bytes.
  EXPECT_TRUE(test::SameBytes(test::ReadWholeFile(again), test::ReadWholeFile(model))) << name;
  const ProcResult p1 = Shm({"predict", "--model", model, "--data", data});
  const ProcResult p2 = Shm({"predict", "--model", again, "--data", data});
  ASSERT_TRUE(ExitedWith(p1, 0));
  ASSERT_TRUE(ExitedWith(p2, 0));
  EXPECT_GT(test::SplitLines(p1.out).size(), 20u);
  EXPECT_TRUE(test::SameBytes(p2.out, p1.out)) << name;
}

TEST(InitFrom, RoundTripMlp) {
  TempDir dir;
  const std::string data = dir.Write("d.csv", ThreeFeaturesCsv(90, 3));
  const std::vector<std::string> flags = {"--workers",    "2",    "--layers",    "3,8,8,3",
                                          "--loss",       "xent", "--normalize", "standard",
                                          "--activation", "relu"};
  ExpectRoundTrip(dir, "mlp", data,
                  Cat(flags, {"--lr", "0.1", "--momentum", "0.9", "--steps", "200"}), flags);
}

TEST(InitFrom, RoundTripConvBatchNormResidual) {
  TempDir dir;
  const std::string data = dir.Write("images.csv", test::Images().Csv());
  const std::vector<std::string> common = {"--workers", "2",      "--input-shape",
                                           "1,6,6",     "--loss", "xent"};
  ExpectRoundTrip(dir, "cnn", data,
                  Cat(common, {"--model", kCnn, "--lr", "0.05", "--momentum", "0.9", "--batch", "8",
                               "--steps", "60"}),
                  Cat(common, {"--model", kCnn}));
}

// ---------------------------------------------------------------------------------------------
// Refusals, on an MLP with batch norm over 3 features:
//   0 linear(4), 1 batchnorm1d, 2 relu, 3 linear(3)

constexpr const char* kBnMlp = "linear(4),batchnorm1d,relu,linear(3)";

std::vector<float> Ramp(int n, float from, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + step * static_cast<float>(i);
  return v;
}

// The arrays of a good file for kBnMlp, as PyTorch's state_dict names them; 3.bias holds
// 0.125, 0.25, 0.375, a pattern the damaged file's test finds in the archive.
std::vector<data::NpyArray> GoodArrays() {
  using data::NpyArray;
  return {NpyArray::Float32("0.weight", {4, 3}, Ramp(12, -0.5f, 0.09f)),
          NpyArray::Float32("0.bias", {4}, Ramp(4, -0.1f, 0.05f)),
          NpyArray::Float32("1.weight", {4}, Ramp(4, 0.9f, 0.1f)),
          NpyArray::Float32("1.bias", {4}, Ramp(4, -0.2f, 0.1f)),
          NpyArray::Float32("1.running_mean", {4}, Ramp(4, -0.3f, 0.2f)),
          NpyArray::Float32("1.running_var", {4}, Ramp(4, 0.5f, 0.25f)),
          NpyArray::Int64("1.num_batches_tracked", {}, {12}),
          NpyArray::Float32("3.weight", {3, 4}, Ramp(12, 0.4f, -0.07f)),
          NpyArray::Float32("3.bias", {3}, {0.125f, 0.25f, 0.375f})};
}

std::string NpzBytes(const std::vector<data::NpyArray>& arrays) {
  std::string bytes;
  const Status s = data::EncodeNpz(arrays, "test", &bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  return bytes;
}

// GoodArrays with array `name` replaced by `a`, or dropped when `a` has no name.
std::string NpzWith(const std::string& name, const data::NpyArray& a) {
  std::vector<data::NpyArray> arrays = GoodArrays();
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].name != name) continue;
    if (a.name.empty()) {
      arrays.erase(arrays.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      arrays[i] = a;
    }
  }
  return NpzBytes(arrays);
}

// A good archive whose member `member` holds an NPY header of `shape` and only `data_bytes`
// bytes of data, written by Python's zipfile (stored, its CRC-32 right): an archive that is
// sound, whose array's header claims more than it holds.
std::string ShortMember(const TempDir& dir, const std::string& file, const std::string& member,
                        const std::string& shape, int data_bytes) {
  const std::string good = dir.Write(file + ".good", NpzBytes(GoodArrays()));
  const std::string path = dir.File(file);
  const std::string script =
      "import sys, zipfile\n"
      "good, out, member, shape, n = sys.argv[1:6]\n"
      "d = \"{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }\" % shape\n"
      "d += ' ' * (63 - (10 + len(d)) % 64) + '\\n'\n"
      "npy = b'\\x93NUMPY\\x01\\x00' + len(d).to_bytes(2, 'little') + d.encode() + bytes(int(n))\n"
      "with zipfile.ZipFile(good) as g, zipfile.ZipFile(out, 'w') as z:\n"
      "    for name in g.namelist():\n"
      "        z.writestr(name, npy if name == member else g.read(name))\n";
  const ProcResult r = test::RunProcess(
      {kPython, "-c", script, good, path, member, shape, std::to_string(data_bytes)}, kTimeout);
  EXPECT_TRUE(ExitedWith(r, 0));
  std::filesystem::remove(good);
  return path;
}

// The good archive with one byte of 3.bias's data changed: its CRC-32 no longer matches.
std::string Damaged() {
  std::string bytes = NpzBytes(GoodArrays());
  const float pattern[] = {0.125f, 0.25f, 0.375f};
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(pattern), 12));
  EXPECT_NE(at, std::string::npos);
  if (at != std::string::npos) bytes[at + 5] ^= 0x01;  // 0.25 becomes another finite value
  return bytes;
}

struct Refusal {
  std::string name;
  std::string file;                  // the --init-from path
  std::vector<std::string> extra;    // more flags
  std::vector<std::string> message;  // what stderr must hold, besides the file's path
};

std::vector<Refusal> Refusals(const TempDir& dir) {
  using data::NpyArray;
  auto npz = [&](const std::string& name, const std::string& bytes) {
    return dir.Write(name + ".npz", bytes);
  };
  const std::vector<float> nan_bias = {-0.1f, 0.0f, NAN, 0.2f};
  const std::vector<float> inf_weight = {0.1f, 0.2f, 0.3f, INFINITY, 0.5f, 0.6f,
                                         0.7f, 0.8f, 0.9f, 1.0f,     1.1f, 1.2f};
  std::vector<data::NpyArray> extra = GoodArrays();
  extra.push_back(NpyArray::Float32("fc.weight", {3, 4}, Ramp(12, 0, 1)));
  const std::string good = npz("good", NpzBytes(GoodArrays()));
  return {
      {"missing",
       npz("missing", NpzWith("1.running_var", NpyArray{})),
       {},
       {"missing tensor '1.running_var'", "float32 of shape (4,)"}},
      {"extra", npz("extra", NpzBytes(extra)), {}, {"extra tensor 'fc.weight'"}},
      {"misshapen",
       npz("misshapen",
           NpzWith("3.weight", NpyArray::Float32("3.weight", {4, 3}, Ramp(12, 0, 0.1f)))),
       {},
       {"tensor '3.weight'", "shape (4, 3) in the file, the model wants (3, 4)"}},
      {"float64",
       npz("float64",
           NpzWith("0.weight", NpyArray::Float64("0.weight", {4, 3}, std::vector<double>(12)))),
       {},
       {"tensor '0.weight'", "float64 array of shape (4, 3)", "float32 of shape (4, 3)"}},
      {"float_count",
       npz("float_count", NpzWith("1.num_batches_tracked",
                                  NpyArray::Float32("1.num_batches_tracked", {}, {12.0f}))),
       {},
       {"tensor '1.num_batches_tracked'", "int64 of shape ()"}},
      {"nan",
       npz("nan", NpzWith("0.bias", NpyArray::Float32("0.bias", {4}, nan_bias))),
       {},
       {"0.bias.npy", "0.bias[2]", "not finite"}},
      {"inf",
       npz("inf", NpzWith("0.weight", NpyArray::Float32("0.weight", {4, 3}, inf_weight))),
       {},
       {"0.weight.npy", "0.weight[1, 0]", "not finite"}},
      {"negative_variance",
       npz("negative_variance",
           NpzWith("1.running_var",
                   NpyArray::Float32("1.running_var", {4}, {1.0f, -0.5f, 1.0f, 1.0f}))),
       {},
       {"running variance", "element 1 of 4 (1.running_var in an export)"}},
      {"count_past_2_53",
       npz("count", NpzWith("1.num_batches_tracked",
                            NpyArray::Int64("1.num_batches_tracked", {}, {INT64_MAX}))),
       {},
       {"1.num_batches_tracked: value 9223372036854775807 is too large", "beyond 2^53"}},
      {"huge",
       ShortMember(dir, "huge.npz", "0.weight.npy", "1099511627776, 3", 16),
       {},
       {"tensor '0.weight'", "shape (1099511627776, 3) in the file, the model wants (4, 3)"}},
      {"short_member",
       ShortMember(dir, "short.npz", "3.weight.npy", "3, 4", 20),
       {},
       {"3.weight.npy", "truncated", "needs 48 bytes"}},
      {"truncated",
       npz("truncated", NpzBytes(GoodArrays()).substr(0, 700)),
       {},
       {"not a valid zip archive"}},
      {"damaged", npz("damaged", Damaged()), {}, {"3.bias.npy", "damaged"}},
      {"not_a_zip", dir.Write("text.npz", std::string(300, 'x')), {}, {"not a valid zip archive"}},
      {"with_resume", good, {"--resume", good}, {"--init-from " + good + " and --resume " + good}},
      {"with_init", good, {"--init", "he"}, {"--init", "does not apply with --init-from"}},
  };
}

// A run of 0 steps needs --init-from and --save, takes no --checkpoint, and refuses a bad file
// as a training run does, saving nothing.
TEST(InitFrom, ZeroStepsSavesTheWeightsOrNothing) {
  TempDir dir;
  const std::string data = dir.Write("d.csv", ThreeFeaturesCsv(60, 5));
  const std::string save = dir.File("out.bin");
  const std::vector<std::string> run = {"train", "--data", data,  "--model", kBnMlp, "--loss",
                                        "xent",  "--lr",   "0.1", "--steps", "0"};
  const std::string good = dir.Write("good.npz", NpzBytes(GoodArrays()));
  struct Case {
    std::vector<std::string> flags, says;
  };
  const std::vector<Case> cases = {
      {{"--save", save}, {"--steps: 0 needs --init-from W.npz and --save M.bin"}},
      {{"--init-from", good}, {"--steps: 0 needs --init-from W.npz and --save M.bin"}},
      {{"--init-from", good, "--save", save, "--checkpoint", dir.File("c.bin")},
       {"--checkpoint: does not apply with --steps 0"}},
      {{"--init-from", Refusals(dir)[2].file, "--save", save}, Refusals(dir)[2].message},
  };
  for (const Case& c : cases) {
    const ProcResult r = Shm(Cat(run, c.flags));
    EXPECT_TRUE(ExitedWith(r, 2)) << c.flags.back();
    for (const std::string& m : c.says) EXPECT_TRUE(Contains(r.err, m)) << m << "\n" << r.err;
    EXPECT_FALSE(test::FileExists(save));
  }
  const ProcResult r = Shm(Cat(run, {"--init-from", good, "--save", save}));
  ASSERT_TRUE(ExitedWith(r, 0));
  EXPECT_TRUE(Contains(r.err + r.out, "done: 0 steps, loss ")) << r.err << r.out;
  EXPECT_TRUE(test::FileExists(save));
}

TEST(InitFrom, RefusesBadFilesBeforeTheRunStarts) {
  TempDir dir;
  const std::string data = dir.Write("d.csv", ThreeFeaturesCsv(60, 5));
  const std::string save = dir.File("out.bin"), checkpoint = dir.File("ckpt.bin");
  const std::vector<std::string> run = {
      "train",  "--workers", "2",    "--data",       data,      "--model", kBnMlp,
      "--loss", "xent",      "--lr", "0.1",          "--steps", "3",       "--batch",
      "16",     "--save",    save,   "--checkpoint", checkpoint};
  // The control: the good file starts a run, which writes both.
  const std::string good = dir.Write("control.npz", NpzBytes(GoodArrays()));
  ASSERT_TRUE(ExitedWith(Shm(Cat(run, {"--init-from", good, "--checkpoint-every", "1"})), 0));
  ASSERT_TRUE(test::FileExists(save) && test::FileExists(checkpoint));
  std::filesystem::remove(save);
  std::filesystem::remove(checkpoint);
  for (const Refusal& c : Refusals(dir)) {
    SCOPED_TRACE(c.name);
    const ProcResult r = Shm(Cat(Cat(run, {"--init-from", c.file}), c.extra));
    EXPECT_TRUE(ExitedWith(r, 2));
    EXPECT_TRUE(Contains(r.err, c.file)) << r.err;
    for (const std::string& m : c.message) EXPECT_TRUE(Contains(r.err, m)) << m << "\n" << r.err;
    EXPECT_FALSE(test::FileExists(save));
    EXPECT_FALSE(test::FileExists(checkpoint));
    EXPECT_EQ(r.out, "");           // nothing trained: no step, no summary
    std::filesystem::remove(save);  // a failure here does not spill into the next case
    std::filesystem::remove(checkpoint);
  }
}

// ---------------------------------------------------------------------------------------------
// PyTorch's loss.

bool TorchImports() {
  return test::RunProcess({"/usr/bin/env", "-u", "OPENBLAS_CORETYPE", "-u", "OPENBLAS_L2_SIZE",
                           kNumpyPython, "-c", "import torch"},
                          kTimeout)
             .exit_code == 0;
}

double ToDouble(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  EXPECT_TRUE(!s.empty() && end != s.c_str()) << "not a number: '" << s << "'";
  return v;
}

// The loss of the step-0 event of a json run.
double FirstLoss(const ProcResult& r) {
  for (const auto& e : test::Events(r.out, "step")) {
    if (e.at("step") == "0") return ToDouble(e.at("loss"));
  }
  ADD_FAILURE() << "no step 0 in:\n" << test::Clip(r.out);
  return NAN;
}

TEST(InitFrom, FirstLossIsPyTorchs) {
  if (!TorchImports()) {
    GTEST_SKIP() << "python3-torch is not installed (" << kNumpyPython
                 << " -c 'import torch' fails); the project never installs it";
  }
  TempDir dir;
  const std::string data = dir.Write("images.csv", test::Images().Csv());
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"mlp", {"--layers", "36,16,3", "--activation", "tanh"}},
      {"cnn", {"--model", kCnn, "--input-shape", "1,6,6"}}};
  for (const auto& [name, model] : cases) {
    SCOPED_TRACE(name);
    const std::string npz = dir.File(name + ".npz");
    const ProcResult py =
        test::RunProcess({"/usr/bin/env", "-u", "OPENBLAS_CORETYPE", "-u", "OPENBLAS_L2_SIZE",
                          kNumpyPython, kTorchScript, name, data, npz},
                         kTimeout);
    ASSERT_TRUE(ExitedWith(py, 0));
    const double torch_loss = ToDouble(py.out);
    // Plain SGD, one full batch (no --batch: every row, no shuffling), no normalisation: the
    // first step's loss is the network's on all the rows before any update.
    const ProcResult r =
        test::RunProcess(Cat({SHMTRAIN_BIN,   "train", "--no-metrics", "--no-progress",
                              "--log-format", "json",  "--log-every",  "1",
                              "--workers",    "2",     "--data",       data,
                              "--loss",       "xent",  "--lr",         "0.1",
                              "--steps",      "1",     "--init-from",  npz},
                             model),
                         kTimeout);
    ASSERT_TRUE(ExitedWith(r, 0));
    const double loss = FirstLoss(r);
    std::printf("%s: PyTorch's loss %.17g, shmtrain's %.17g, relative difference %.3g\n",
                name.c_str(), torch_loss, loss, std::fabs(loss - torch_loss) / torch_loss);
    EXPECT_NEAR(loss, torch_loss, 1e-5 * torch_loss);
  }
}

}  // namespace
}  // namespace shmtrain
