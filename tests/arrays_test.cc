// IDX and NumPy data (data/arrays.h) and Fashion-MNIST from its Debian package.
//
// The array files are written by numpy itself (tests/make_arrays.py, run with Debian's
// python3 and python3-numpy), so the loaders are held to the files numpy really writes:
// np.save, np.savez (zip64 local headers), np.savez_compressed (deflate), Fortran order, big-
// endian and object arrays. Fashion-MNIST is read where the package puts it; without the
// package these tests fail with a message naming it, never skip.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "gtest/gtest.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::ExitedWith;
using test::ProcResult;

constexpr const char* kBin = SHMTRAIN_BIN;
constexpr const char* kPython = NUMPY_PYTHON;
constexpr const char* kMakeArrays = MAKE_ARRAYS_PY;
const std::string kFashion = "/usr/share/datasets/fashion-mnist/";
constexpr milliseconds kRunTimeout{600'000};  // TSan trains Fashion-MNIST slowly

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The arrays, written once for the whole file: "same" (the first 1000 training images in every
// form) and "bad" (files to refuse).
class Arrays : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    ASSERT_TRUE(test::FileExists(kFashion + "train-images-idx3-ubyte.gz"))
        << "Fashion-MNIST is not installed: apt-get install dataset-fashion-mnist (or run "
           "scripts/install-deps.sh)";
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"same", Same(""), "1000"}, {"bad", Bad("")}}) {
      std::vector<std::string> argv = {kPython, kMakeArrays};
      argv.insert(argv.end(), args.begin(), args.end());
      const ProcResult r = test::RunProcess(argv, milliseconds{120'000});
      ASSERT_TRUE(ExitedWith(r, 0)) << "tests/make_arrays.py needs Debian's python3-numpy "
                                       "(scripts/install-deps.sh installs it)";
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Same(const std::string& name) { return dir_->File("same/" + name); }
  static std::string Bad(const std::string& name) { return dir_->File("bad/" + name); }

  static test::TempDir* dir_;
};
test::TempDir* Arrays::dir_ = nullptr;

data::LoadOptions Classify(const std::string& labels = "", const std::string& x = "x",
                           const std::string& y = "y") {
  data::LoadOptions o;
  o.task = Task::kClassification;
  o.file.arrays.labels_path = labels;
  o.file.arrays.x_key = x;
  o.file.arrays.y_key = y;
  return o;
}

// ---- the loaders ----

TEST_F(Arrays, EveryFormatLoadsTheSameDataset) {
  data::Dataset ref;
  ASSERT_TRUE(data::LoadFile(Same("x-idx3-ubyte"), Classify(Same("y-idx1-ubyte")), &ref).ok());
  ASSERT_EQ(ref.rows, 1000);
  ASSERT_EQ(ref.features, 784);
  ASSERT_EQ(ref.classes.List(), "0, 1, 2, 3, 4, 5, 6, 7, 8, 9");
  struct Case {
    std::string data;
    data::LoadOptions opts;
  };
  const std::vector<Case> cases = {
      {Same("x-idx3-ubyte.gz"), Classify(Same("y.npy"))},       // gzip IDX, .npy labels
      {Same("xf32.idx"), Classify(Same("y-idx1-ubyte"))},      // big-endian float32 IDX
      {Same("x.npy"), Classify(Same("y.npy"))},                // uint8 (n, 28, 28)
      {Same("xf32.npy"), Classify(Same("yi64.npy"))},          // float32 (n, 784), int64 (n, 1)
      {Same("xf64.npy"), Classify(Same("y-idx1-ubyte"))},      // float64
      {Same("xy.npz"), Classify()},                            // np.savez: x and y
      {Same("xyc.npz"), Classify("", "images", "labels")},     // np.savez_compressed
      {Same("x.npy"), Classify(Same("xyc.npz"), "x", "labels")},  // labels from an .npz
      {Same("xy.csv"), Classify()},                            // CSV: header, label last
  };
  for (const Case& c : cases) {
    data::Dataset d;
    const Status s = data::LoadFile(c.data, c.opts, &d);
    ASSERT_TRUE(s.ok()) << c.data << ": " << s.message();
    EXPECT_EQ(d.rows, ref.rows) << c.data;
    EXPECT_EQ(d.features, ref.features) << c.data;
    EXPECT_TRUE(d.x == ref.x) << c.data << ": features differ";
    EXPECT_TRUE(d.y == ref.y) << c.data << ": labels differ";
    EXPECT_EQ(d.classes.names, ref.classes.names) << c.data;
  }
}

TEST_F(Arrays, RegressionTargetsAndPredictData) {
  data::LoadOptions reg;
  reg.file.arrays.labels_path = Same("y.npy");
  data::Dataset d;
  ASSERT_TRUE(data::LoadFile(Same("x.npy"), reg, &d).ok());
  data::Dataset c;
  ASSERT_TRUE(data::LoadFile(Same("x.npy"), Classify(Same("y.npy")), &c).ok());
  EXPECT_TRUE(d.y == c.y) << "labels 0..9 are their own class indices and values";
  EXPECT_EQ(d.classes.size(), 0);
  data::LoadOptions predict;
  predict.no_labels = true;  // predict: no labels needed
  data::Dataset p;
  ASSERT_TRUE(data::LoadFile(Same("x-idx3-ubyte"), predict, &p).ok());
  EXPECT_EQ(p.rows, 1000);
  EXPECT_TRUE(p.y.empty());
}

// The size of the good gzip file the garbage follows: where the garbage starts.
std::string GzSize(const std::string& dir) {
  return std::to_string(std::filesystem::file_size(dir + "/x4-idx3-ubyte.gz"));
}

// Each refused file: the message starts with the file it is about and says what is wrong.
TEST_F(Arrays, BadFilesNameTheFileAndTheFault) {
  const auto GzSize = [] { return shmtrain::GzSize(Bad("")); };
  struct Case {
    std::string data, labels, x = "x", y = "y";
    std::string file;  // the file the message must start with
    std::string what;
  };
  const std::vector<Case> cases = {
      {"magic-idx3-ubyte", "y4-idx1-ubyte", "x", "y", "magic-idx3-ubyte", "wrong magic number 0x00000703"},
      {"short-idx3-ubyte", "y4-idx1-ubyte", "x", "y", "short-idx3-ubyte", "truncated"},
      {"cut-idx3-ubyte.gz", "y4-idx1-ubyte", "x", "y", "cut-idx3-ubyte.gz", "truncated"},
      {"x4-idx3-ubyte", "y3-idx1-ubyte", "x", "y", "y3-idx1-ubyte", "count mismatch: 3 labels, but"},
      {"x4-idx3-ubyte", "", "x", "y", "x4-idx3-ubyte", "--labels"},
      {"fortran.npy", "y4.npy", "x", "y", "fortran.npy", "Fortran order"},
      {"bigendian.npy", "y4.npy", "x", "y", "bigendian.npy", "big-endian"},
      {"object.npy", "y4.npy", "x", "y", "object.npy", "object array"},
      {"text.npy", "y4.npy", "x", "y", "text.npy", "holds text"},
      {"complex.npy", "y4.npy", "x", "y", "complex.npy", "dtype '<c8' is not supported"},
      {"structured.npy", "y4.npy", "x", "y", "structured.npy", "structured dtypes"},
      {"nan.npy", "y4.npy", "x", "y", "nan.npy", "row 1, feature 1 (0-based): value nan is not finite"},
      {"x4.npy", "y3.npy", "x", "y", "y3.npy", "count mismatch: 3 labels, but"},
      {"x4.npy", "y2d.npy", "x", "y", "y2d.npy", "shape (n,) or (n, 1)"},
      {"truncated.npy", "y4.npy", "x", "y", "truncated.npy", "truncated"},
      {"longer.npy", "y4.npy", "x", "y", "longer.npy", "followed by more bytes"},
      {"notnpy.npy", "y4.npy", "x", "y", "notnpy.npy", "no \\x93NUMPY magic"},
      {"noy.npz", "", "x", "y", "noy.npz", "no array 'y' (its arrays: x, labels"},
      {"noy.npz", "", "images", "y", "noy.npz", "no array 'images'"},
      {"damaged.npz", "", "x", "y", "damaged.npz (x.npy)", "CRC-32"},
      {"cut.npz", "", "x", "y", "cut.npz", "not a valid zip archive"},
      // Shapes whose products overflow 64 bits, with or without a zero among them.
      {"dims62.npy", "y4.npy", "x", "y", "dims62.npy", "(4611686018427387904, 4) is too large"},
      {"zero62.npy", "y4.npy", "x", "y", "zero62.npy", "(0, 4611686018427387904, 4) is too large"},
      {"dims40.npy", "y4.npy", "x", "y", "dims40.npy", "is too large"},
      {"big-idx3-ubyte", "y4-idx1-ubyte", "x", "y", "big-idx3-ubyte", "is too large"},
      // gzip as `gzip -t` reads it: nothing after the last member, every error with its byte.
      {"garbage-idx3-ubyte.gz", "y4-idx1-ubyte", "x", "y", "garbage-idx3-ubyte.gz",
       "trailing garbage after the gzip stream at byte " + GzSize()},
      {"zerosjunk-idx3-ubyte.gz", "y4-idx1-ubyte", "x", "y", "zerosjunk-idx3-ubyte.gz",
       "trailing garbage after the gzip stream at byte " + GzSize()},
      {"damaged-idx3-ubyte.gz", "y4-idx1-ubyte", "x", "y", "damaged-idx3-ubyte.gz",
       "damaged gzip data at byte "},
      {"cut-idx3-ubyte.gz", "y4-idx1-ubyte", "x", "y", "cut-idx3-ubyte.gz",
       "truncated: the gzip stream ends at byte 49, inside its compressed data"},
      // numpy reads the last of two members named alike, a zip reader often the first.
      {"twice.npz", "", "x", "y", "twice.npz",
       "two members named 'x.npy' (entries 1 and 3): ambiguous"},
      // Inflation stops at the size the zip directory states, not at the deflate stream's end.
      {"inflates.npz", "", "x", "y", "inflates.npz (x.npy)",
       "damaged: it inflates past the 1000 bytes the archive states for it"},
      {"blocktype.npz", "", "x", "y", "blocktype.npz (x.npy)",
       "damaged compressed data at byte 35 of the archive: invalid block type"},
  };
  for (const Case& c : cases) {
    data::Dataset d;
    const Status s = data::LoadFile(Bad(c.data), Classify(c.labels.empty() ? "" : Bad(c.labels), c.x, c.y), &d);
    if (s.ok()) {
      ADD_FAILURE() << c.data << " was accepted";
      continue;
    }
    EXPECT_EQ(s.code(), Status::Code::kData) << s.message();
    EXPECT_EQ(s.message().rfind(Bad(c.file), 0), 0u) << "does not start with " << c.file << ": " << s.message();
    EXPECT_TRUE(Has(s.message(), c.what)) << "no '" << c.what << "' in: " << s.message();
    EXPECT_FALSE(Has(s.message(), "<fd:")) << "names a descriptor, not the file: " << s.message();
  }
}

// RFC 1952 allows several gzip members one after another, and gzip reads them as one stream
// (and zero padding after them as nothing).
TEST_F(Arrays, ConcatenatedGzipMembersReadAsOneStream) {
  data::Dataset one, two;
  ASSERT_TRUE(data::LoadFile(Bad("x4-idx3-ubyte"), Classify(Bad("y4-idx1-ubyte")), &one).ok());
  const Status s = data::LoadFile(Bad("two-idx3-ubyte.gz"), Classify(Bad("y4-idx1-ubyte")), &two);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(two.rows, 4);
  EXPECT_TRUE(two.x == one.x);
  // Zero bytes after the last member are padding, as to gzip.
  data::Dataset padded;
  const Status z =
      data::LoadFile(Bad("zeros-idx3-ubyte.gz"), Classify(Bad("y4-idx1-ubyte")), &padded);
  ASSERT_TRUE(z.ok()) << z.message();
  EXPECT_TRUE(padded.x == one.x);
}

// One element whose size is only known as it arrives (a deflated member): the room made for it
// grows to exactly one element (it once halved 1 for ever).
TEST_F(Arrays, OneElementArriving) {
  data::Dataset d;
  data::LoadOptions o = Classify();
  o.task = Task::kRegression;  // one row has one class
  const Status s = data::LoadFile(Bad("one.npz"), o, &d);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(d.rows, 1);
  EXPECT_EQ(d.x, std::vector<float>{1.0f});
}

// ---- the command line ----

std::vector<std::string> Cmd(std::vector<std::string> args) {
  if (args[0] == "train") args.insert(args.begin() + 1, {"--no-metrics", "--no-progress"});
  args.insert(args.begin(), kBin);
  return args;
}

ProcResult Shm(const std::vector<std::string>& args) {
  const ProcResult r = test::RunProcess(Cmd(args), kRunTimeout);
  EXPECT_EQ(test::SegmentsOf(r.pid), std::vector<std::string>()) << "segments left by " << r.pid;
  return r;
}

#ifdef SHMTRAIN_SANITIZED
constexpr bool kSanitized = true;  // its shadow memory is terabytes of address space
#else
constexpr bool kSanitized = false;
#endif

// A refusal must cost little memory whatever the file declares: the child runs under a hard
// address-space limit (not when sanitized), and its own peak resident size is bounded.
constexpr rlim_t kAddressLimit = rlim_t{1} << 30;
constexpr long kPeakKib = 200 * 1024;

struct Bounded {
  int exit_code = -1;  // -1: it did not exit (a signal, or the deadline)
  std::string err;
  long peak_kib = 0;  // ru_maxrss of this child alone (wait4), not of the test's other children
};

Bounded RunBounded(const std::vector<std::string>& args, const std::string& err_file,
                   rlim_t address_limit = kAddressLimit) {
  std::vector<std::string> argv = Cmd(args);
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_RDWR);
    const int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (null < 0 || err < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(err, 2) < 0) {
      _exit(127);
    }
    const rlimit as{address_limit, address_limit};
    if (!kSanitized && setrlimit(RLIMIT_AS, &as) != 0) _exit(127);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  Bounded b;
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return b;
  }
  const auto deadline = test::Clock::now() + kRunTimeout;
  int status = 0;
  rusage ru{};
  pid_t r = 0;
  while ((r = wait4(pid, &status, WNOHANG, &ru)) == 0 && test::Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds{10});
  }
  if (r == 0) {
    kill(pid, SIGKILL);
    wait4(pid, &status, 0, &ru);
    ADD_FAILURE() << args[0] << " outlived its deadline";
  }
  b.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  b.peak_kib = ru.ru_maxrss;
  b.err = test::ReadWholeFile(err_file);
  EXPECT_EQ(test::SegmentsOf(pid), std::vector<std::string>()) << "segments left by " << pid;
  return b;
}

// The acceptance run: Fashion-MNIST from the package's IDX files, sync P = 2, 3 epochs, to
// >= 85% test accuracy (measured 86.4%); eval of the saved model on the test files agrees.
TEST_F(Arrays, FashionMnistFromIdxReaches85Percent) {
  SHMTRAIN_CONVERGENCE_TEST();
  const std::string model = dir_->File("fashion.bin");
  const ProcResult r = Shm(
      {"train", "--workers", "2", "--data", kFashion + "train-images-idx3-ubyte.gz", "--labels",
       kFashion + "train-labels-idx1-ubyte.gz", "--val-data", kFashion + "t10k-images-idx3-ubyte.gz",
       "--val-labels", kFashion + "t10k-labels-idx1-ubyte.gz", "--layers", "784,64,10",
       "--activation", "relu", "--loss", "xent", "--normalize", "standard", "--batch", "128",
       "--lr", "0.01", "--momentum", "0.9", "--epochs", "3", "--log-every", "0",
       "--log-format", "json", "--save", model});
  ASSERT_TRUE(ExitedWith(r, 0));
  const std::string s = test::SummaryOf(r);
  EXPECT_GE(test::Num(s, "val_accuracy"), 0.85) << s;
  const ProcResult e = Shm({"eval", "--model", model, "--data", kFashion + "t10k-images-idx3-ubyte.gz",
                            "--labels", kFashion + "t10k-labels-idx1-ubyte.gz", "--log-format", "json"});
  ASSERT_TRUE(ExitedWith(e, 0));
  EXPECT_EQ(test::JsonField(test::SplitLines(e.out).back(), "accuracy"),
            test::JsonField(s, "val_accuracy")) << e.out << "\n" << s;
}

// The same arrays as IDX, .npy, .npz (stored and deflated) and CSV train byte-identical models.
TEST_F(Arrays, EveryFormatTrainsTheSameModel) {
  const std::vector<std::vector<std::string>> inputs = {
      {"--data", Same("x-idx3-ubyte"), "--labels", Same("y-idx1-ubyte")},
      {"--data", Same("x-idx3-ubyte.gz"), "--labels", Same("y-idx1-ubyte")},
      {"--data", Same("x.npy"), "--labels", Same("y.npy")},
      {"--data", Same("xf64.npy"), "--labels", Same("yi64.npy")},
      {"--data", Same("xy.npz")},
      {"--data", Same("xyc.npz"), "--npz-x", "images", "--npz-y", "labels"},
      {"--data", Same("xy.csv")},
  };
  std::string first;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string model = dir_->File("m" + std::to_string(i) + ".bin");
    std::vector<std::string> a = {"train", "--workers", "2", "--layers", "784,16,10", "--activation",
                                  "relu", "--loss", "xent", "--normalize", "minmax", "--batch", "100",
                                  "--lr", "0.05", "--momentum", "0.9", "--epochs", "2",
                                  "--log-every", "0", "--save", model};
    a.insert(a.end(), inputs[i].begin(), inputs[i].end());
    ASSERT_TRUE(ExitedWith(Shm(a), 0)) << inputs[i][1];
    const std::string bytes = test::ReadWholeFile(model);
    if (i == 0) first = bytes;
    EXPECT_TRUE(!bytes.empty() && bytes == first) << inputs[i][1] << " trained another model";
  }
}

// A convolutional network takes its input shape from the file: IDX images and (n, 28, 28)
// arrays are 1x28x28, flat CSV rows become images with --input-shape; all train the same bits.
// Its first layer (one input channel, 16 outputs) runs the direct convolution.
TEST_F(Arrays, EveryFormatGivesAConvolutionItsImages) {
  const std::vector<std::vector<std::string>> inputs = {
      {"--data", Same("x-idx3-ubyte.gz"), "--labels", Same("y-idx1-ubyte")},
      {"--data", Same("x.npy"), "--labels", Same("y.npy")},
      {"--data", Same("xy.npz")},
      {"--data", Same("xy.csv"), "--input-shape", "1,28,28"},
  };
  std::string first;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string model = dir_->File("c" + std::to_string(i) + ".bin");
    std::vector<std::string> a = {"train", "--workers", "2", "--model",
                                  "conv2d(16,5,stride=2),relu,maxpool2d(2),flatten,linear(10)",
                                  "--loss", "xent", "--normalize", "minmax", "--batch", "100",
                                  "--lr", "0.05", "--momentum", "0.9", "--epochs", "2",
                                  "--log-every", "0", "--log-format", "json", "--save", model};
    a.insert(a.end(), inputs[i].begin(), inputs[i].end());
    const ProcResult r = Shm(a);
    ASSERT_TRUE(ExitedWith(r, 0)) << inputs[i][1] << "\n" << r.err;
    // It learnt something: chance is a loss of ln 10 = 2.30.
    EXPECT_LT(test::Num(test::SummaryOf(r), "final_loss"), 1.5) << inputs[i][1];
    const std::string bytes = test::ReadWholeFile(model);
    if (i == 0) first = bytes;
    EXPECT_TRUE(!bytes.empty() && bytes == first) << inputs[i][1] << " trained another model";
  }
  // Without --input-shape the CSV's rows are flat: the convolution is refused, named.
  const ProcResult flat = Shm({"train", "--data", Same("xy.csv"), "--model", "conv2d(16,5),flatten,linear(10)",
                               "--loss", "xent", "--lr", "0.1", "--steps", "1"});
  EXPECT_TRUE(ExitedWith(flat, 2));
  EXPECT_TRUE(Has(flat.err, "conv2d #1 (layer 1)")) << flat.err;
}

// Refusals through the CLI: exit 2, the file named, nothing left behind.
TEST_F(Arrays, BadFilesExitTwoNamingTheFile) {
  const std::vector<std::vector<std::string>> cases = {
      {"--data", Bad("magic-idx3-ubyte"), "--labels", Bad("y4-idx1-ubyte")},
      {"--data", Bad("short-idx3-ubyte"), "--labels", Bad("y4-idx1-ubyte")},
      {"--data", Bad("x4-idx3-ubyte"), "--labels", Bad("y3-idx1-ubyte")},
      {"--data", Bad("fortran.npy"), "--labels", Bad("y4.npy")},
      {"--data", Bad("object.npy"), "--labels", Bad("y4.npy")},
      {"--data", Bad("damaged.npz")},
  };
  for (const std::vector<std::string>& c : cases) {
    std::vector<std::string> a = {"train", "--layers", "4,2", "--loss", "xent", "--lr", "0.1",
                                  "--epochs", "1"};
    a.insert(a.end(), c.begin(), c.end());
    const ProcResult r = Shm(a);
    EXPECT_TRUE(ExitedWith(r, 2)) << c[1];
    const std::string named = c.size() > 2 && Has(c[3], "y3") ? c[3] : c[1];
    EXPECT_TRUE(Has(r.err, named)) << r.err;
  }
  const ProcResult csv = Shm({"train", "--layers", "784,2", "--loss", "xent", "--lr", "0.1",
                              "--epochs", "1", "--data", Same("xy.csv"), "--labels", Same("y.npy")});
  EXPECT_TRUE(ExitedWith(csv, 2));
  EXPECT_TRUE(Has(csv.err, "--labels applies to IDX and NumPy data")) << csv.err;
  const ProcResult col = Shm({"train", "--layers", "784,2", "--loss", "xent", "--lr", "0.1",
                              "--epochs", "1", "--data", Same("x.npy"), "--labels", Same("y.npy"),
                              "--label-col", "3"});
  EXPECT_TRUE(ExitedWith(col, 2));
  EXPECT_TRUE(Has(col.err, "--label-col applies to CSV files; this is NumPy data")) << col.err;
  const ProcResult val = Shm({"train", "--layers", "784,2", "--loss", "xent", "--lr", "0.1",
                              "--epochs", "1", "--data", Same("xy.npz"), "--val-labels", Same("y.npy")});
  EXPECT_TRUE(ExitedWith(val, 2));
  EXPECT_TRUE(Has(val.err, "--val-labels: applies with --val-data FILE only")) << val.err;
}

// A model of 4 inputs and 2 classes, trained once, for eval and predict.
std::string SmallModel(const test::TempDir& dir, const std::string& bad) {
  const std::string model = dir.File("small.bin");
  if (!test::FileExists(model)) {
    const ProcResult r =
        Shm({"train", "--layers", "4,2", "--loss", "xent", "--lr", "0.1", "--epochs", "1", "--data",
             bad + "x4-idx3-ubyte", "--labels", bad + "y4-idx1-ubyte", "--save", model});
    EXPECT_TRUE(ExitedWith(r, 0));
  }
  return model;
}

// Files that declare far more than they hold (or than the model takes) are refused before
// memory is spent on the declaration: exit 2, the file and the fault named, a small peak.
TEST_F(Arrays, DeclaredSizesAreCheckedBeforeMemoryIsSpent) {
  const std::string model = SmallModel(*dir_, Bad(""));
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> what;
    // The memory check counts the room under this limit: a file it reads must fit there.
    rlim_t address_limit = kAddressLimit;
  };
  const std::vector<Case> cases = {
      {{"predict", "--model", model, "--data", Bad("declares8.npy")},
       {Bad("declares8.npy") +
        ": truncated: the data of a float32 array of shape (100000000, 4) "
        "needs 1600000000 bytes, the file has only 64 more (it ends at byte 192)"}},
      {{"eval", "--model", model, "--data", Bad("declares9.npy")},
       {Bad("declares9.npy") + ": truncated: the data of a float32 array of shape (1000000000, 4) "
                               "needs 16000000000 bytes"}},
      {{"predict", "--model", model, "--data", Bad("declares-idx3-ubyte.gz")},
       {Bad("declares-idx3-ubyte.gz") + ": truncated: the data of a uint8 array of shape "
                                        "(100000000, 2, 2) needs 400000000 bytes, the rest of this",
        "deflate yields at most 1032 bytes per byte"}},
      // Within deflate's reach, so read: memory grows only with the megabyte that arrives.
      {{"predict", "--model", model, "--data", Bad("rows-idx3-ubyte.gz")},
       {Bad("rows-idx3-ubyte.gz") + ": truncated: uint8 array of shape (100000000, 2, 2)",
        "the file ends before element 1048577"},
       rlim_t{4} << 30},
      {{"train", "--layers", "4,2", "--loss", "xent", "--lr", "0.1", "--epochs", "1", "--data",
        Bad("wide-idx2-ubyte.gz"), "--labels", Bad("y10-idx1-ubyte")},
       {"--layers: the first size is 4 but " + Bad("wide-idx2-ubyte.gz") +
        " has 8000000 features"}},
      {{"predict", "--model", model, "--data", Bad("inflates.npz")},
       {Bad("inflates.npz") +
        " (x.npy): damaged: it inflates past the 1000 bytes the archive states"}},
  };
  for (const Case& c : cases) {
    const std::string& data = *(std::find(c.args.begin(), c.args.end(), "--data") + 1);
    const Bounded r = RunBounded(c.args, dir_->File("err.txt"), c.address_limit);
    EXPECT_EQ(r.exit_code, 2) << data << ": " << r.err;
    for (const std::string& w : c.what) {
      EXPECT_TRUE(Has(r.err, w)) << "no '" << w << "' in: " << r.err;
    }
    EXPECT_LT(r.peak_kib, kPeakKib) << data << " peaked at " << r.peak_kib << " KiB";
  }
}

// MemAvailable of /proc/meminfo in bytes.
uint64_t MemAvailableNow() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (f >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    f.ignore(64, '\n');
  }
  return 0;
}

// eval and predict make train's memory check: data the machine cannot hold is refused, with
// what it needs, before a row is read. The file is sparse: twice the memory, no disk.
TEST_F(Arrays, EvalAndPredictRefuseDataBeyondMemory) {
  const std::string model = SmallModel(*dir_, Bad(""));
  const uint64_t avail = MemAvailableNow();
  ASSERT_GT(avail, 0u);
  const int64_t rows = static_cast<int64_t>(avail * 2 / 16 + 1);
  const std::string path =
      test::SparseNpy(*dir_, "huge.npy", "<f4", std::to_string(rows) + ", 4", rows * 16);
  const std::string labels =
      test::SparseNpy(*dir_, "huge-y.npy", "|u1", std::to_string(rows) + ",", rows);
  for (const char* cmd : {"eval", "predict"}) {
    std::vector<std::string> a = {cmd, "--model", model, "--data", path};
    if (std::string(cmd) == "eval") a.insert(a.end(), {"--labels", labels});
    const Bounded r = RunBounded(a, dir_->File("err.txt"));
    EXPECT_EQ(r.exit_code, 4) << cmd << ": " << r.err;
    EXPECT_TRUE(Has(r.err, path + ": the run needs about ")) << r.err;
    EXPECT_TRUE(Has(r.err, "(" + std::to_string(rows) + " rows x 4 features)")) << r.err;
    EXPECT_TRUE(Has(r.err, " is available")) << r.err;
    EXPECT_LT(r.peak_kib, kPeakKib) << cmd << " peaked at " << r.peak_kib << " KiB";
  }
  std::filesystem::remove(path);
  std::filesystem::remove(labels);
}

// Memory the process's own address-space limit refuses although the data fits MemAvailable
// is the resource error it is, exit 4, naming the limit before a row is read (the memory
// check counts the room left under it), not an escaped bad_alloc.
TEST_F(Arrays, MemoryTheSystemRefusesIsAResourceError) {
  if (kSanitized) GTEST_SKIP() << "a sanitized build cannot run under an address-space limit";
  const std::string model = SmallModel(*dir_, Bad(""));
  const int64_t rows = (int64_t{3} << 30) / 2 / 16;  // 1.5 GiB of float32, over the 1 GiB limit
  const std::string path =
      test::SparseNpy(*dir_, "big.npy", "<f4", std::to_string(rows) + ", 4", rows * 16);
  const Bounded r =
      RunBounded({"predict", "--model", model, "--data", path}, dir_->File("err.txt"));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(Has(r.err, path + ": the run needs about ")) << r.err;
  EXPECT_TRUE(Has(r.err, "left under the address-space limit (ulimit -v, RLIMIT_AS) of 1.0 GiB"))
      << r.err;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace shmtrain
