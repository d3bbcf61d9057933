// `shmtrain export --out M.onnx` (master/files/onnx_export.h) held to the tools people use:
// onnx.checker.check_model(full_check=True) (Debian's python3-onnx: tests/onnx/check_model.py)
// passes, and ONNX Runtime (npm's onnxruntime-node, installed into the build tree by the ctest
// fixture onnx.runtime: tests/onnx/install.sh) runs the model, through the snippet of
// docs/models.md ("Using a model elsewhere") as a user would, on the rows `shmtrain predict`
// reads: its outputs equal predict's to 1e-5 of the row's largest, and its accuracy is eval's.
//
// OnnxExport: every layer type in one model, the outputs' channel order, regressors, the names
// and metadata, on small data (tests/real_data.h). OnnxRuntime: the issue's networks on the full
// test sets: an MLP and cnn-small on Fashion-MNIST (Debian's dataset-fashion-mnist) and
// ResNet-20 on CIFAR-10's JPEG folders (../shared/data/cifar10-jpeg.tar.gz, skipped where it is
// absent), each trained a few steps: the test is the export, not the training.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "data/pipeline.h"
#include "gtest/gtest.h"
#include "master/files/export.h"
#include "master/files/model_file.h"
#include "nn/layer.h"
#include "tests/proc_util.h"
#include "tests/real_data.h"

namespace shmtrain {
namespace {

using test::ExitedWith;
using test::ProcResult;
using test::TempDir;

constexpr std::chrono::milliseconds kTimeout{300'000};
constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

ProcResult Shm(std::vector<std::string> args) {
  return test::Shmtrain(std::move(args), kTimeout);
}

// The JSON line of tests/onnx/check_model.py: the checker passed. Fails the test otherwise.
nlohmann::json Checked(const std::string& onnx) {
  const ProcResult r =
      test::RunProcess({NUMPY_PYTHON, ONNX_CHECK_PY, onnx}, std::chrono::milliseconds(120'000));
  EXPECT_TRUE(ExitedWith(r, 0)) << "onnx.checker (Debian's python3-onnx) refused " << onnx;
  if (r.exit_code != 0) return nlohmann::json::object();
  return nlohmann::json::parse(r.out);
}

// The first ```js block after "## Using a model elsewhere" in docs/models.md.
std::string DocsSnippet() {
  const std::string docs = test::ReadWholeFile(SHMTRAIN_SOURCE_DIR "/docs/models.md");
  const size_t section = docs.find("\n## Using a model elsewhere");
  const size_t start = docs.find("```js\n", section);
  const size_t end = docs.find("\n```", start + 6);
  EXPECT_TRUE(section != std::string::npos && start != std::string::npos &&
              end != std::string::npos)
      << "docs/models.md has no ```js block under \"Using a model elsewhere\"";
  if (end == std::string::npos) return "";
  return docs.substr(start + 6, end - start - 6 + 1);
}

// The rows of `data` as predict reads them for `model` (unscaled), raw float32 into `path`;
// their labels (class indices) into *labels.
void WriteRows(const std::string& model, const std::string& data, const DataFileOptions& file,
               const std::string& path, std::vector<float>* labels) {
  Model m;
  ASSERT_TRUE(LoadModel(model, &m).ok());
  data::Dataset d;
  const Status s = data::LoadForModel(data, file, m.spec, m.classes, model, true, &d);
  ASSERT_TRUE(s.ok()) << s.message();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(d.x.data()),
             static_cast<std::streamsize>(d.x.size() * sizeof(float)));
  *labels = d.y;
}

// ONNX Runtime on the rows: the docs' snippet, run from the runtime's directory (its
// node_modules), writing `outputs` floats a row.
std::vector<float> RunOnnxRuntime(const std::string& onnx, const std::string& rows,
                                  const TempDir& dir) {
  const std::string script =
      std::string(ONNX_RUNTIME_DIR) + "/predict-" + std::to_string(getpid()) + ".js";
  std::ofstream(script) << DocsSnippet();
  const std::string out = dir.File("ort.f32");
  const ProcResult r = test::RunProcess({NODE_BIN, script, onnx, rows, out}, kTimeout);
  std::remove(script.c_str());
  EXPECT_TRUE(ExitedWith(r, 0)) << "ONNX Runtime (the docs' snippet) on " << onnx;
  const std::string bytes = test::ReadWholeFile(out);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// predict's CSV against ONNX Runtime's outputs: the largest difference over the largest |value|
// of its row (classification: the probabilities), or of all rows (regression: a value near 0
// has no digits to spare). predict's last `outputs` cells; before them the path and the class.
double WorstRelative(const std::string& csv, const std::vector<float>& ort, int outputs,
                     bool per_row) {
  const std::vector<std::string> lines = test::SplitLines(csv);
  EXPECT_EQ((lines.size() - 1) * outputs, ort.size()) << "rows differ";
  double worst = 0, largest_of_all = 1e-30;
  for (size_t i = 1; i < lines.size() && i * outputs <= ort.size(); ++i) {
    std::vector<double> cells;
    size_t pos = lines[i].size();
    for (int k = 0; k < outputs; ++k) {
      const size_t comma = lines[i].rfind(',', pos - 1);
      const size_t from = comma == std::string::npos ? 0 : comma + 1;
      cells.insert(cells.begin(), std::stod(lines[i].substr(from, pos - from)));
      pos = comma == std::string::npos ? 0 : comma;
    }
    const float* o = ort.data() + (i - 1) * outputs;
    double largest = 1e-30, diff = 0;
    for (int k = 0; k < outputs; ++k) {
      largest = std::max(largest, std::fabs(cells[k]));
      diff = std::max(diff, std::fabs(cells[k] - o[k]));
    }
    largest_of_all = std::max(largest_of_all, largest);
    worst = std::max(worst, per_row ? diff / largest : diff);
  }
  return per_row ? worst : worst / largest_of_all;
}

// The accuracy of ONNX Runtime's probabilities (the first largest, as eval counts) as eval
// prints it ("%.4f").
std::string Accuracy(const std::vector<float>& p, const std::vector<float>& labels, int k) {
  int64_t right = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const float* row = p.data() + i * k;
    right += std::max_element(row, row + k) - row == static_cast<int64_t>(labels[i]);
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", static_cast<double>(right) / labels.size());
  return text;
}

struct Exported {
  std::string model, onnx;
  nlohmann::json checked;
};

// Trains `train` (args after "train") into dir/name.bin and exports it to dir/name.onnx.
Exported TrainAndExport(const TempDir& dir, const std::string& name,
                        std::vector<std::string> train) {
  Exported e{dir.File(name + ".bin"), dir.File(name + ".onnx"), {}};
  train.insert(train.begin(), "train");
  train.insert(train.end(), {"--save", e.model});
  const ProcResult t = Shm(train);
  EXPECT_TRUE(ExitedWith(t, 0)) << name;
  EXPECT_TRUE(ExitedWith(Shm({"export", "--model", e.model, "--out", e.onnx}), 0)) << name;
  e.checked = Checked(e.onnx);
  return e;
}

// ONNX Runtime against predict (1e-5 of each row's largest) and, classifying, eval's accuracy.
void ExpectPredictsAsPredict(const TempDir& dir, const Exported& e, const std::string& data,
                             const DataFileOptions& file, int outputs, bool classes) {
  std::vector<float> labels;
  WriteRows(e.model, data, file, dir.File("rows.f32"), &labels);
  const std::vector<float> ort = RunOnnxRuntime(e.onnx, dir.File("rows.f32"), dir);
  std::vector<std::string> with_labels;
  if (!file.arrays.labels_path.empty()) with_labels = {"--labels", file.arrays.labels_path};
  std::vector<std::string> predict = {"predict", "--model", e.model, "--data", data};
  const ProcResult p = Shm(predict);
  ASSERT_TRUE(ExitedWith(p, 0));
  const double worst = WorstRelative(p.out, ort, outputs, classes);
  std::printf("[ onnx ] %s: %zu rows, ONNX Runtime vs predict: %.3g of the largest %s\n",
              e.onnx.c_str(), labels.size(), worst, classes ? "probability" : "|value|");
  EXPECT_LE(worst, 1e-5) << e.onnx;
  if (!classes) return;
  std::vector<std::string> eval = {"eval", "--model", e.model, "--data", data};
  eval.insert(eval.end(), with_labels.begin(), with_labels.end());
  const ProcResult ev = Shm(eval);
  ASSERT_TRUE(ExitedWith(ev, 0));
  const std::string accuracy = Accuracy(ort, labels, outputs);
  std::printf("[ onnx ] ONNX Runtime's accuracy %s; eval: %s", accuracy.c_str(), ev.out.c_str());
  EXPECT_NE(ev.out.find("accuracy " + accuracy), std::string::npos) << ev.out;
}

// The float32 arrays of the .npz export of `model` (what the ONNX initializers are named after).
std::set<std::string> NpzFloatNames(const std::string& model) {
  Model m;
  EXPECT_TRUE(LoadModel(model, &m).ok());
  std::vector<data::NpyArray> arrays;
  EXPECT_TRUE(master::ExportArrays(m, model, &arrays).ok());
  std::set<std::string> names;
  for (const data::NpyArray& a : arrays) {
    if (a.descr == "<f4") names.insert(a.name);
  }
  return names;
}

TEST(OnnxExport, EveryLayerTypeBuildsItsNodes) {
  for (const nn::LayerType* t : nn::LayerTypes()) {
    EXPECT_NE(t->to_onnx, nullptr) << t->name << " has no to_onnx: it cannot be exported";
  }
}

// One model of every layer type (conv2d with and without bias, stride and padding; both pools;
// adaptive pooling to bins of two sizes; batch norm 2d and 1d; a residual block with a
// projection; every activation; dropout; flatten; linear), channel-scaled: the checker passes,
// the graph's names and metadata are the documented ones, and ONNX Runtime predicts as predict.
TEST(OnnxExport, EveryLayerIsCheckedAndRunsAsPredict) {
  const std::string csv = test::SmallFashionCsv();
  ASSERT_FALSE(csv.empty());
  TempDir dir;
  const Exported e = TrainAndExport(
      dir, "all",
      {"--data", csv, "--input-shape", "1,8,8", "--model",
       "conv2d(6,3,padding=1),batchnorm2d,relu,residual(conv2d(6,3,padding=1,bias=false),"
       "batchnorm2d,tanh|conv2d(6,1)),maxpool2d(2,stride=1),conv2d(8,3,stride=2,padding=1),"
       "sigmoid,avgpool2d(2,stride=1),adaptiveavgpool2d(2),flatten,dropout(0.2),linear(16),"
       "batchnorm1d,relu,linear(10)",
       "--loss", "xent", "--normalize", "channel", "--steps", "60", "--lr", "0.05", "--seed", "4"});
  const nlohmann::json& c = e.checked;
  EXPECT_EQ(c["ir_version"], 7);
  EXPECT_EQ(c["opsets"], nlohmann::json({{"ai.onnx", 13}}));
  EXPECT_EQ(c["inputs"], nlohmann::json({{"input", {"N", 1, 8, 8}}}));
  EXPECT_EQ(c["outputs"], nlohmann::json({{"probabilities", {"N", 10}}}));
  EXPECT_EQ(c["metadata"]["classes"], R"(["0","1","2","3","4","5","6","7","8","9"])");
  EXPECT_EQ(c["metadata"]["normalize"], "channel");
  // Every float array of the .npz export is an initializer of that name; besides them only the
  // adaptive pool's own constants (layer 8: its bins are not of one size).
  std::set<std::string> initializers;
  for (const auto& [name, dims] : c["initializers"].items()) {
    if (name.rfind("8.", 0) != 0) initializers.insert(name);
  }
  EXPECT_EQ(initializers, NpzFloatNames(e.model));
  EXPECT_EQ(c["initializers"]["input.offset"], nlohmann::json({1, 8, 8}));
  EXPECT_EQ(c["initializers"]["3.shortcut.0.weight"], nlohmann::json({6, 6, 1, 1}));
  ExpectPredictsAsPredict(dir, e, csv, {}, 10, true);
}

// A model whose outputs are an image of several pixels: our outputs hold it channels-last,
// so the graph puts the channels last before its softmax. Eight classes, 2x2x2 outputs.
TEST(OnnxExport, ImageOutputsAreInOurOrder) {
  const std::string csv = test::SmallFashionCsv();
  ASSERT_FALSE(csv.empty());
  TempDir dir;
  std::string eight;
  for (const std::string& line : test::SplitLines(test::ReadWholeFile(csv))) {
    if (!line.empty() && line.back() < '8') eight += line + "\n";
  }
  const std::string data = dir.File("eight.csv");
  std::ofstream(data) << eight;
  const Exported e = TrainAndExport(dir, "image_out",
                                    {"--data", data, "--input-shape", "1,8,8", "--model",
                                     "conv2d(3,3,padding=1),relu,conv2d(2,7)", "--loss", "xent",
                                     "--normalize", "standard", "--steps", "60", "--lr", "0.1"});
  EXPECT_EQ(e.checked["outputs"], nlohmann::json({{"probabilities", {"N", 8}}}));
  ExpectPredictsAsPredict(dir, e, data, {}, 8, true);
}

// Regressors, an MLP and a convolutional one: the output is "value", unscaled rows in.
TEST(OnnxExport, RegressorsGiveTheValue) {
  const std::string csv = test::SmallFashionCsv();
  ASSERT_FALSE(csv.empty());
  TempDir dir;
  const Exported mlp =
      TrainAndExport(dir, "mlp_mse",
                     {"--data", csv, "--layers", "64,32,1", "--activation", "tanh", "--loss", "mse",
                      "--normalize", "minmax", "--steps", "200", "--lr", "0.05"});
  EXPECT_EQ(mlp.checked["inputs"], nlohmann::json({{"input", {"N", 64}}}));
  EXPECT_EQ(mlp.checked["outputs"], nlohmann::json({{"value", {"N", 1}}}));
  EXPECT_FALSE(mlp.checked["metadata"].contains("classes"));
  ExpectPredictsAsPredict(dir, mlp, csv, {}, 1, false);
  const Exported cnn =
      TrainAndExport(dir, "cnn_mse",
                     {"--data", csv, "--input-shape", "1,8,8", "--model",
                      "conv2d(4,3,padding=1),batchnorm2d,relu,maxpool2d(2),flatten,linear(1)",
                      "--loss", "mse", "--steps", "100", "--lr", "0.01"});
  EXPECT_EQ(cnn.checked["outputs"], nlohmann::json({{"value", {"N", 1}}}));
  ExpectPredictsAsPredict(dir, cnn, csv, {}, 1, false);
}

DataFileOptions FashionLabels(const std::string& set) {
  DataFileOptions f;
  f.arrays.labels_path = std::string(kFashionDir) + "/" + set + "-labels-idx1-ubyte.gz";
  return f;
}

// An MLP and cnn-small, trained briefly on the first 2,000 images of Fashion-MNIST's training
// set (a run's last loss is over all its rows), on the full test set (10,000 images).
TEST(OnnxRuntime, MlpAndCnnSmallOnFashionMnist) {
  const std::string test_set = std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz";
  const DataFileOptions labels = FashionLabels("t10k");
  TempDir dir;
  const ProcResult made =
      test::RunProcess({NUMPY_PYTHON, "-c",
                        "import gzip, sys, numpy as np\n"
                        "d = sys.argv[1] + '/train-'\n"
                        "x = gzip.open(d + 'images-idx3-ubyte.gz').read()[16:16 + 2000 * 784]\n"
                        "y = gzip.open(d + 'labels-idx1-ubyte.gz').read()[8:8 + 2000]\n"
                        "np.save(sys.argv[2], np.frombuffer(x, np.uint8).reshape(2000, 28, 28))\n"
                        "np.save(sys.argv[3], np.frombuffer(y, np.uint8))\n",
                        kFashionDir, dir.File("x.npy"), dir.File("y.npy")},
                       kTimeout);
  ASSERT_TRUE(ExitedWith(made, 0)) << "needs Debian's python3-numpy";
  const std::vector<std::string> data = {"--data", dir.File("x.npy"), "--labels",
                                         dir.File("y.npy")};
  std::vector<std::string> mlp = {"--layers", "784,128,10",  "--activation", "relu",    "--loss",
                                  "xent",     "--normalize", "minmax",       "--steps", "100",
                                  "--batch",  "64",          "--lr",         "0.1"};
  mlp.insert(mlp.begin(), data.begin(), data.end());
  ExpectPredictsAsPredict(dir, TrainAndExport(dir, "mlp", mlp), test_set, labels, 10, true);
  std::vector<std::string> cnn = {
      "--model",
      "conv2d(32,5,padding=2),relu,maxpool2d(2),conv2d(64,5,padding=2),relu,maxpool2d(2),"
      "flatten,linear(128),relu,linear(10)",
      "--loss",
      "xent",
      "--normalize",
      "standard",
      "--steps",
      "20",
      "--batch",
      "64",
      "--lr",
      "0.05",
      "--workers",
      "2"};
  cnn.insert(cnn.begin(), data.begin(), data.end());
  ExpectPredictsAsPredict(dir, TrainAndExport(dir, "cnn_small", cnn), test_set, labels, 10, true);
}

// ResNet-20 (examples/resnet20.txt), trained briefly on 200 images a class of CIFAR-10's
// training folder, on 200 images a class of its test folder (2,000 JPEG images), or with
// SHMTRAIN_ONNX_FULL_SETS=1 on all of it (10,000: half a minute more of predict, eval and ONNX
// Runtime on 2 cores, which CI's time cannot spare; docs/models.md gives that run's figures).
TEST(OnnxRuntime, ResNet20OnCifar10) {
  const std::string archive = SHMTRAIN_SOURCE_DIR "/../shared/data/cifar10-jpeg.tar.gz";
  if (!test::FileExists(archive)) GTEST_SKIP() << archive << " is absent: no CIFAR-10 here";
  const char* full = std::getenv("SHMTRAIN_ONNX_FULL_SETS");
  const std::string tests =
      full != nullptr && std::string(full) == "1" ? "test/*" : "test/*/0[01]??.jpg";
  TempDir dir;
  const ProcResult x = test::RunProcess({"/usr/bin/tar", "xzf", archive, "-C", dir.path(),
                                         "--wildcards", tests, "train/*/0[01]??.jpg"},
                                        kTimeout);
  ASSERT_TRUE(ExitedWith(x, 0)) << x.Describe();
  const std::string resnet = test::ReadWholeFile(SHMTRAIN_SOURCE_DIR "/examples/resnet20.txt");
  const Exported e = TrainAndExport(
      dir, "resnet20",
      {"--data", dir.File("train"), "--model", resnet.substr(0, resnet.find_last_not_of("\n") + 1),
       "--loss", "xent", "--normalize", "channel", "--steps", "40", "--batch", "64", "--lr", "0.1",
       "--workers", "2"});
  EXPECT_EQ(e.checked["inputs"], nlohmann::json({{"input", {"N", 3, 32, 32}}}));
  ExpectPredictsAsPredict(dir, e, dir.File("test"), {}, 10, true);
}

}  // namespace
}  // namespace shmtrain
