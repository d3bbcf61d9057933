// `shmtrain export` (master/files/export.h) and the .npz writer under it (data/npz_writer.h).
//
// ExportNpz: the writer alone. NPY headers byte for byte as numpy 1.24's np.save writes them,
// UTF-8 decoding, the errors; archives (plain zip and zip64) read back by Python's zipfile, the
// module numpy.load reads .npz files with, through tests/npz_forward.py.
// ExportCommand: the real binary. Models trained here on data made here are exported, and
// tests/npz_forward.py (the standard library only: numpy is not a test dependency) applies
// the exported arrays by its own forward pass, as PyTorch's nn.Sequential would, and must
// agree with `shmtrain predict`; names, shapes and values of the arrays; bad inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <functional>
#include <string>
#include <vector>

#include "data/npz_writer.h"
#include "gtest/gtest.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::ExitedWith;
using test::ProcResult;
using test::TempDir;

constexpr const char* kPython = PYTHON3_BIN;
constexpr const char* kScript = NPZ_FORWARD_PY;
constexpr const char* kNumpyPython = NUMPY_PYTHON;  // Debian's python3, with python3-numpy
constexpr const char* kNumpyScript = NPZ_NUMPY_FORWARD_PY;
// Runs take well under a second; sanitizer builds under ctest -j2 are many times slower.
constexpr milliseconds kTimeout{120'000};

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> cells;
  size_t pos = 0;
  while (true) {
    const size_t e = s.find(sep, pos);
    cells.push_back(s.substr(pos, e == std::string::npos ? std::string::npos : e - pos));
    if (e == std::string::npos) return cells;
    pos = e + 1;
  }
}

double ToDouble(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  EXPECT_TRUE(!s.empty() && end == s.c_str() + s.size()) << "not a number: '" << s << "'";
  return v;
}

// `shmtrain <args>`; train runs get --no-metrics and --no-progress. No run may leave a segment.
ProcResult Shm(std::vector<std::string> args) { return test::Shmtrain(std::move(args), kTimeout); }

// tests/npz_forward.py <args>: its stdout, after asserting that it succeeded.
std::string Py(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kPython, kScript};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcResult r = test::RunProcess(argv, kTimeout);
  EXPECT_TRUE(ExitedWith(r, 0)) << "npz_forward.py " << args[0];
  return r.out;
}

// One line of `npz_forward.py describe`.
struct Described {
  std::string name, descr, shape;
  std::vector<std::string> values;  // empty when there are more than 64
};

std::vector<Described> Describe(const std::string& npz) {
  std::vector<Described> d;
  for (const std::string& line : test::SplitLines(Py({"describe", npz}))) {
    const std::vector<std::string> c = Split(line, '\t');
    if (c.size() != 4) {
      ADD_FAILURE() << "describe line: " << line;
      continue;
    }
    d.push_back({c[0], c[1], c[2], c[3] == "-" ? std::vector<std::string>{} : Split(c[3], ',')});
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// The writer alone.

std::string Npy(const data::NpyArray& a) {
  std::string out;
  const Status s = data::EncodeNpy(a, "t.npz", &out);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// The header of an .npy file, without its padding, after checking magic, version, alignment
// and the padding itself.
std::string HeaderOf(const std::string& npy) {
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t hlen = static_cast<unsigned char>(npy[8]) | static_cast<unsigned char>(npy[9]) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u) << "hlen " << hlen;
  const std::string h = npy.substr(10, hlen);
  EXPECT_EQ(h.back(), '\n');
  const size_t end = h.find_last_not_of(" \n");
  EXPECT_EQ(h.find_first_not_of(' ', end + 1), h.size() - 1) << "padding is not spaces, '\\n'";
  return h.substr(0, end + 1);
}

// The headers numpy 1.24.2's np.save writes for these shapes and types (padded to 118 bytes:
// the data at byte 128); the writer's must be the same text, and its data C-order
// little-endian.
TEST(ExportNpz, HeadersAreNumpys) {
  const std::string f4 =
      Npy(data::NpyArray::Float32("w", {256, 784}, std::vector<float>(256 * 784)));
  EXPECT_EQ(HeaderOf(f4), "{'descr': '<f4', 'fortran_order': False, 'shape': (256, 784), }");
  EXPECT_EQ(f4.size(), 128u + 256 * 784 * 4);
  const std::string d0 = Npy(data::NpyArray::Float64("x", {}, {2.5}));
  EXPECT_EQ(HeaderOf(d0), "{'descr': '<f8', 'fortran_order': False, 'shape': (), }");
  ASSERT_EQ(d0.size(), 136u);
  double v = 0;
  std::memcpy(&v, d0.data() + 128, 8);
  EXPECT_EQ(v, 2.5);
  std::vector<int64_t> ten(10);
  for (int i = 0; i < 10; ++i) ten[i] = i - 3;
  const std::string i8 = Npy(data::NpyArray::Int64("n", {10}, ten));
  EXPECT_EQ(HeaderOf(i8), "{'descr': '<i8', 'fortran_order': False, 'shape': (10,), }");
  EXPECT_EQ(i8.substr(128, 8), std::string("\xfd\xff\xff\xff\xff\xff\xff\xff", 8));  // -3
  const std::string e = Npy(data::NpyArray::Float64("e", {2, 0, 3}, {}));
  EXPECT_EQ(HeaderOf(e), "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 0, 3), }");
  EXPECT_EQ(e.size(), 128u);
  std::vector<int64_t> twelve;
  for (int i = 1; i <= 12; ++i) twelve.push_back(i == 12 ? 0 : i);
  EXPECT_EQ(HeaderOf(Npy(data::NpyArray::Float32("big", twelve, {}))),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, "
            "0), }");
}

TEST(ExportNpz, TextArraysAreUtf32CodePoints) {
  data::NpyArray a;
  // "émeu" is 5 bytes of UTF-8 and 4 code points; the cat is one code point of 4 bytes.
  ASSERT_TRUE(data::NpyUnicode("c", {3}, {"cat", "\xc3\xa9meu", "\xf0\x9f\x90\x88"}, "t", &a).ok());
  EXPECT_EQ(a.descr, "<U4");
  const std::string npy = Npy(a);
  EXPECT_EQ(HeaderOf(npy), "{'descr': '<U4', 'fortran_order': False, 'shape': (3,), }");
  std::vector<uint32_t> cps((npy.size() - 128) / 4);
  std::memcpy(cps.data(), npy.data() + 128, cps.size() * 4);
  EXPECT_EQ(cps, (std::vector<uint32_t>{'c', 'a', 't', 0, 0xE9, 'm', 'e', 'u', 0x1F408, 0, 0, 0}));
  data::NpyArray s;
  ASSERT_TRUE(data::NpyUnicode("act", {}, {"relu"}, "t", &s).ok());
  EXPECT_EQ(HeaderOf(Npy(s)), "{'descr': '<U4', 'fortran_order': False, 'shape': (), }");
  data::NpyArray empty;  // numpy has no '<U0': the empty string is '<U1'
  ASSERT_TRUE(data::NpyUnicode("e", {1}, {""}, "t", &empty).ok());
  EXPECT_EQ(empty.descr, "<U1");
  EXPECT_EQ(empty.data, std::string(4, '\0'));
}

TEST(ExportNpz, MalformedUtf8IsRefused) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"\xe9meu", "an incomplete sequence at byte 0"},  // Latin-1 é
      {"ab\x80", "byte 0x80 cannot start a UTF-8 sequence at byte 2"},
      {"\xc0\xaf", "an overlong encoding at byte 0"},  // '/' in two bytes
      {"\xe0\x80\xaf", "an overlong encoding at byte 0"},
      {"x\xed\xa0\x80", "a surrogate code point at byte 1"},  // U+D800
      {"\xf4\x90\x80\x80", "a code point above U+10FFFF at byte 0"},
      {"\xf8\x88\x80\x80\x80", "byte 0xF8 cannot start"},
      {"ok\xe2\x82", "an incomplete sequence at byte 2"},  // € cut short
  };
  for (const auto& [text, why] : bad) {
    std::vector<uint32_t> cps;
    const Status decoded = data::DecodeUtf8(text, &cps);
    EXPECT_EQ(decoded.code(), Status::Code::kData) << why;
    EXPECT_TRUE(Contains(decoded.message(), why)) << decoded.message();
    data::NpyArray a;
    const Status s = data::NpyUnicode("classes", {2}, {"cat", text}, "m.bin", &a);
    EXPECT_EQ(s.code(), Status::Code::kData);
    EXPECT_TRUE(Contains(s.message(), "m.bin: array 'classes', element 1: not valid UTF-8"))
        << s.message();
  }
  std::vector<uint32_t> cps;
  const Status decoded = data::DecodeUtf8("\xef\xbf\xbf\xf4\x8f\xbf\xbf", &cps);
  EXPECT_TRUE(decoded.ok()) << decoded.message();
  EXPECT_EQ(cps, (std::vector<uint32_t>{0xFFFF, 0x10FFFF}));
}

TEST(ExportNpz, BadArraysAreBugsNamedInTheStatus) {
  std::string out;
  data::NpyArray a = data::NpyArray::Float32("w", {2, 3}, std::vector<float>(5));
  Status s = data::EncodeNpz({a}, "o.npz", &out);
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_TRUE(Contains(s.message(), "o.npz: array 'w': shape (2, 3) of '<f4' needs 24 bytes"))
      << s.message();
  a = data::NpyArray::Float32("w", {5}, std::vector<float>(5));
  s = data::EncodeNpz({a, a}, "o.npz", &out);
  EXPECT_TRUE(Contains(s.message(), "'w' given twice")) << s.message();
  a.name = "a/b";
  EXPECT_EQ(data::EncodeNpz({a}, "o.npz", &out).code(), Status::Code::kInternal);
  a.name = "w";
  a.descr = "<c8";
  EXPECT_TRUE(Contains(data::EncodeNpz({a}, "o.npz", &out).message(), "unsupported element type"));
}

// Arrays of every kind; Python's zipfile reads the archive (CRCs, names, headers, values) the
// same in plain zip and with every zip64 record, and the plain one has none of them.
TEST(ExportNpz, PythonsZipfileReadsPlainAndZip64Archives) {
  TempDir dir;
  std::vector<data::NpyArray> arrays = {
      data::NpyArray::Float32("0.weight", {2, 3}, {1, 2, 3, 4, 5, -0.5f}),
      data::NpyArray::Float64("v", {}, {0.1}),
      data::NpyArray::Int64("layers", {3}, {3, 2, 1}),
      data::NpyArray::Float32("none", {0}, {}),
  };
  data::NpyArray text;
  ASSERT_TRUE(data::NpyUnicode("gr\u00f6\u00dfe", {2}, {"\u00e9meu", "x"}, "t", &text).ok());
  arrays.push_back(text);
  std::string plain, wide;
  ASSERT_TRUE(data::EncodeNpz(arrays, "t", &plain).ok());
  ASSERT_TRUE(data::EncodeNpz(arrays, "t", &wide, {.force_zip64 = true}).ok());
  EXPECT_FALSE(Contains(plain, std::string("PK\x06\x06", 4))) << "a zip64 end record";
  EXPECT_TRUE(Contains(wide, std::string("PK\x06\x06", 4)));
  EXPECT_TRUE(Contains(wide, std::string("PK\x06\x07", 4)));
  const std::string want =
      "0.weight\t<f4\t2,3\t1,2,3,4,5,-0.5\n"
      "v\t<f8\t\t0.1\n"
      "layers\t<i8\t3\t3,2,1\n"
      "none\t<f4\t0\t\n"
      "gr\u00f6\u00dfe\t<U4\t2\t\u00e9meu,x\n";
  for (const auto& [name, bytes] : {std::pair{"plain.npz", plain}, std::pair{"zip64.npz", wide}}) {
    EXPECT_EQ(Py({"describe", dir.Write(name, bytes)}), want) << name;
  }
  // The same arrays give the same bytes (fixed timestamps): exports are reproducible.
  std::string again;
  ASSERT_TRUE(data::EncodeNpz(arrays, "t", &again).ok());
  EXPECT_TRUE(again == plain);
}

// ---------------------------------------------------------------------------------------------
// The command. Data sets are made here, deterministically.

// n rows of `classes.size()` Gaussian clusters in f features (centres far apart), one label
// column "kind" last.
std::string ClustersCsv(int n, int f, const std::vector<std::string>& classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> centre(0, 4), noise(0, 1);
  std::vector<std::vector<double>> c(classes.size(), std::vector<double>(f));
  for (auto& row : c) {
    for (double& v : row) v = centre(rng);
  }
  std::string csv;
  for (int j = 0; j < f; ++j) csv += "f" + std::to_string(j) + ",";
  csv += "kind\n";
  char buf[32];
  for (int i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i) % classes.size();
    for (int j = 0; j < f; ++j) {
      // Feature j on a scale of its own, so that the scaling matters.
      std::snprintf(buf, sizeof buf, "%.6g,", (c[k][j] + noise(rng)) * (j + 1) * 3 + 10 * j);
      csv += buf;
    }
    csv += classes[k] + "\n";
  }
  return csv;
}

// y = sin(a) + b*c/20 - d/10 with features on different ranges; the target last.
std::string RegressionCsv(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::string csv = "a,b,c,d,y\n";
  char buf[128];
  for (int i = 0; i < n; ++i) {
    const double a = -2 + 4 * u(rng), b = 10 + 10 * u(rng), c = -3 + u(rng), d = 100 * u(rng);
    std::snprintf(buf, sizeof buf, "%.6g,%.6g,%.6g,%.6g,%.6g\n", a, b, c, d,
                  std::sin(a) + b * c / 20 - d / 100);
    csv += buf;
  }
  return csv;
}

const std::string kEmeu = "\xc3\xa9meu";  // "émeu": 5 bytes of UTF-8, 4 code points

// One model to export: its data, how it is trained, and what its predictions look like.
struct Case {
  std::string name;
  std::string csv;
  std::vector<std::string> train;  // besides --data and --save
  bool xent;
  bool numeric_classes;
};

std::vector<Case> Cases() {
  return {
      {"relu_standard_text", ClustersCsv(300, 5, {"dog", kEmeu, "cat"}, 3),
       {"--label-col", "kind", "--task", "classification", "--layers", "5,8,8,3",
        "--activation", "relu", "--normalize", "standard", "--lr", "0.1", "--steps", "150"},
       true, false},
      {"tanh_minmax_regression", RegressionCsv(200, 4),
       {"--loss", "mse", "--layers", "4,6,1", "--activation", "tanh", "--normalize", "minmax",
        "--lr", "0.05", "--steps", "150"},
       false, false},
      {"sigmoid_none_numeric", ClustersCsv(240, 2, {"-1", "2.5", "7"}, 5),
       {"--label-col", "kind", "--task", "classification", "--layers", "2,6,3",
        "--activation", "sigmoid", "--lr", "0.5", "--steps", "150"},
       true, true},
      {"identity_standard_regression", RegressionCsv(120, 6),
       {"--loss", "mse", "--layers", "4,5,3,1", "--activation", "identity", "--normalize",
        "standard", "--lr", "0.01", "--steps", "100"},
       false, false},
  };
}

class ExportCommand : public ::testing::Test {
 public:
  // Trains c into dir_/<name>.bin; returns the data path.
  std::string Train(const Case& c) {
    const std::string data = dir_.Write(c.name + ".csv", c.csv);
    std::vector<std::string> args = {"train", "--workers", "2", "--data", data, "--save",
                                     Model(c)};
    args.insert(args.end(), c.train.begin(), c.train.end());
    EXPECT_TRUE(ExitedWith(Shm(args), 0)) << c.name;
    return data;
  }
  // Train(c), then exports it to dir_/<name>.npz; returns the data path.
  std::string TrainAndExport(const Case& c) {
    const std::string data = Train(c);
    const ProcResult e = Shm({"export", "--model", Model(c), "--out", Npz(c)});
    EXPECT_TRUE(ExitedWith(e, 0)) << c.name;
    EXPECT_TRUE(Contains(e.err, "export: " + Model(c) + " -> " + Npz(c))) << e.err;
    return data;
  }
  std::string Model(const Case& c) const { return dir_.File(c.name + ".bin"); }
  std::string Npz(const Case& c) const { return dir_.File(c.name + ".npz"); }
  // Every refusal of a bad model, flag or --out path when the output is `out`; `good` is the
  // model file's bytes.
  void ExpectBadInputsRefused(const Case& c, const std::string& good, const std::string& out);

  TempDir dir_;
};

// Predict's class cell against the script's label: text exactly, numbers by value ("7" and
// "7.0" are one class).
bool SameClass(const std::string& predict, const std::string& script, bool numeric) {
  return numeric ? ToDouble(predict) == ToDouble(script) : predict == script;
}

// predict's CSV (class,p_...) against the script's lines (label TAB p...). The classes must be
// equal, except where predict's two best probabilities are within 1e-4: a tie at float32
// precision may go either way. Probabilities agree to 1e-5.
void ExpectSameClasses(const Case& c, const std::vector<std::string>& pred,
                       const std::vector<std::string>& mine) {
  int near_ties = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::vector<std::string> p = Split(pred[i + 1], ',');
    const std::vector<std::string> m = Split(mine[i], '\t');
    ASSERT_EQ(p.size(), m.size()) << c.name << " row " << i;
    std::vector<double> probs;
    for (size_t k = 1; k < p.size(); ++k) {
      probs.push_back(ToDouble(p[k]));
      EXPECT_NEAR(ToDouble(m[k]), probs.back(), 1e-5) << c.name << " row " << i << " p" << k;
    }
    if (SameClass(p[0], m[0], c.numeric_classes)) continue;
    std::sort(probs.rbegin(), probs.rend());
    EXPECT_LT(probs[0] - probs[1], 1e-4)
        << c.name << " row " << i << ": predict says " << p[0] << ", the arrays " << m[0];
    ++near_ties;
  }
  EXPECT_LE(near_ties, 2) << c.name;
}

// Trains and exports every case, and checks that `forward(npz, data)` (the stdout lines of a
// forward pass over the data's rows) predicts what `shmtrain predict` does: the classes (see
// ExpectSameClasses), or the values to 1e-5.
void ExpectPredictionsOfEveryCase(
    ExportCommand* t, const std::function<std::vector<std::string>(const std::string& npz,
                                                                   const std::string& data)>& forward);

// The acceptance test: the exported arrays, applied by the script's own forward pass, give
// the same predictions as `shmtrain predict`.
TEST_F(ExportCommand, ArraysPredictWhatPredictDoes) {
  ExpectPredictionsOfEveryCase(this, [](const std::string& npz, const std::string& data) {
    return test::SplitLines(Py({"forward", npz, data}));
  });
}

// The same with numpy itself: np.load reads the export without pickle, and docs/models.md's
// recipe (the state-dict arrays, the input scaling, the classes) predicts what predict does.
TEST_F(ExportCommand, NumpyLoadsItAndPredictsWhatPredictDoes) {
  ExpectPredictionsOfEveryCase(this, [](const std::string& npz, const std::string& data) {
    const ProcResult np = test::RunProcess({kNumpyPython, kNumpyScript, npz, data}, kTimeout);
    EXPECT_TRUE(ExitedWith(np, 0)) << "needs Debian's python3-numpy (scripts/install-deps.sh)";
    return test::SplitLines(np.out);
  });
}

void ExpectPredictionsOfEveryCase(
    ExportCommand* t, const std::function<std::vector<std::string>(const std::string& npz,
                                                                   const std::string& data)>& forward) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const std::string data = t->TrainAndExport(c);
    std::vector<std::string> pargs = {"predict", "--model", t->Model(c), "--data", data};
    if (c.xent) pargs.insert(pargs.end(), {"--label-col", "kind"});
    const ProcResult p = Shm(pargs);
    ASSERT_TRUE(ExitedWith(p, 0));
    const std::vector<std::string> pred = test::SplitLines(p.out);
    const std::vector<std::string> mine = forward(t->Npz(c), data);
    const size_t rows = test::SplitLines(c.csv).size() - 1;
    ASSERT_EQ(pred.size(), rows + 1) << p.out.substr(0, 500);
    ASSERT_EQ(mine.size(), rows);
    if (c.xent) {
      ExpectSameClasses(c, pred, mine);
      continue;
    }
    EXPECT_EQ(pred[0], "value");
    for (size_t i = 0; i < rows; ++i) {
      const double want = ToDouble(pred[i + 1]);
      EXPECT_NEAR(ToDouble(mine[i]), want, 1e-5 * std::max(1.0, std::fabs(want))) << "row " << i;
    }
  }
}

// The model file's parameter vector (master/files/model_file.h: u64 n, f32[n], u32 CRC at the end).
std::vector<float> ParamsOf(const std::string& model, size_t n) {
  const std::string b = test::ReadWholeFile(model);
  if (b.size() < 12 + 4 * n) return {};
  const size_t at = b.size() - 4 - 4 * n;
  uint64_t count = 0;
  std::memcpy(&count, b.data() + at - 8, 8);
  EXPECT_EQ(count, n);
  std::vector<float> p(n);
  std::memcpy(p.data(), b.data() + at, 4 * n);
  return p;
}

// Names, types and shapes as nn.Sequential's state dict has them, in order; every weight is
// the model's W(i, j) at [i][j] (the file keeps W column-major), every bias its b.
TEST_F(ExportCommand, NamesShapesAndValues) {
  const Case c = Cases()[0];
  TrainAndExport(c);
  const std::vector<Described> d = Describe(Npz(c));
  std::vector<std::string> got;
  for (const Described& a : d) got.push_back(a.name + " " + a.descr + " (" + a.shape + ")");
  EXPECT_EQ(got, (std::vector<std::string>{
                     "0.weight <f4 (8,5)", "0.bias <f4 (8)", "2.weight <f4 (8,8)",
                     "2.bias <f4 (8)", "4.weight <f4 (3,8)", "4.bias <f4 (3)",
                     "input.offset <f4 (5)", "input.scale <f4 (5)", "classes <U4 (3)",
                     "layers <i8 (4)", "activation <U4 ()", "loss <U4 ()"}));
  ASSERT_EQ(d.size(), 12u);
  EXPECT_EQ(d[8].values, (std::vector<std::string>{"cat", "dog", kEmeu}));  // by their bytes
  EXPECT_EQ(d[9].values, (std::vector<std::string>{"5", "8", "8", "3"}));
  EXPECT_EQ(d[10].values, std::vector<std::string>{"relu"});
  EXPECT_EQ(d[11].values, std::vector<std::string>{"xent"});
  const std::vector<float> params = ParamsOf(Model(c), 147);  // 5*8+8 + 8*8+8 + 8*3+3
  ASSERT_EQ(params.size(), 147u);
  const int sizes[] = {5, 8, 8, 3};
  size_t at = 0;
  for (int l = 0; l < 3; ++l) {
    const int in = sizes[l], out = sizes[l + 1];
    const std::vector<std::string>& w = d[2 * l].values;
    const std::vector<std::string>& b = d[2 * l + 1].values;
    ASSERT_EQ(w.size(), static_cast<size_t>(in * out));
    for (int i = 0; i < out; ++i) {
      for (int j = 0; j < in; ++j) {
        EXPECT_EQ(std::strtof(w[i * in + j].c_str(), nullptr), params[at + i + j * out])
            << "layer " << l << " W(" << i << ", " << j << ")";
      }
    }
    at += static_cast<size_t>(in) * out;
    for (int i = 0; i < out; ++i) EXPECT_EQ(std::strtof(b[i].c_str(), nullptr), params[at + i]);
    at += out;
  }
}

// The entry of `name`, or a failure.
Described Find(const std::vector<Described>& d, const std::string& name) {
  for (const Described& a : d) {
    if (a.name == name) return a;
  }
  ADD_FAILURE() << "no array " << name;
  return {};
}

TEST_F(ExportCommand, RegressionHasNoClassesAndUnscaledModelsScaleByOne) {
  const std::vector<Case> cases = Cases();
  TrainAndExport(cases[1]);
  const std::vector<Described> r = Describe(Npz(cases[1]));
  std::vector<std::string> names;
  for (const Described& a : r) names.push_back(a.name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias",
                                             "input.offset", "input.scale", "layers",
                                             "activation", "loss"}));
  EXPECT_EQ(Find(r, "loss").values, std::vector<std::string>{"mse"});
  EXPECT_EQ(Find(r, "activation").values, std::vector<std::string>{"tanh"});
  EXPECT_EQ(Find(r, "2.weight").shape, "1,6");

  // No normalisation: offset 0 and scale 1, so a user's code is the same for every model.
  TrainAndExport(cases[2]);
  const std::vector<Described> n = Describe(Npz(cases[2]));
  EXPECT_EQ(Find(n, "input.offset").values, (std::vector<std::string>{"0", "0"}));
  EXPECT_EQ(Find(n, "input.scale").values, (std::vector<std::string>{"1", "1"}));
  const Described classes = Find(n, "classes");
  EXPECT_EQ(classes.descr, "<f8");
  EXPECT_EQ(classes.values, (std::vector<std::string>{"-1", "2.5", "7"}));  // by value
  EXPECT_EQ(Find(n, "activation").values, std::vector<std::string>{"sigmoid"});
}

// The names in a directory.
std::set<std::string> Listing(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

// `shmtrain export <args>` exits 2 saying each of `says`, and writes nothing in the directory.
void ExpectRefused(const TempDir& dir, const std::vector<std::string>& args,
                   const std::vector<std::string>& says) {
  const std::set<std::string> before = Listing(dir.path());
  std::vector<std::string> a = {"export"};
  a.insert(a.end(), args.begin(), args.end());
  const ProcResult r = Shm(a);
  EXPECT_TRUE(ExitedWith(r, 2)) << args.size();
  for (const std::string& s : says) EXPECT_TRUE(Contains(r.err, s)) << s << " not in: " << r.err;
  EXPECT_EQ(Listing(dir.path()), before) << "files left behind by: " << r.err;
}

// Both formats (.onnx by the name's end, any case) follow the same output rules.
TEST_F(ExportCommand, BadInputsAreRefusedAndLeaveNothing) {
  const Case c = Cases()[2];
  TrainAndExport(c);
  const std::string good = test::ReadWholeFile(Model(c));
  for (const char* name : {"out.npz", "out.onnx", "OUT.ONNX"}) {
    ExpectBadInputsRefused(c, good, dir_.File(name));
  }
  ExpectRefused(dir_, {"--model", Model(c), "--out", dir_.File("no/such/dir/m.onnx")},
                {"does not exist"});
  ExpectRefused(dir_, {"--model", Model(c), "--out", dir_.path()}, {"--out", dir_.path()});
  EXPECT_TRUE(test::ReadWholeFile(Model(c)) == good) << "the model was changed";
}

void ExportCommand::ExpectBadInputsRefused(const Case& c, const std::string& good,
                                           const std::string& out) {
  const std::string cut = dir_.Write("cut.bin", good.substr(0, good.size() / 2));
  ExpectRefused(dir_, {"--model", cut, "--out", out},
                {cut, "not a usable model file", "cut short"});
  std::string flipped = good;
  flipped[flipped.size() - 8] ^= 0x04;  // a parameter bit: the checksum fails
  const std::string bad = dir_.Write("flipped.bin", flipped);
  ExpectRefused(dir_, {"--model", bad, "--out", out}, {bad, "checksum mismatch"});
  ExpectRefused(dir_, {"--model", dir_.File("none.bin"), "--out", out},
                {dir_.File("none.bin"), "cannot open model file"});
  ExpectRefused(dir_, {"--model", Model(c)}, {"--out is required"});
  ExpectRefused(dir_, {"--out", out}, {"--model is required"});
  ExpectRefused(dir_, {"--model", Model(c), "--out", Model(c)},
                {"is the same file as --model", "overwrite"});
  ExpectRefused(dir_, {"--model", Model(c), "--out", dir_.File("no/such/dir/m.npz")},
                {"does not exist"});
  ExpectRefused(dir_, {"--model", Model(c), "--out", out, "--data", "x.csv"},
                {"unknown flag --data for 'export'"});
}

// Text labels that are not UTF-8 (a Latin-1 file) cannot be a NumPy text array: refused,
// naming the model and the label, and nothing is written.
TEST_F(ExportCommand, LabelsThatAreNotUtf8AreRefused) {
  const Case c{"latin1", ClustersCsv(60, 2, {"cat", "\xe9meu"}, 7),
               {"--label-col", "kind", "--task", "classification", "--layers", "2,3,2", "--lr",
                "0.1", "--steps", "5"},
               true, false};
  Train(c);
  ExpectRefused(dir_, {"--model", Model(c), "--out", Npz(c)},
                {Model(c) + ": array 'classes', element 1: not valid UTF-8", "must be UTF-8"});
  ExpectRefused(dir_, {"--model", Model(c), "--out", dir_.File("latin1.onnx")},
                {Model(c) + ": class 1's label is not UTF-8", "ONNX's strings are UTF-8"});
}

TEST_F(ExportCommand, HelpListsTheCommandAndItsFlags) {
  const ProcResult main_help = Shm({"--help"});
  ASSERT_TRUE(ExitedWith(main_help, 0));
  EXPECT_TRUE(Contains(main_help.out, "\n  export  ")) << main_help.out;
  for (const std::vector<std::string>& cmd :
       std::vector<std::vector<std::string>>{{"export", "--help"}, {"help", "export"}}) {
    const ProcResult r = Shm(cmd);
    ASSERT_TRUE(ExitedWith(r, 0));
    EXPECT_TRUE(Contains(r.out, "usage: shmtrain export --model FILE --out FILE.onnx|FILE.npz"))
        << r.out;
    EXPECT_TRUE(Contains(r.out, "an ONNX model (opset 13)")) << r.out;
    EXPECT_TRUE(Contains(r.out, "--model FILE")) << r.out;
    EXPECT_TRUE(Contains(r.out, "(required)")) << r.out;
    EXPECT_TRUE(Contains(r.out, "0.weight")) << r.out;
  }
}

}  // namespace
}  // namespace shmtrain
