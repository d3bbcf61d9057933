// Tests of the data layer: the CSV and LIBSVM loaders (good files and every error message),
// class maps, held-out splits, the built-in parabola, and the batch plan (which rows each
// worker uses at each step).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <csignal>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "data/array_file.h"
#include "data/batch_plan.h"
#include "data/byte_stream.h"
#include "data/dataset.h"
#include "data/format.h"
#include "data/line_blocks.h"
#include "data/pipeline.h"
#include "data/preprocess.h"
#include "data/text_cells.h"
#include "data/text_load.h"
#include "master/plan/validate.h"
#include "gtest/gtest.h"

namespace shmtrain::data {
namespace {

// Each test gets a fresh directory under $TMPDIR (or /tmp), removed afterwards.
class CsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/data_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    // Flat directory: remove its entries (files and the subdirectory of one test), then it.
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        std::string p = dir_ + "/" + name;
        if (unlink(p.c_str()) != 0) rmdir(p.c_str());
      }
      closedir(d);
    }
    rmdir(dir_.c_str());
  }

  // Writes `content` byte for byte to <dir>/<name> and returns the path.
  std::string Write(const std::string& content, const std::string& name = "data.csv") {
    std::string path = dir_ + "/" + name;
    std::ofstream f(path, std::ios::binary);
    f << content;
    EXPECT_TRUE(f.good());
    return path;
  }

  // Loads `content`; the load must succeed.
  Dataset Load(const std::string& content, LoadOptions opts = {}) {
    std::string path = Write(content);
    Dataset ds;
    Status s = LoadFile(path, opts, &ds);
    EXPECT_TRUE(s.ok()) << s.message();
    return ds;
  }

  // Loads `content`; the load must fail with kData and the message must be
  // "<path>:<where><what>", where `where` is e.g. "3:2: ", "3: " or "" (no location).
  void ExpectError(const std::string& content, const LoadOptions& opts, const std::string& where,
                   const std::string& what) {
    std::string path = Write(content);
    Dataset ds;
    ds.rows = 7;  // a failed load leaves *out alone
    Status s = LoadFile(path, opts, &ds);
    ASSERT_FALSE(s.ok()) << "loaded without error: " << content;
    EXPECT_EQ(s.code(), Status::Code::kData);
    EXPECT_EQ(s.message(), path + ":" + (where.empty() ? " " : where) + what);
    EXPECT_EQ(ds.rows, 7);
  }

  std::string dir_;
};

LoadOptions Opts(int label_col, HeaderMode header = HeaderMode::kAuto, bool classify = false) {
  LoadOptions o;
  o.file.label_col = label_col;
  o.file.header = header;
  o.task = classify ? Task::kClassification : Task::kRegression;
  return o;
}

const std::string kNumericTargets =
    " (regression needs numeric targets; use --task classification for class labels)";

// ---- Good files ----

TEST_F(CsvTest, WithHeader) {
  Dataset ds = Load("a,b,y\n1,2,3\n4,5,6\n");
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(ds.y, (std::vector<float>{3, 6}));
}

TEST_F(CsvTest, WithoutHeaderAutoDetected) {
  Dataset ds = Load("1,2,3\n4,5,6\n");
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(ds.y, (std::vector<float>{3, 6}));
}

TEST_F(CsvTest, AutoHeaderWhenOnlyOneCellIsText) {
  Dataset ds = Load("1,x2,3\n4,5,6\n");
  EXPECT_EQ(ds.rows, 1);
  EXPECT_EQ(ds.x, (std::vector<float>{4, 5}));
  EXPECT_EQ(ds.y, (std::vector<float>{6}));
}

TEST_F(CsvTest, ForcedHeaderSkipsNumericFirstLine) {
  Dataset ds = Load("1,2,3\n4,5,6\n", Opts(-1, HeaderMode::kYes));
  EXPECT_EQ(ds.rows, 1);
  EXPECT_EQ(ds.x, (std::vector<float>{4, 5}));
  EXPECT_EQ(ds.y, (std::vector<float>{6}));
  // After a BOM and blank lines, quoted, ';'-separated, classifying, and for predict.
  ds = Load("\xEF\xBB\xBF\n\n\"1\";\"2\";\"0\"\n4;5;0\n7;8;1\n",
            Opts(-1, HeaderMode::kYes, true));
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{4, 5, 7, 8}));
  EXPECT_EQ(ds.y, (std::vector<float>{0, 1}));
  LoadOptions o;
  o.features = 2;
  o.no_labels = true;
  o.file.header = HeaderMode::kYes;
  ds = Load("1\t2\n3\t4\n", o);
  EXPECT_EQ(ds.rows, 1);
  EXPECT_EQ(ds.x, (std::vector<float>{3, 4}));
}

TEST_F(CsvTest, NoHeaderReadsFirstLine) {
  Dataset ds = Load("1,2\n3,4\n", Opts(-1, HeaderMode::kNo));
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3}));
  EXPECT_EQ(ds.y, (std::vector<float>{2, 4}));
}

TEST_F(CsvTest, LabelInMiddleColumn) {
  Dataset ds = Load("f0,label,f1\n1,2,3\n4,5,6", Opts(1));  // no final newline
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3, 4, 6}));
  EXPECT_EQ(ds.y, (std::vector<float>{2, 5}));
}

TEST_F(CsvTest, LabelFirstAndLastColumn) {
  Dataset first = Load("1,2,3\n4,5,6\n", Opts(0));
  EXPECT_EQ(first.x, (std::vector<float>{2, 3, 5, 6}));
  EXPECT_EQ(first.y, (std::vector<float>{1, 4}));
  Dataset last = Load("1,2,3\n4,5,6\n", Opts(-1));
  EXPECT_EQ(last.x, (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(last.y, (std::vector<float>{3, 6}));
  Dataset explicit_last = Load("1,2,3\n4,5,6\n", Opts(2));
  EXPECT_EQ(explicit_last.x, last.x);
  EXPECT_EQ(explicit_last.y, last.y);
}

TEST_F(CsvTest, CrlfLineEndings) {
  Dataset ds = Load("x,y\r\n1,2\r\n3,4\r\n");
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3}));
  EXPECT_EQ(ds.y, (std::vector<float>{2, 4}));
}

TEST_F(CsvTest, BlankLinesAnywhere) {
  Dataset ds = Load("\n  \r\nx,y\n\n1,2\n\t\n\n3,4\n\n \n");
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3}));
  EXPECT_EQ(ds.y, (std::vector<float>{2, 4}));
}

TEST_F(CsvTest, SpacesAndTabsAroundCells) {
  Dataset ds = Load("  x , y\t\n 1 ,\t2\t\r\n3,   4   \n");
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3}));
  EXPECT_EQ(ds.y, (std::vector<float>{2, 4}));
}

TEST_F(CsvTest, NumberFormats) {
  Dataset ds = Load(
      "1e3,-2.5E-2,+3,.5\n"
      "-7,1.,-0.125,1e+2\n"
      "1e-400,3.4028235e38,-3.4028235e38,0\n");
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.features, 3);
  EXPECT_EQ(ds.x, (std::vector<float>{1000.0f, -0.025f, 3.0f, -7.0f, 1.0f, -0.125f, 0.0f,
                                      std::numeric_limits<float>::max(),
                                      -std::numeric_limits<float>::max()}));
  EXPECT_EQ(ds.y, (std::vector<float>{0.5f, 100.0f, 0.0f}));
}

TEST_F(CsvTest, UnderflowReadsAsZero) {
  Dataset ds = Load("-1e-400,0.000001e-320,0e999,1000e-330,1e-50\n");
  EXPECT_EQ(ds.x, (std::vector<float>{-0.0f, 0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(ds.y, (std::vector<float>{0.0f}));
}

TEST_F(CsvTest, ByteOrderMarkIgnored) {
  Dataset ds = Load(
      "\xEF\xBB\xBF"
      "1,2\n3,4\n");
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3}));
}

TEST_F(CsvTest, IntegerClassLabels) {
  Dataset ds = Load("x,c\n0.5,0\n1.5,2.0\n2.5,1\n", Opts(-1, HeaderMode::kAuto, true));
  EXPECT_EQ(ds.y, (std::vector<float>{0, 2, 1}));
}

TEST_F(CsvTest, ManyRows) {
  constexpr int kRows = 100000;
  std::string text = "a,b,c,d,label\n";
  for (int i = 0; i < kRows; ++i) {
    text += std::to_string(i) + "," + std::to_string(-i) + ",0.5," + std::to_string(i % 7) + "," +
            std::to_string(i % 10) + "\n";
  }
  Dataset ds = Load(text, Opts(-1, HeaderMode::kAuto, true));
  ASSERT_EQ(ds.rows, kRows);
  ASSERT_EQ(ds.features, 4);
  ASSERT_EQ(ds.x.size(), size_t{4} * kRows);
  for (int i = 0; i < kRows; i += 997) {
    EXPECT_EQ(ds.x[4 * i], static_cast<float>(i));
    EXPECT_EQ(ds.x[4 * i + 1], static_cast<float>(-i));
    EXPECT_EQ(ds.x[4 * i + 2], 0.5f);
    EXPECT_EQ(ds.x[4 * i + 3], static_cast<float>(i % 7));
    EXPECT_EQ(ds.y[i], static_cast<float>(i % 10));
  }
}

// ---- Errors ----

TEST_F(CsvTest, MissingFile) {
  std::string path = dir_ + "/nope.csv";
  Dataset ds;
  Status s = LoadFile(path, {}, &ds);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_EQ(s.message(), path + ": cannot open file: No such file or directory");
}

// A directory is an image folder (data/image_folder.h): one without class folders is refused
// as such; read as CSV it is refused as a directory.
TEST_F(CsvTest, DirectoryIsAnImageFolderOrUnreadable) {
  std::string path = dir_ + "/sub";
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  Dataset ds;
  Status s = LoadFile(path, {}, &ds);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_EQ(s.message().rfind(path + ": no class folder in it", 0), 0u) << s.message();
  LoadOptions csv;
  csv.file.format = "csv";
  s = LoadFile(path, csv, &ds);
  EXPECT_EQ(s.message(), path + ": cannot read file: Is a directory");
}

TEST_F(CsvTest, EmptyFile) {
  ExpectError("", {}, "", "file is empty");
}

TEST_F(CsvTest, OnlyBlankLines) {
  ExpectError("\n  \n\r\n", {}, "", "file is empty (it has only blank lines)");
}

TEST_F(CsvTest, OnlyHeader) {
  ExpectError("x,y\n\n", {}, "", "file has a header line but no data rows");
  ExpectError("1,2\n", Opts(-1, HeaderMode::kYes), "", "file has a header line but no data rows");
}

TEST_F(CsvTest, RaggedRowShort) {
  ExpectError("1,2,3,4,5\n1,2,3,4,5\n1,2,3\n", {},
              "3: ", "row has 3 cells, expected 5 (as on line 1)");
}

TEST_F(CsvTest, RaggedRowLong) {
  // The reference line is the first non-blank line, here the header on line 2.
  ExpectError("\nx,y\n1,2\n3,4,5\n", {}, "4: ", "row has 3 cells, expected 2 (as on line 2)");
  ExpectError("1,2,3\n4\n", {}, "2: ", "row has 1 cell, expected 3 (as on line 1)");
}

TEST_F(CsvTest, NonNumericCell) {
  // In the label column of a regression file the message says what the label must be.
  ExpectError("x,y\n1,2\n3,abc\n", {}, "3:2: ", "cell 'abc' is not a number" + kNumericTargets);
  ExpectError("x,y,z\n1,2,3\n3,abc,4\n", {}, "3:2: ", "cell 'abc' is not a number");
  ExpectError("1,2\n1e,2\n", {}, "2:1: ", "cell '1e' is not a number");
  ExpectError("1,2\n0x10,2\n", {}, "2:1: ", "cell '0x10' is not a number");
  ExpectError("1,2\n+-1,2\n", {}, "2:1: ", "cell '+-1' is not a number");
  ExpectError("1,2\n1 2,3\n", {}, "2:1: ", "cell '1 2' is not a number");
}

TEST_F(CsvTest, NonNumericFirstLineWithoutHeader) {
  ExpectError("a,b\n1,2\n", Opts(-1, HeaderMode::kNo), "1:1: ", "cell 'a' is not a number");
}

TEST_F(CsvTest, LongCellIsShortenedInMessage) {
  std::string junk(100, 'z');
  ExpectError("1,2\n1," + junk + "\n", {},
              "2:2: ", "cell '" + std::string(40, 'z') + "...' is not a number" + kNumericTargets);
}

TEST_F(CsvTest, EmptyCell) {
  ExpectError("1,2,3\n4,,6\n", {}, "2:2: ", "cell is empty");
  ExpectError("1,2,3\n4,5,  \n", {}, "2:3: ", "cell is empty");
  // An empty cell does not make the first line a header.
  ExpectError(",2\n", {}, "1:1: ", "cell is empty");
}

TEST_F(CsvTest, NanRejected) {
  ExpectError("1,2\nnan,3\n", {}, "2:1: ", "value 'nan' is not finite");
  ExpectError("NaN,2\n", {}, "1:1: ", "value 'NaN' is not finite");
}

TEST_F(CsvTest, InfRejected) {
  ExpectError("1,2\n3,-inf\n", {}, "2:2: ", "value '-inf' is not finite");
  ExpectError("x,y\r\n\r\n1, Infinity \r\n", {}, "3:2: ", "value 'Infinity' is not finite");
}

TEST_F(CsvTest, OverflowToFloatInfRejected) {
  ExpectError("1,2\n3,1e39\n", {}, "2:2: ", "value '1e39' is too large for a 32-bit float");
  ExpectError("1,-3.5e38\n", {}, "1:2: ", "value '-3.5e38' is too large for a 32-bit float");
  ExpectError("1e400,2\n", {}, "1:1: ", "value '1e400' is too large for a 32-bit float");
}

TEST_F(CsvTest, LabelColumnOutOfRange) {
  ExpectError("1,2,3,4,5\n", Opts(7), "", "label column 7 does not exist (rows have 5 columns)");
  ExpectError("x\n1\n", Opts(3), "", "label column 3 does not exist (rows have 1 column)");
}

TEST_F(CsvTest, NegativeLabelColumn) {
  ExpectError("1,2\n", Opts(-3), "", "label column -3 is invalid (use -1 for the last column)");
}

TEST_F(CsvTest, RegressionLabelMustBeNumeric) {
  ExpectError("x,c\n1,0\n2,cat\n", Opts(-1), "3:2: ",
              "cell 'cat' is not a number (regression needs numeric targets; use --task "
              "classification for class labels)");
}

TEST_F(CsvTest, OneClassIsNotClassification) {
  ExpectError("1,7\n2,7.0\n", Opts(-1, HeaderMode::kAuto, true), "",
              "classification needs at least 2 classes, the labels have 1 ('7')");
}

TEST_F(CsvTest, SingleColumn) {
  ExpectError("y\n1\n2\n", {}, "",
              "rows have 1 column; need at least one feature column besides the label");
}

TEST_F(CsvTest, LineNumbersCountBlankLinesAndCrlf) {
  ExpectError("1,2\r\n\r\n\r\n3,x\r\n", {}, "4:2: ", "cell 'x' is not a number" + kNumericTargets);
}

// ---- ClassMap ----

TEST(ClassMapTest, NumericLabelsSortedByValue) {
  const ClassMap m = ClassMap::Build({"3", "1", "2.0", "1.0"});
  EXPECT_TRUE(m.numeric);
  EXPECT_EQ(m.size(), 3);
  EXPECT_EQ(m.names, (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(m.values, (std::vector<double>{1, 2, 3}));
  // Found by value, whatever the spelling.
  EXPECT_EQ(m.Find("1"), 0);
  EXPECT_EQ(m.Find("1.0"), 0);
  EXPECT_EQ(m.Find("2"), 1);
  EXPECT_EQ(m.Find("3"), 2);
  EXPECT_EQ(m.Find("3.0"), 2);
  EXPECT_EQ(m.Find("+3"), 2);
  EXPECT_EQ(m.Find("0.3e1"), 2);
  EXPECT_EQ(m.Find("4"), -1);
  EXPECT_EQ(m.Find("2.5"), -1);
  EXPECT_EQ(m.Find("0"), -1);
  EXPECT_EQ(m.Find("cat"), -1);
  EXPECT_EQ(m.Find(""), -1);
}

TEST(ClassMapTest, NumericNamesAreShortestText) {
  const ClassMap m = ClassMap::Build({"0.10", "1e20", "-2.50", "+7", "0.1"});
  EXPECT_TRUE(m.numeric);
  EXPECT_EQ(m.names, (std::vector<std::string>{"-2.5", "0.1", "7", "1e+20"}));
  EXPECT_EQ(m.values, (std::vector<double>{-2.5, 0.1, 7, 1e20}));
  EXPECT_EQ(m.Find("-2.5"), 0);
  EXPECT_EQ(m.Find("100000000000000000000"), 3);
}

TEST(ClassMapTest, NegativeZeroAndZeroAreOneClass) {
  const ClassMap m = ClassMap::Build({"-0", "0", "0.0", "-0.0", "1"});
  EXPECT_TRUE(m.numeric);
  EXPECT_EQ(m.names, (std::vector<std::string>{"0", "1"}));
  ASSERT_EQ(m.values.size(), 2u);
  EXPECT_EQ(m.values[0], 0.0);
  EXPECT_FALSE(std::signbit(m.values[0]));
  EXPECT_EQ(m.Find("0"), 0);
  EXPECT_EQ(m.Find("-0"), 0);
  EXPECT_EQ(m.Find("-0.0"), 0);
  // -0 alone is named "0", not "-0".
  const ClassMap n = ClassMap::Build({"-0", "1"});
  EXPECT_EQ(n.names, (std::vector<std::string>{"0", "1"}));
  ASSERT_EQ(n.values.size(), 2u);
  EXPECT_FALSE(std::signbit(n.values[0]));
}

TEST(ClassMapTest, TextLabelsSortedBytewise) {
  const ClassMap m = ClassMap::Build({"dog", "cat", "eel", "cat", "dog"});
  EXPECT_FALSE(m.numeric);
  EXPECT_EQ(m.names, (std::vector<std::string>{"cat", "dog", "eel"}));
  EXPECT_TRUE(m.values.empty());
  EXPECT_EQ(m.Find("cat"), 0);
  EXPECT_EQ(m.Find("dog"), 1);
  EXPECT_EQ(m.Find("eel"), 2);
  EXPECT_EQ(m.Find("fox"), -1);
  EXPECT_EQ(m.Find("Cat"), -1);
  EXPECT_EQ(m.Find("ca"), -1);
  EXPECT_EQ(m.Find("cats"), -1);
  EXPECT_EQ(m.Find("aaa"), -1);
  EXPECT_EQ(m.Find("zzz"), -1);
  EXPECT_EQ(m.Find(""), -1);
  // Bytes, unsigned: upper case before '_' before lower case before UTF-8 lead bytes.
  const ClassMap u = ClassMap::Build({"b", "\xC3\xA9t\xC3\xA9", "B", "a", "_x"});
  EXPECT_FALSE(u.numeric);
  EXPECT_EQ(u.names, (std::vector<std::string>{"B", "_x", "a", "b", "\xC3\xA9t\xC3\xA9"}));
  EXPECT_EQ(u.Find("\xC3\xA9t\xC3\xA9"), 4);
  EXPECT_EQ(u.Find("_x"), 1);
}

TEST(ClassMapTest, MixedNumericAndTextIsText) {
  const ClassMap m = ClassMap::Build({"2.0", "cat", "1", "10"});
  EXPECT_FALSE(m.numeric);
  EXPECT_EQ(m.names, (std::vector<std::string>{"1", "10", "2.0", "cat"}));
  EXPECT_TRUE(m.values.empty());
  // Text classes are compared as text: "2" is not "2.0".
  EXPECT_EQ(m.Find("2.0"), 2);
  EXPECT_EQ(m.Find("2"), -1);
  EXPECT_EQ(m.Find("cat"), 3);
  // A label that is a non-finite number is not numeric either.
  const ClassMap n = ClassMap::Build({"1", "nan"});
  EXPECT_FALSE(n.numeric);
  EXPECT_EQ(n.names, (std::vector<std::string>{"1", "nan"}));
}

// Names in messages are escaped as cells are: a NUL or a byte that is not UTF-8 in a label
// neither cuts the message nor reaches the terminal raw.
TEST(ClassMapTest, ListEscapesNames) {
  const std::string nul("a\0b", 3);
  const ClassMap m = ClassMap::Build({nul, "\xff", "caf\xc3\xa9", "\x1b[31m"});
  EXPECT_EQ(m.List(), "\\x1b[31m, a\\x00b, caf\xc3\xa9, \\xff");
  EXPECT_EQ(m.names[1], nul);  // the names themselves are the labels' bytes
}

TEST(ClassMapTest, EmptyMap) {
  const ClassMap m = ClassMap::Build({});
  EXPECT_TRUE(m.numeric);
  EXPECT_EQ(m.size(), 0);
  EXPECT_EQ(m.Find("0"), -1);
}

// ---- CSV classification with text labels ----

LoadOptions Classify(int label_col = -1) {
  return Opts(label_col, HeaderMode::kAuto, true);
}

TEST_F(CsvTest, TextClassLabels) {
  Dataset ds = Load("x1,x2,animal\n1,2,dog\n3,4,cat\n5,6,eel\n7,8, cat \n", Classify());
  EXPECT_EQ(ds.rows, 4);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0, 2, 0}));
  EXPECT_FALSE(ds.classes.numeric);
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"cat", "dog", "eel"}));
}

TEST_F(CsvTest, NumericClassLabelsMapInValueOrder) {
  Dataset ds = Load("1,3\n2,-1\n3,2.5\n4,3.0\n", Classify());
  EXPECT_EQ(ds.rows, 4);
  EXPECT_EQ(ds.y, (std::vector<float>{2, 0, 1, 2}));
  EXPECT_TRUE(ds.classes.numeric);
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"-1", "2.5", "3"}));
  EXPECT_EQ(ds.classes.values, (std::vector<double>{-1, 2.5, 3}));
}

TEST_F(CsvTest, TextLabelOnFirstLineIsNotAHeader) {
  Dataset ds = Load("1,2,cat\n3,4,dog\n", Classify());
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds.y, (std::vector<float>{0, 1}));
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"cat", "dog"}));
  // The label column given explicitly.
  ds = Load("dog,1,2\ncat,3,4\n", Classify(0));
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0}));
  // A text cell elsewhere on the first line still makes it a header.
  ds = Load("a,b,cat\n1,2,dog\n3,4,cat\n", Classify());
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0}));
  ds = Load("1,b,cat\n1,2,dog\n3,4,cat\n", Classify());
  EXPECT_EQ(ds.rows, 2);
  // Regression: a text last cell on the first line is a header.
  ds = Load("1,2,cat\n3,4,5\n");
  EXPECT_EQ(ds.rows, 1);
  EXPECT_EQ(ds.y, (std::vector<float>{5}));
  // Classifying with the label in column 0, a text cell in the last column is a header cell.
  ds = Load("1,2,x\n0,3,4\n1,5,6\n", Classify(0));
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{3, 4, 5, 6}));
}

TEST_F(CsvTest, GivenClassMap) {
  const ClassMap map = ClassMap::Build({"cat", "dog", "eel"});
  LoadOptions o = Classify();
  o.classes = &map;
  // Only two of the three classes appear; indices are the given map's.
  Dataset ds = Load("1,2,eel\n3,4,cat\n5,6,eel\n", o);
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.y, (std::vector<float>{2, 0, 2}));
  EXPECT_FALSE(ds.classes.numeric);
  EXPECT_EQ(ds.classes.names, map.names);
  // One class only is fine with a given map.
  ds = Load("1,2,dog\n3,4,dog\n", o);
  EXPECT_EQ(ds.y, (std::vector<float>{1, 1}));
  EXPECT_EQ(ds.classes.names, map.names);
}

TEST_F(CsvTest, LabelNotInGivenClassMap) {
  const ClassMap map = ClassMap::Build({"cat", "dog", "eel"});
  LoadOptions o = Classify();
  o.classes = &map;
  ExpectError("x,y,c\n1,2,cat\n\n3,4, fox\n", o, "4:3: ",
              "label 'fox' is not one of the model's 3 classes (cat, dog, eel)");
  o.file.label_col = 0;
  ExpectError("cat,1\nCat,2\n", o, "2:1: ",
              "label 'Cat' is not one of the model's 3 classes (cat, dog, eel)");
  // A numeric map: matched by value.
  const ClassMap nums = ClassMap::Build({"0", "1"});
  LoadOptions n = Classify();
  n.classes = &nums;
  Dataset ds = Load("5,1.0\n6,0\n7,1e0\n", n);
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0, 1}));
  EXPECT_TRUE(ds.classes.numeric);
  ExpectError("5,1\n6,2\n", n, "2:2: ", "label '2' is not one of the model's 2 classes (0, 1)");
  // More than 12 classes: the first 12 are listed.
  std::vector<std::string> names;
  for (int k = 0; k < 13; ++k) names.push_back("c" + std::string(k < 10 ? "0" : "") + std::to_string(k));
  const ClassMap many = ClassMap::Build({names.begin(), names.end()});
  LoadOptions m = Classify();
  m.classes = &many;
  ExpectError("1,c00\n2,c13\n", m, "2:2: ",
              "label 'c13' is not one of the model's 13 classes (c00, c01, c02, c03, c04, c05, "
              "c06, c07, c08, c09, c10, c11, ...)");
}

TEST_F(CsvTest, EmptyClassLabel) {
  ExpectError("1,2,cat\n3,4, \n", Classify(), "2:3: ", "label cell is empty");
}

// A class name goes into predict's CSV, messages and logs: a label holding a control byte (a
// NUL, a tab, ...), which a damaged or binary file gives, was written raw into predict's
// output, where C tools, R and Python's csv before 3.11 stop at a NUL. It is refused where it
// is first seen, with a given class map too.
TEST_F(CsvTest, ClassLabelWithAControlByteRefused) {
  const std::string why = " (class names must be printable text)";
  ExpectError(std::string("x,y\n1,cat\n2,\"a\0b\"\n3,a\0b\n", 24), Classify(),
              "3:2: ", "label 'a\\x00b' holds a control byte (\\x00 at byte 1)" + why);
  ExpectError("x,y\n1,cat\n2,\"c\ta\"\n", Classify(),
              "3:2: ", "label 'c\\x09a' holds a control byte (\\x09 at byte 1)" + why);
  ExpectError("1;\"\x7f\"\n2;dog\n", Classify(),
              "1:2: ", "label '\\x7f' holds a control byte (\\x7f at byte 0)" + why);
  const ClassMap map = ClassMap::Build({"cat", "dog"});
  LoadOptions o = Classify();
  o.classes = &map;
  ExpectError("1,dog\n2,\"\x01\"\n", o,
              "2:2: ", "label '\\x01' holds a control byte (\\x01 at byte 0)" + why);
}

// The check itself is a boundary's Status (docs/errors.md): ok for printable text (UTF-8's
// bytes above 0x7f included), kData naming the first control byte and where it is.
TEST(ClassNames, CheckNameIsAStatus) {
  EXPECT_TRUE(ClassMap::CheckName("cat").ok());
  EXPECT_TRUE(ClassMap::CheckName("").ok());
  EXPECT_TRUE(ClassMap::CheckName("chat \xc3\xa9 ~").ok());
  const Status nul = ClassMap::CheckName(std::string_view("c\0t\n", 4));
  EXPECT_EQ(nul.code(), Status::Code::kData);
  EXPECT_EQ(nul.message(), "holds a control byte (\\x00 at byte 1)");
  const Status del = ClassMap::CheckName("ab\x7f");
  EXPECT_EQ(del.code(), Status::Code::kData);
  EXPECT_EQ(del.message(), "holds a control byte (\\x7f at byte 2)");
}

TEST_F(CsvTest, NanClassLabelRefused) {
  ExpectError("1,cat\n2,nan\n3,dog\n", Classify(), "2:2: ", "value 'nan' is not finite");
  ExpectError("x,c\n1,0\n2,1\n3, NaN \n", Classify(), "4:2: ", "value 'NaN' is not finite");
  ExpectError("1,0\n2,\"nan\"\n", Classify(), "2:2: ", "value 'nan' is not finite");
  ExpectError("nan,1,2\n", Classify(0), "1:1: ", "value 'nan' is not finite");
  ExpectError("1,0\n2,-inf\n", Classify(), "2:2: ", "value '-inf' is not finite");
  ExpectError("1;0\n2;Infinity\n", Classify(), "2:2: ", "value 'Infinity' is not finite");
  // Through a given map too (eval, predict with labels).
  const ClassMap map = ClassMap::Build({"0", "1"});
  LoadOptions o = Classify();
  o.classes = &map;
  ExpectError("1,0\n2,nan\n", o, "2:2: ", "value 'nan' is not finite");
  // Text that merely starts like one is a class.
  Dataset ds = Load("1,nancy\n2,info\n3,inferno\n4,nan2\n", Classify());
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"inferno", "info", "nan2", "nancy"}));
}

// ---- Label column by name ----

TEST_F(CsvTest, LabelColumnByName) {
  LoadOptions o;
  o.file.label_name = "digit";
  Dataset ds = Load("a, digit ,b\n1,7,2\n3,8,4\n", o);
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds.y, (std::vector<float>{7, 8}));
  // label_name wins over label_col.
  o.file.label_col = 0;
  ds = Load("a,digit,b\n1,7,2\n", o);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2}));
  EXPECT_EQ(ds.y, (std::vector<float>{7}));
  // Classification with text labels in the named column.
  o.task = Task::kClassification;
  o.file.label_name = "kind";
  ds = Load("a,kind,b\n1,dog,2\n3,cat,4\n", o);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0}));
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"cat", "dog"}));
}

TEST_F(CsvTest, LabelNameNotInHeader) {
  LoadOptions o;
  o.file.label_name = "x";
  ExpectError("a,digit,b\n1,2,3\n", o, "1: ", "label column 'x' is not in the header (a, digit, b)");
  ExpectError("\n\na , digit,b\n1,2,3\n", o, "3: ",
              "label column 'x' is not in the header (a, digit, b)");
  ExpectError("c0,c1,c2,c3,c4,c5,c6,c7,c8,c9\n1,2,3,4,5,6,7,8,9,10\n", o, "1: ",
              "label column 'x' is not in the header (c0, c1, c2, c3, c4, c5, c6, c7, ...)");
}

TEST_F(CsvTest, LabelNameWithoutHeader) {
  LoadOptions o;
  o.file.label_name = "digit";
  o.file.header = HeaderMode::kNo;
  ExpectError("1,2,3\n4,5,6\n", o, "",
              "label column 'digit' is named, but the file has no header line to find it in");
}

TEST_F(CsvTest, LabelNameImpliesHeader) {
  LoadOptions o;
  o.file.label_name = "2";
  Dataset ds = Load("1,2,3\n4,5,6\n7,8,9\n", o);
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{4, 6, 7, 9}));
  EXPECT_EQ(ds.y, (std::vector<float>{5, 8}));
  o.file.header = HeaderMode::kYes;
  ds = Load("1,2,3\n4,5,6\n", o);
  EXPECT_EQ(ds.x, (std::vector<float>{4, 6}));
  EXPECT_EQ(ds.y, (std::vector<float>{5}));
}

// ---- Predict data (no labels) and a fixed width ----

LoadOptions NoLabels(int features, Task task = Task::kRegression) {
  LoadOptions o;
  o.features = features;
  o.no_labels = true;
  o.task = task;
  return o;
}

TEST_F(CsvTest, NoLabelsWithFeatureColumnsOnly) {
  Dataset ds = Load("1,2\n3,4\n5,6\n", NoLabels(2));
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(ds.y.empty());
  // The same for a classifier (no class map is built or needed).
  ds = Load("a,b\n1,2\n3,4\n", NoLabels(2, Task::kClassification));
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(ds.y.empty());
  EXPECT_EQ(ds.classes.size(), 0);
  // One feature, one column.
  ds = Load("1\n2\n", NoLabels(1));
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2}));
  EXPECT_TRUE(ds.y.empty());
}

TEST_F(CsvTest, NoLabelsSkipsTheLabelColumn) {
  // The label cells are not read: text, empty or not a number.
  Dataset ds = Load("a,b,y\n1,2,9\n3,4,cat\n5,6,\n", NoLabels(2));
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(ds.y.empty());
  LoadOptions o = NoLabels(2, Task::kClassification);
  o.file.label_col = 0;
  ds = Load("k,a,b\nfox,1,2\ncat,3,4\n", o);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(ds.y.empty());
  EXPECT_EQ(ds.classes.size(), 0);
}

TEST_F(CsvTest, NoLabelsTextLabelOnFirstLineIsNotAHeader) {
  // Predicting on the headerless file a classifier was trained on: its first line is data,
  // as when training (TextLabelOnFirstLineIsNotAHeader), so every row gets a prediction.
  Dataset ds = Load("1,2,cat\n3,4,dog\n", NoLabels(2, Task::kClassification));
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_TRUE(ds.y.empty());
}

TEST_F(CsvTest, NoLabelsWrongWidth) {
  ExpectError("1,2,3,4\n", NoLabels(2), "1: ",
              "rows have 3 features besides the label, the model takes 2");
  ExpectError("a,b,c,d,e\n1,2,3,4,5\n", NoLabels(3), "1: ",
              "rows have 4 features besides the label, the model takes 3");
  ExpectError("1,2\n", NoLabels(3), "1: ", "rows have 1 feature besides the label, the model takes 3");
}

TEST_F(CsvTest, FixedFeatureCount) {
  LoadOptions o;
  o.features = 2;
  Dataset ds = Load("a,b,y\n1,2,3\n", o);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2}));
  EXPECT_EQ(ds.y, (std::vector<float>{3}));
  o.features = 3;
  ExpectError("a,b,y\n1,2,3\n", o, "1: ", "rows have 2 features besides the label, the model takes 3");
  o.features = 1;
  ExpectError("\n1,2,3\n", o, "2: ", "rows have 2 features besides the label, the model takes 1");
  o.features = 2;
  ExpectError("1,2\n", o, "1: ", "rows have 1 feature besides the label, the model takes 2");
}

// ---- Quoted cells (RFC 4180) ----

// a and b hold the same data, bit for bit: shape, features, targets and class map.
void ExpectSameDataset(const Dataset& a, const Dataset& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.features, b.features);
  ASSERT_EQ(a.x.size(), b.x.size());
  ASSERT_EQ(a.y.size(), b.y.size());
  EXPECT_EQ(std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(float)), 0);
  EXPECT_EQ(a.classes.numeric, b.classes.numeric);
  EXPECT_EQ(a.classes.names, b.classes.names);
  EXPECT_EQ(a.classes.values, b.classes.values);
}

TEST_F(CsvTest, QuotedNumbersReadAsUnquoted) {
  // Quoted numbers are numbers: the first line is data, not a header.
  const Dataset plain = Load("1.5,2,0\n3,-4e2,1\n");
  const Dataset quoted = Load("\"1.5\",\"2\",0\n\"3\", \"-4e2\" ,\"1\"\n");
  EXPECT_EQ(quoted.rows, 2);
  EXPECT_EQ(quoted.x, (std::vector<float>{1.5f, 2, 3, -400}));
  EXPECT_EQ(quoted.y, (std::vector<float>{0, 1}));
  ExpectSameDataset(quoted, plain);
}

TEST_F(CsvTest, QuotedHeaderAndTextLabelsAsRAndPandasWriteThem) {
  const std::string plain =
      "sepal.length,sepal.width,species\n"
      "5.1,3.5,Iris-setosa\n"
      "4.9,3,Iris-versicolor\n"
      "6.2,3.4,Iris-setosa\n";
  // R's write.csv: names and text quoted, numbers not.
  const std::string r =
      "\"sepal.length\",\"sepal.width\",\"species\"\n"
      "5.1,3.5,\"Iris-setosa\"\n"
      "4.9,3,\"Iris-versicolor\"\n"
      "6.2,3.4,\"Iris-setosa\"\n";
  // pandas with quoting=csv.QUOTE_ALL, and \r\n.
  const std::string all =
      "\"sepal.length\",\"sepal.width\",\"species\"\r\n"
      "\"5.1\",\"3.5\",\"Iris-setosa\"\r\n"
      "\"4.9\",\"3\",\"Iris-versicolor\"\r\n"
      "\"6.2\",\"3.4\",\"Iris-setosa\"\r\n";
  for (LoadOptions o : {Classify(), Classify(2)}) {
    const Dataset want = Load(plain, o);
    EXPECT_EQ(want.rows, 3);
    EXPECT_EQ(want.classes.names, (std::vector<std::string>{"Iris-setosa", "Iris-versicolor"}));
    EXPECT_EQ(want.y, (std::vector<float>{0, 1, 0}));
    ExpectSameDataset(Load(r, o), want);
    ExpectSameDataset(Load(all, o), want);
    // The label column found by its quoted name.
    o.file.label_name = "species";
    ExpectSameDataset(Load(r, o), want);
    ExpectSameDataset(Load(all, o), want);
  }
  // Regression: a quoted text target is still not a number, shown without its quotes.
  ExpectError(r, {}, "2:3: ", "cell 'Iris-setosa' is not a number" + kNumericTargets);
}

TEST_F(CsvTest, QuotedDelimiterAndDoubledQuoteAreText) {
  LoadOptions o = Classify();
  o.file.label_name = "kind, \"short\"";
  Dataset ds = Load(
      "\"len, cm\",\"kind, \"\"short\"\"\",w\n"
      "1,\"cat, black\",2\n"
      "3,\"say \"\"hi\"\"\",4\n"
      "5,\"cat, black\",6\n",
      o);
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ds.y, (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"cat, black", "say \"hi\""}));
  // The header's names as the message shows them: unquoted, "" read as '"'.
  o.file.label_name = "kind";
  ExpectError("\"len, cm\",\"kind, \"\"short\"\"\",w\n1,cat,2\n", o, "1: ",
              "label column 'kind' is not in the header (len, cm, kind, \"short\", w)");
}

TEST_F(CsvTest, QuotedEmptyCell) {
  ExpectError("1,2,3\n4,\"\",6\n", {}, "2:2: ", "cell is empty");
  ExpectError("1,2,cat\n3,4,\"  \"\n", Classify(), "2:3: ", "label cell is empty");
  // R's row-name column: an empty quoted header name, quoted row numbers as a feature.
  LoadOptions o;
  o.file.label_name = "y";
  Dataset ds = Load("\"\",\"x\",\"y\"\n\"1\",0.5,2\n\"2\",1.5,3\n", o);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 0.5f, 2, 1.5f}));
  EXPECT_EQ(ds.y, (std::vector<float>{2, 3}));
}

TEST_F(CsvTest, UnclosedQuoteIsAnError) {
  const std::string unclosed =
      "quoted cell has no closing quote (a quoted cell must end on its line)";
  ExpectError("1,2,3\n4,\"5,6\n", {}, "2:2: ", unclosed);
  ExpectError("\"a\",\"b\n1,2\n", {}, "1:2: ", unclosed);
  // A line break inside quotes is not read across lines.
  ExpectError("x,y\n1,\"two\nlines\"\n", Classify(), "2:2: ", unclosed);
  // A doubled quote does not close the cell.
  ExpectError("1,\"2\"\"\n", {}, "1:2: ", unclosed);
  ExpectError("1;2;3\n4;5;\"6\n", {}, "2:3: ", unclosed);
  // Only spaces may follow the closing quote.
  ExpectError("1,2\n\"3\"x,4\n", {}, "2:1: ",
              "text after the closing quote of a quoted cell (write \"\" for a quote inside one)");
}

TEST_F(CsvTest, QuoteInsideUnquotedCellIsText) {
  Dataset ds = Load("1,5'11\"\n2,6'1\"\n", Classify());
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"5'11\"", "6'1\""}));
  ExpectError("1,2\n3,4\"\n", {}, "2:2: ", "cell '4\"' is not a number" + kNumericTargets);
}

// ---- Delimiters ----

LoadOptions Delim(char d, LoadOptions o = {}) {
  o.file.delimiter = d;
  return o;
}

TEST_F(CsvTest, SemicolonAndTabDetected) {
  const Dataset comma = Load("a,b,y\n1,2.5,3\n4,5,6\n");
  ExpectSameDataset(Load("a;b;y\n1;2.5;3\n4;5;6\n"), comma);
  ExpectSameDataset(Load("a\tb\ty\n1\t2.5\t3\n4\t5\t6\n"), comma);
  // Without a header, with spaces around cells, blank lines and \r\n.
  const Dataset headless = Load("1,2.5,3\n4,5,6\n");
  ExpectSameDataset(Load("\r\n 1 ; 2.5;3 \r\n\r\n4;5 ;6\r\n"), headless);
  ExpectSameDataset(Load("1\t 2.5 \t3\n4\t5\t6\n"), headless);
  // One line only.
  ExpectSameDataset(Load("1;2.5;3\n"), Load("1,2.5,3\n"));
  // Quoted delimiters do not count: ';' outside quotes on both lines decides.
  ExpectError("\"a,b\";\"c,d\";y\n1;\"2,x\";cat\n", Classify(), "2:2: ",
              "cell '2,x' is not a number");
  Dataset ds = Load("\"a,b\";\"c,d\";y\n1;2;cat\n3;4;dog\n", Classify());
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"cat", "dog"}));
  // A comma file whose header has a ';' in a name stays a comma file (',' on both lines).
  ds = Load("a;1,b,y\n1,2,3\n");
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2}));
  // A tab file keeps an empty cell between two tabs.
  ExpectError("1\t2\t3\n4\t\t6\n", {}, "2:2: ", "cell is empty");
}

TEST_F(CsvTest, ForcedDelimiter) {
  // ',' and ';' both once per line: detection takes ',', and the ';' file needs the flag.
  const std::string text = "1;cat, black\n2;dog, white\n3;cat, black\n";
  // (Its first line has a text cell, so it is read as a header.)
  ExpectError(text, Classify(), "2:1: ",
              "cell '2;dog' is not a number (the line looks ';'-separated: try --delimiter ';')");
  Dataset ds = Load(text, Delim(';', Classify()));
  EXPECT_EQ(ds.rows, 3);
  EXPECT_EQ(ds.features, 1);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(ds.y, (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"cat, black", "dog, white"}));
  // Forced tab and ',' read what detection would.
  ExpectSameDataset(Load("1\t2\n3\t4\n", Delim('\t')), Load("1,2\n3,4\n"));
  ExpectSameDataset(Load("1,2\n3,4\n", Delim(',')), Load("1,2\n3,4\n"));
  ExpectError("1,2\n", Delim('|'), "", "delimiter '|' is not supported (use ',', ';' or tab)");
}

TEST_F(CsvTest, WrongDelimiterHints) {
  const std::string semi = " (the line looks ';'-separated: try --delimiter ';')";
  // One cell per line.
  ExpectError("1;2;3\n4;5;6\n", Delim(','), "",
              "rows have 1 column; need at least one feature column besides the label" + semi);
  // European decimals read with ','.
  ExpectError("1,5;2,0;3\n", Delim(',', Opts(-1, HeaderMode::kNo)), "1:2: ",
              "cell '5;2' is not a number" + semi);
  ExpectError("a;b;y\n1,5;2,0;3\n", Delim(','), "",
              "rows have 1 column; need at least one feature column besides the label" + semi);
  // ... and with ';', decimal commas past the first lines (which decide the separator).
  ExpectError("a;b;y\n1;2;3\n1;2,0;3\n", {}, "3:2: ",
              "cell '2,0' is not a number (a decimal comma? --decimal , reads '2,0' as a number)");
  // A tab file read with ';', and a comma file read as tab-separated.
  ExpectError("a\tb\ty\n1\t2\t3\n", Delim(';'), "",
              "rows have 1 column; need at least one feature column besides the label (the line "
              "looks tab-separated: try --delimiter tab)");
  ExpectError("1,2,3\n", Delim('\t'), "",
              "rows have 1 column; need at least one feature column besides the label (the line "
              "looks ','-separated: try --delimiter ',')");
  // Ragged rows, a missing label column, a named label not found, the model's width and a
  // regression target.
  ExpectError("1,2,3\n4;5;6\n", {}, "2: ", "row has 1 cell, expected 3 (as on line 1)" + semi);
  ExpectError("1;2;3\n", Delim(',', Opts(2)), "",
              "label column 2 does not exist (rows have 1 column)" + semi);
  LoadOptions named = Delim(',');
  named.file.label_name = "y";
  ExpectError("a;b;y\n1;2;3\n", named, "1: ",
              "label column 'y' is not in the header (a;b;y)" + semi);
  LoadOptions wide = Delim(',');
  wide.features = 3;
  ExpectError("a,b;c,y\n1,2;3,4\n", wide, "1: ",
              "rows have 2 features besides the label, the model takes 3" + semi);
  ExpectError("a,y\n1,2;3\n", {}, "2:2: ",
              "cell '2;3' is not a number" + kNumericTargets + semi);
  // No hint: delimiters inside quotes, and tabs around cells of a comma file.
  ExpectError("1,\"2;3\"\n", Delim(',', Opts(-1, HeaderMode::kNo)), "1:2: ",
              "cell '2;3' is not a number" + kNumericTargets);
  ExpectError("x,y\n1\t,\tz\n", {}, "2:2: ", "cell 'z' is not a number" + kNumericTargets);
}

// ---- The fast path, blocks and threads ----
//
// Rows are parsed on a fast path that hands anything unusual to the general one, in blocks of
// whole lines, and in two threads per block: none of it may change a value or a message.

// What std::from_chars then a cast to float gives (the loader's reference), or nullopt where
// from_chars does not read the whole text as a finite double.
std::optional<float> ReferenceFloat(std::string_view s, double* as_double = nullptr) {
  if (s.size() >= 2 && s[0] == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  if (as_double) *as_double = v;
  return static_cast<float>(v);
}

// FastDecimal on `s` as a loader sees it (the cell's end, the line's end, readable bytes
// after): whether it took the cell, with the value and the bytes it read.
bool Fast(const std::string& s, double* v, size_t* used = nullptr) {
  const std::string line = s + ",\n" + std::string(16, '\0');
  const char* p = line.data();
  if (!text::FastDecimal(&p, v)) return false;
  if (used) *used = static_cast<size_t>(p - line.data());
  return true;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
uint64_t Bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}

TEST(FastDecimalTest, TakesCommonNumbersBitForBit) {
  for (const char* s : {"0", "-0", "+5", "255", "007", "0.1", "-0.125", ".5", "5.", "-.5", "1e5",
                        "1.5E-3", "2.5e+2", "9007199254740992", "0.0000000000000001",
                        "1234567", "12345678", "-9999999", "1e22", "1e-22", "0e999", "-0.0"}) {
    double fast = 0, ref = 0;
    ASSERT_TRUE(Fast(s, &fast)) << s << " should take the fast path";
    size_t used = 0;
    Fast(s, &fast, &used);
    EXPECT_EQ(used, std::strlen(s)) << s;
    const std::optional<float> want = ReferenceFloat(s, &ref);
    ASSERT_TRUE(want.has_value()) << s;
    EXPECT_EQ(Bits(fast), Bits(ref)) << s;
    EXPECT_EQ(Bits(static_cast<float>(fast)), Bits(*want)) << s;
  }
}

TEST(FastDecimalTest, LeavesTheRestToParseCell) {
  // Too many digits, a mantissa beyond 2^53, a power of ten beyond 10^22, or not a number at
  // all: the general parser's (which reads these as before or names the error).
  for (const char* s : {"123456789012345678", "9007199254740993", "3.4028235e38", "1e23",
                        "1e-23", "1e", "1e+", ".", "-", "+", "", "+-5", "-+5", "--5", "nan",
                        "inf", "-inf", "x", "e5", ".e5", "1e00001", "00000000000000000001",
                        "0.0000000000000000000001"}) {
    double v = 0;
    EXPECT_FALSE(Fast(s, &v)) << s;
  }
  // It stops where the number does: what follows is the caller's to check.
  double v = 0;
  size_t used = 0;
  ASSERT_TRUE(Fast("12x", &v, &used));
  EXPECT_EQ(used, 2u);
  ASSERT_TRUE(Fast("0x1", &v, &used));
  EXPECT_EQ(used, 1u);
}

TEST(FastDecimalTest, RandomNumeralsMatchFromChars) {
  std::mt19937_64 rng(20240611);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  int taken = 0;
  for (int i = 0; i < 300000; ++i) {
    std::string s;
    if (pick(4) == 0) s += pick(2) ? '-' : '+';
    const int digits = 1 + pick(19);
    const int point = pick(3) == 0 ? -1 : pick(digits + 1);
    for (int d = 0; d < digits; ++d) {
      if (d == point) s += '.';
      s += static_cast<char>('0' + (d == 0 && pick(3) ? 1 + pick(9) : pick(10)));
    }
    if (point == digits) s += '.';
    if (pick(3) == 0) s += (pick(2) ? "e" : "E") + std::to_string(pick(61) - 30);
    double fast = 0, ref = 0;
    if (!Fast(s, &fast)) continue;
    ++taken;
    const std::optional<float> want = ReferenceFloat(s, &ref);
    ASSERT_TRUE(want.has_value()) << s;
    ASSERT_EQ(Bits(fast), Bits(ref)) << s;
    ASSERT_EQ(Bits(static_cast<float>(fast)), Bits(*want)) << s;
  }
  EXPECT_GT(taken, 100000);  // the test exercised the fast path
}

// The same numbers read by the fast path (plain cells) and by the general one (quoted cells,
// which only the general path reads): the same bits.
TEST_F(CsvTest, FastAndGeneralPathsGiveTheSameBits) {
  const std::vector<std::string> cells = {
      "0.1", "-0", "+5", "1e5", "007", "123456789012345678", "3.4028235e38", ".5", "5.", "255",
      "-1e-400", "0.30000000000000004", "16777217", "1.17549435e-38", "7e-46", "-2.5E-2"};
  std::string plain, quoted;
  for (size_t i = 0; i < cells.size(); ++i) {
    plain += cells[i] + (i % 4 == 3 ? "\n" : ",");
    quoted += "\"" + cells[i] + "\"" + (i % 4 == 3 ? "\n" : ",");
  }
  const Dataset a = Load(plain), b = Load(quoted);
  EXPECT_EQ(a.rows, 4);
  ExpectSameDataset(a, b);
  // And as the reference reads them.
  for (size_t i = 0; i < cells.size(); ++i) {
    const float got = i % 4 == 3 ? a.y[i / 4] : a.x[i / 4 * 3 + i % 4];
    const std::optional<float> want = ReferenceFloat(cells[i]);
    if (want) {
      EXPECT_EQ(Bits(got), Bits(*want)) << cells[i];
    }
  }
}

// Like ExpectSameDataset, and for datasets without targets too (predict data).
void ExpectSameBits(const Dataset& a, const Dataset& b) {
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = Bits(v[i]);
    return out;
  };
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(bits(a.x), bits(b.x));
  EXPECT_EQ(bits(a.y), bits(b.y));
  EXPECT_EQ(a.classes.numeric, b.classes.numeric);
  EXPECT_EQ(a.classes.names, b.classes.names);
  EXPECT_EQ(a.classes.values, b.classes.values);
}

// Loads `path` through LoadText with every block size from 1 to past the file's size, in one
// thread and in two (every block split), and expects what LoadFile gives: the same dataset, or
// the same status.
class BlocksTest : public CsvTest {
 protected:
  void ExpectSameEverySplit(const std::string& content, const LoadOptions& opts,
                            const std::string& name = "data.csv") {
    const std::string path = Write(content, name);
    Dataset want;
    const Status want_s = LoadFile(path, opts, &want);
    for (size_t block = 1; block <= content.size() + 2; ++block) {
      for (int threads : {1, 2}) {
        TextTuning t;
        t.block_bytes = block;
        t.threads = threads;
        t.min_split_bytes = 2;
        Dataset got;
        const Status s = LoadText(path, opts, t, &got);
        const std::string where = "block " + std::to_string(block) + ", threads " +
                                  std::to_string(threads) + ", file:\n" + content;
        ASSERT_EQ(s.code(), want_s.code()) << s.message() << "\n" << where;
        ASSERT_EQ(s.message(), want_s.message()) << where;
        if (s.ok()) ExpectSameBits(got, want);
        if (HasFailure()) {
          ADD_FAILURE() << where;
          return;
        }
      }
    }
  }
};

TEST_F(BlocksTest, GoodFilesAnyBlockAnyThreads) {
  // Rows longer than small blocks, CRLF (split between \r and \n at some block size), blank
  // lines, a byte order mark, no final newline, quoted cells, slow-path numbers, pads.
  const std::string rows =
      "a,b,y\r\n1,2.5,3\r\n\r\n-4e2,\"5\",6\r\n 7 ,\t8\t,9\r\n1e-400,0.1,12345678901234567890\r\n";
  ExpectSameEverySplit(rows, {});
  ExpectSameEverySplit("\xEF\xBB\xBF" "1;2;3\n\n4;5;6", {});
  ExpectSameEverySplit("x1,x2,c\n1,2,cat\n3,4,\"dog\"\n5,6, cat \n7,8,\"say \"\"hi\"\"\"\n9,0,dog",
                       Classify());
  ExpectSameEverySplit("c,x\n3,1\n1,2\n2.0,3\n-0,4\n0,5\n", Classify(0));
  LoadOptions named = Classify();
  named.file.label_name = "c";
  ExpectSameEverySplit("x,c,z\n1,a,2\n3,b,4\n", named);
  ExpectSameEverySplit("1,2,3\n4,5,6\n", NoLabels(2));
  ExpectSameEverySplit("1 1:2 3:4\r\n# c\n\n0 2:1\n-1 1:1e-3", {}, "d.svm");
  // '\r' line ends, decided at the first whatever the block (split inside "\r\r\n" too).
  ExpectSameEverySplit("x,c\r1,a\r\r2,b\r3,a", Classify());
  ExpectSameEverySplit("x,c\r\r\n1,a\r\r\n2,b\r\n3,a\r\r\r\n", Classify());
  ExpectSameEverySplit("1 1:2 3:4\r# c\r\r0 2:1\r-1 1:1e-3\r", {}, "d.svm");
  ExpectSameEverySplit("1,5;2;3\n4;5,5;-6,25e1\n7;8;9\n", {});  // decimal commas
}

TEST_F(BlocksTest, ErrorsAnyBlockAnyThreads) {
  ExpectSameEverySplit("a,b,y\n1,2,3\n4,5,6\n7,x,9\n1,2,3\n", {});
  ExpectSameEverySplit("a,b,y\n1,2,3\n4,5\n7,8,9\n", {});
  ExpectSameEverySplit("a,b,y\r\n1,2,3\r\n4,5,6\r\n7,8,\r\n", {});
  ExpectSameEverySplit("a,b,y\n1,2,3\n4,\"5,6\n7,8,9\n", {});
  ExpectSameEverySplit("a,b,y\n1,2,3\n4,5,nan\n7,8,9", Classify());
  ExpectSameEverySplit("1;2;3\n4;5;6\n7;8,5;9\n", {});  // the decimal-comma hint
  ExpectSameEverySplit("a;b;y\n1,5;2;3\n4;5,5;6.5\n", {});  // one decimal separator
  LoadOptions given = Classify();
  const ClassMap map = ClassMap::Build({"a", "b"});
  given.classes = &map;
  ExpectSameEverySplit("x,c\n1,a\n2,b\n3,z\n4,a\n5,y\n", given);
  ExpectSameEverySplit("1 1:2\n0 2:1\n1 1:1 1:2\n", {}, "d.svm");
  ExpectSameEverySplit("x,y\n1,2\n3,4\r5\n", {});
}

LoadOptions Decimal(char d, LoadOptions o = {}) {
  o.file.decimal = d;
  return o;
}

// A ';'-separated file with decimal commas (R's write.csv2, spreadsheets in many locales) reads
// as the same file with decimal points, float for float; detected from its first two lines,
// with or without a header, or given.
TEST_F(CsvTest, DecimalCommas) {
  const Dataset dot = Load("a,b,y\n1.5,2.0,3\n-0.25,1e3,4.5\n+0.1,7,-1.75e-2\n");
  ExpectSameBits(Load("a;b;y\n1,5;2,0;3\n-0,25;1e3;4,5\n+0,1;7;-1,75e-2\n"), dot);
  ExpectSameBits(Load("1,5;2,0;3\r\n-0,25;1e3;4,5\r\n+0,1;7;-1,75e-2\r\n"), dot);
  ExpectSameBits(Load("a;b;y\n1,5;2;3\n-0,25;1e3;4,5\n+0,1;7;-1,75e-2\n"), dot);
  // Given: past the first lines, and with tabs.
  ExpectSameBits(Load("a;b;y\n1;2;3\n-0,25;1e3;4,5\n", Decimal(',')),
                 Load("a,b,y\n1,2,3\n-0.25,1e3,4.5\n"));
  ExpectSameBits(Load("a\tb\ty\n1,5\t2,0\t3\n", Decimal(',')), Load("a,b,y\n1.5,2.0,3\n"));
  // Text class labels are text, with or without commas.
  const Dataset c = Load("x;k\n0,5;a,b\n1,5;c\n", Decimal(',', Classify()));
  EXPECT_EQ(c.classes.names, (std::vector<std::string>{"a,b", "c"}));
  // One separator per file.
  ExpectError("a;b;y\n1,5;2.5;3\n", {}, "2:2: ",
              "cell '2.5' is not a number (the decimal separator is ',' in this file: --decimal . "
              "reads '.')");
  ExpectError("a;b;y\n1,5;2;3.5\n", {}, "2:3: ",
              "cell '3.5' is not a number" + kNumericTargets +
                  " (the decimal separator is ',' in this file: --decimal . reads '.')");
  ExpectError("a;b;y\n1,5;2;3\n", Decimal('.'), "2:1: ",
              "cell '1,5' is not a number (a decimal comma? --decimal , reads '1,5' as a number)");
  ExpectError("a,b\n1,2\n", Decimal(',', Delim(',')), "",
              "decimal separator ',' needs another delimiter than ',' (';' or tab)");
  ExpectError("a,b\n1,2\n", Decimal('x'), "",
              "decimal separator 'x' is not supported (use '.' or ',')");
}

// "d,ddd" parses to exactly the double "d.ddd" does, for random numerals of every kind.
TEST(ParseNumberTest, DecimalCommaIsBitForBitTheDecimalPoint) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    std::string dot = std::to_string(rng() % 1000000) + "." + std::to_string(rng());
    if (i % 3 == 0) dot = "-" + dot;
    if (i % 5 == 0) dot += "e" + std::to_string(static_cast<int>(rng() % 60) - 30);
    std::string comma = dot;
    comma[comma.find('.')] = ',';
    double a = 0, b = 0;
    ASSERT_EQ(text::ParseCell(dot, &a), text::Cell::kOk) << dot;
    ASSERT_EQ(text::ParseNumber(comma, ',', &b), text::Cell::kOk) << comma;
    ASSERT_EQ(std::bit_cast<uint64_t>(a), std::bit_cast<uint64_t>(b)) << comma;
  }
  double v = 0;
  EXPECT_EQ(text::ParseNumber("1.5", ',', &v), text::Cell::kNotNumber);
  EXPECT_EQ(text::ParseNumber("1,5", '.', &v), text::Cell::kNotNumber);
  EXPECT_EQ(text::ParseNumber("1,5,0", ',', &v), text::Cell::kNotNumber);
}

// In a file of '\n' line ends only the '\r's that end a line go; one anywhere else is a byte
// of its cell.
TEST_F(CsvTest, CarriageReturnInsideALineIsText) {
  ExpectError("x,y\n1,2\r3\n", {}, "2:2: ", "cell '2\\x0d3' is not a number" + kNumericTargets);
  ExpectError("x,y,z\n1\r,2,3\n", {}, "2:1: ", "cell '1\\x0d' is not a number");
  ExpectError("x,y,z\n1,2 \r,3\n", {}, "2:2: ", "cell '2 \\x0d' is not a number");
  // In a label too, where it is then refused: class names are printable text.
  ExpectError("x,c\n1,a\rb\n2,a\r\n", Classify(), "2:2: ",
              "label 'a\\x0db' holds a control byte (\\x0d at byte 1) (class names must be "
              "printable text)");
}

// Every '\r' that ends a line goes ("\r\r\n", as a doubled conversion writes it): a label is
// one class however many there are, on the fast path (plain rows) and the general one (a
// quoted cell, the first line without a header).
TEST_F(CsvTest, TrailingCarriageReturnsDropped) {
  const std::string want = "1,a\n2,b\n3,c\n4,a\n5,b\n6,c\n";
  for (const std::string& got :
       {std::string("1,a\r\r\n2,b\r\n3,c\n4,a\r\n5,\"b\"\r\r\n6,c\r\r\r\n"),
        std::string("1,a\r\n2,b\r\r\n3,c\r\r\n4,a\n5,b\r\n6,c\r\r\n")}) {
    const Dataset ds = Load(got, Classify());
    EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"a", "b", "c"}));
    ExpectSameDataset(ds, Load(want, Classify()));
  }
  ExpectSameDataset(Load("x,y\r\r\n1,2\r\r\n3,4\r\r\n"), Load("x,y\n1,2\n3,4\n"));
  ExpectError("x,y\r\r\n1,2\r\r\n3,a\r\r\n", {},
              "3:2: ", "cell 'a' is not a number" + kNumericTargets);
}

// A file whose lines end in a lone '\r' (old Mac OS) reads as one with '\n' (pandas and R
// read it so); its line numbers count the '\r's.
TEST_F(CsvTest, CarriageReturnLineEnds) {
  ExpectSameDataset(Load("x1,x2,y\r1,2,3\r4,5,6\r"), Load("x1,x2,y\n1,2,3\n4,5,6\n"));
  ExpectSameDataset(Load("1,2,3\r\r4,5,6"), Load("1,2,3\n4,5,6\n"));
  const Dataset ds = Load("x,c\r1,a\r2,b\r3,c\r", Classify());
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"a", "b", "c"}));
  ExpectError("x,y\r1,2\r\r3,a\r", {}, "4:2: ", "cell 'a' is not a number" + kNumericTargets);
  // Once decided at the first line end, '\r' is a line end everywhere.
  ExpectSameDataset(Load("x,y\r1,2\r\n3,4\n"), Load("x,y\n1,2\n3,4\n"));
}

// Text from the file in a message is escaped: control bytes (a NUL does not cut the message)
// and bytes that are not UTF-8; UTF-8 text as it is.
TEST_F(CsvTest, MessagesEscapeBytesThatAreNotText) {
  ExpectError(std::string("x,y\n1,2\n3,a\0b\n", 14), {},
              "3:2: ", "cell 'a\\x00b' is not a number" + kNumericTargets);
  ExpectError("x,y\n1,\xff\xfe\n", {},
              "2:2: ", "cell '\\xff\\xfe' is not a number" + kNumericTargets);
  ExpectError("x,y\n1,caf\xc3\xa9\n", {},
              "2:2: ", "cell 'caf\xc3\xa9' is not a number" + kNumericTargets);
  // A long cell is cut before a character, not inside it.
  const std::string e = "\xc3\xa9";
  std::string cell;
  for (int i = 0; i < 25; ++i) cell += e;  // 50 bytes
  ExpectError("x,y\n1," + cell + "\n", {},
              "2:2: ", "cell '" + cell.substr(0, 40) + "...' is not a number" + kNumericTargets);
  ExpectError("x,y\n1,a" + cell + "\n", {},
              "2:2: ", "cell 'a" + cell.substr(0, 38) + "...' is not a number" + kNumericTargets);
  LoadOptions named;
  named.file.label_name = "z";
  const char header[] = "a\0,b\x01,c\n1,2,3\n";
  ExpectError(std::string(header, sizeof header - 1), named,
              "1: ", "label column 'z' is not in the header (a\\x00, b\\x01, c)");
}

// A file of `rows` rows "i,i+1,...,label" in blocks of 64 bytes split between two threads, with
// the errors at the given lines: the first by line number is reported, with its line:column.
TEST_F(CsvTest, FirstErrorByLineWhateverThreadFindsIt) {
  auto file = [](int rows, const std::vector<int>& bad_lines) {
    std::string s = "a,b,c,y\n";
    for (int line = 2; line < rows + 2; ++line) {
      const bool bad = std::find(bad_lines.begin(), bad_lines.end(), line) != bad_lines.end();
      s += std::to_string(line) + "," + (bad ? "oops" : "0.5") + ",7,1\n";
    }
    return s;
  };
  for (size_t block : {size_t{64}, size_t{200}, size_t{1} << 20}) {
    TextTuning t;
    t.block_bytes = block;
    t.threads = 2;
    t.min_split_bytes = 2;
    // One block of ~1.2 KB split in two: the second half's error alone, then both.
    for (const std::vector<int>& bad : {std::vector<int>{60}, {10, 60}, {59, 60}, {3}}) {
      const std::string path = Write(file(80, bad));
      Dataset ds;
      const Status s = LoadText(path, {}, t, &ds);
      EXPECT_EQ(s.message(), path + ":" + std::to_string(bad[0]) +
                                 ":2: cell 'oops' is not a number")
          << "block " << block;
    }
  }
}

// The class that is not in the model's map, first seen in a later block or the second thread's
// part, is named at its first row.
TEST_F(CsvTest, MissingClassNamedAtItsFirstRowAcrossBlocks) {
  std::string s = "x,c\n";
  for (int i = 0; i < 200; ++i) s += std::to_string(i) + "," + (i == 150 ? "z" : i == 120 ? "y" : i % 2 ? "a" : "b") + "\n";
  s += "7,z\n";
  const std::string path = Write(s);
  LoadOptions o = Classify();
  const ClassMap map = ClassMap::Build({"a", "b"});
  o.classes = &map;
  for (size_t block : {size_t{32}, size_t{500}, size_t{1} << 20}) {
    for (int threads : {1, 2}) {
      TextTuning t;
      t.block_bytes = block;
      t.threads = threads;
      t.min_split_bytes = 2;
      Dataset ds;
      const Status s2 = LoadText(path, o, t, &ds);
      EXPECT_EQ(s2.message(), path + ":122:2: label 'y' is not one of the model's 2 classes (a, b)")
          << "block " << block << ", threads " << threads;
    }
  }
  // The classes built from the file: the same map and indices however it was read.
  o.classes = nullptr;
  TextTuning small;
  small.block_bytes = 40;
  small.threads = 2;
  small.min_split_bytes = 2;
  Dataset whole, parts;
  ASSERT_TRUE(LoadFile(path, o, &whole).ok());
  ASSERT_TRUE(LoadText(path, o, small, &parts).ok());
  EXPECT_EQ(whole.classes.names, (std::vector<std::string>{"a", "b", "y", "z"}));
  ExpectSameDataset(parts, whole);
}

// Larger than one block of the default size, through LoadFile as the master calls it: every
// value in place, and an error on the last line found there.
TEST_F(CsvTest, FileLargerThanADefaultBlock) {
  const int rows = 420000;  // about 20 MB
  std::string s = "label";
  for (int j = 0; j < 12; ++j) s += ",p" + std::to_string(j);
  s += "\n";
  for (int i = 0; i < rows; ++i) {
    s += std::to_string(i % 10);
    for (int j = 0; j < 12; ++j) s += "," + std::to_string((i * 13 + j * 7) % 256);
    s += "\n";
  }
  ASSERT_GT(s.size(), TextTuning{}.block_bytes);
  LoadOptions o = Classify(0);
  const Dataset ds = Load(s, o);
  ASSERT_EQ(ds.rows, rows);
  ASSERT_EQ(ds.features, 12);
  bool same = true;
  for (int i = 0; i < rows && same; ++i) {
    same = ds.y[i] == static_cast<float>(i % 10);
    for (int j = 0; j < 12 && same; ++j) same = ds.x[i * 12 + j] == static_cast<float>((i * 13 + j * 7) % 256);
    if (!same) ADD_FAILURE() << "row " << i << " differs";
  }
  s += "1,2,3,4,5,6,7,8,9,10,11,12\n";  // 12 cells: one short
  ExpectError(s, o, std::to_string(rows + 2) + ": ",
              "row has 12 cells, expected 13 (as on line 1)");
}

// A pipe is read whole (it cannot be read twice) and loads as the file does.
TEST_F(CsvTest, PipeLoadsAsAFile) {
  const std::string content = "a,b,y\n1,2,3\n4,5,6";
  const std::string fifo = dir_ + "/fifo.csv";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    std::ofstream f(fifo, std::ios::binary);
    f << content;
  });
  std::vector<std::pair<int64_t, int>> calls;
  LoadOptions o;
  o.check_size = [&](int64_t r, int f) {
    calls.emplace_back(r, f);
    return Status::Ok();
  };
  Dataset ds;
  const Status s = LoadFile(fifo, o, &ds);
  writer.join();
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectSameDataset(ds, Load(content));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::pair<int64_t, int>{3, 2}));  // 3 lines
}

TEST_F(CsvTest, CheckSizeBoundIsTheLinesOrTheBytes) {
  std::vector<int64_t> bounds;
  LoadOptions o;
  o.check_size = [&](int64_t r, int) {
    bounds.push_back(r);
    return Status::Ok();
  };
  // Long rows: the lines bound it (3; the bytes, 14 / (2 * 2 - 1) + 1 = 5).
  Load("a,y\n1000000,2\n", o);
  // Blank lines: the bytes bound it, 8 / 3 + 1 = 3 (the lines, 6).
  Load("1,2\n\n\n\n\n", o);
  // A byte order mark is not counted (11 / 3 + 1 would be 4).
  Load("\xEF\xBB\xBF" "1,2\n\n\n\n\n", o);
  EXPECT_EQ(bounds, (std::vector<int64_t>{3, 3, 3}));
}

TEST(LineBlocksTest, WholeLinesEachEndingInNewline) {
  char tmpl[] = "/tmp/line_blocks.XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  const std::string content = "\xEF\xBB\xBF" "ab\ncdefghij\r\n\nklmnopqrstuvwxyz\nend";
  ASSERT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  close(fd);
  for (size_t block : {size_t{1}, size_t{3}, size_t{5}, size_t{100}}) {
    LineBlocks src(tmpl, block);
    ASSERT_TRUE(src.Open().ok());
    EXPECT_FALSE(src.file_empty());
    int64_t bytes = 0, newlines = 0;
    ASSERT_TRUE(src.Measure(&bytes, &newlines).ok());
    EXPECT_EQ(bytes, static_cast<int64_t>(content.size()) - 3);
    EXPECT_EQ(newlines, 4);
    std::string all;
    for (bool more = true; more;) {
      const std::string_view b = src.block();
      ASSERT_FALSE(b.empty());
      EXPECT_EQ(b.back(), '\n') << "block " << block;
      all += b;
      ASSERT_TRUE(src.Next(&more).ok());
    }
    EXPECT_EQ(all, content.substr(3) + "\n") << "block " << block;
  }
  unlink(tmpl);
}

// ---- LIBSVM ----

// Files under other names than data.csv.
class LibsvmTest : public CsvTest {
 protected:
  static LoadOptions Svm(Task task = Task::kRegression) {
    LoadOptions o;
    o.file.format = "libsvm";
    o.task = task;
    return o;
  }
  Dataset LoadAs(const std::string& name, const std::string& content, const LoadOptions& opts = {}) {
    const std::string path = Write(content, name);
    Dataset ds;
    const Status s = LoadFile(path, opts, &ds);
    EXPECT_TRUE(s.ok()) << s.message();
    return ds;
  }
  void ExpectErrorAs(const std::string& name, const std::string& content, const LoadOptions& opts,
                     const std::string& where, const std::string& what) {
    const std::string path = Write(content, name);
    Dataset ds;
    ds.rows = 7;
    const Status s = LoadFile(path, opts, &ds);
    ASSERT_FALSE(s.ok()) << "loaded without error: " << content;
    EXPECT_EQ(s.code(), Status::Code::kData);
    EXPECT_EQ(s.message(), path + ":" + (where.empty() ? " " : where) + what);
    EXPECT_EQ(ds.rows, 7);
  }
};

TEST_F(LibsvmTest, DenseWithZeros) {
  Dataset ds = Load("1 1:0.5 3:2\n-2 2:1.5\n0.25 4:-1\n7\n", Svm());
  EXPECT_EQ(ds.rows, 4);
  EXPECT_EQ(ds.features, 4);
  EXPECT_EQ(ds.x, (std::vector<float>{0.5f, 0, 2, 0,  //
                                      0, 1.5f, 0, 0,  //
                                      0, 0, 0, -1,    //
                                      0, 0, 0, 0}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, -2, 0.25f, 7}));
  EXPECT_EQ(ds.classes.size(), 0);
}

TEST_F(LibsvmTest, DetectedByContent) {
  Dataset ds = Load("1 3:0.5 7:1\n0 1:2\n");  // named data.csv
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.features, 7);
  EXPECT_EQ(ds.x, (std::vector<float>{0, 0, 0.5f, 0, 0, 0, 1,  //
                                      2, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0}));
  // After comments and blank lines, with tabs, and with a qid first.
  ds = Load("# libsvm\n\n1\t2:3\n");
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{0, 3}));
  ds = Load("2 qid:1 1:4\n");
  EXPECT_EQ(ds.x, (std::vector<float>{4}));
  EXPECT_EQ(ds.y, (std::vector<float>{2}));
  // A comma makes it CSV.
  ds = Load("1 ,2\n3,4\n");
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3}));
}

TEST_F(LibsvmTest, DetectedByName) {
  // The first line has no feature, so the content alone would say CSV.
  const std::string text = "3\n1 2:5\n";
  for (const char* name : {"d.svm", "d.libsvm", "d.svmlight"}) {
    Dataset ds = LoadAs(name, text);
    EXPECT_EQ(ds.rows, 2) << name;
    EXPECT_EQ(ds.features, 2) << name;
    EXPECT_EQ(ds.x, (std::vector<float>{0, 0, 0, 5})) << name;
    EXPECT_EQ(ds.y, (std::vector<float>{3, 1})) << name;
  }
  ExpectErrorAs("d.csv", text, {}, "",
                "rows have 1 column; need at least one feature column besides the label");
  // The format given wins over the name.
  LoadOptions csv;
  csv.file.format = "csv";
  Dataset ds = LoadAs("e.svm", "1,2\n3,4\n", csv);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 3}));
}

TEST_F(LibsvmTest, WidthFromOptions) {
  LoadOptions o = Svm();
  o.libsvm_features = 5;
  Dataset ds = Load("1 1:1 3:3\n2 2:2\n", o);
  EXPECT_EQ(ds.features, 5);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 0, 3, 0, 0, 0, 2, 0, 0, 0}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 2}));
  // features wins over libsvm_features.
  o.features = 4;
  ds = Load("1 1:1 3:3\n2 2:2\n", o);
  EXPECT_EQ(ds.features, 4);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 0, 3, 0, 0, 2, 0, 0}));
  // A width exactly the largest index.
  o.features = 3;
  ds = Load("1 1:1 3:3\n", o);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 0, 3}));
}

TEST_F(LibsvmTest, CommentsBlankLinesAndCrlf) {
  Dataset ds = Load("# a header comment\n\n1 1:1 # trailing 5:5\r\n   \n# 2 2:2\n0 2:3\r\n\n", Svm());
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 0, 0, 3}));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0}));
}

TEST_F(LibsvmTest, QidIgnored) {
  Dataset ds = Load("3 qid:1 1:0.5 2:1\n1 qid:2 2:4\n", Svm());
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{0.5f, 1, 0, 4}));
  EXPECT_EQ(ds.y, (std::vector<float>{3, 1}));
}

TEST_F(LibsvmTest, RegressionLabels) {
  Dataset ds = Load("2.5 1:1\n-1e3 1:2\n+4 1:3\n", Svm());
  EXPECT_EQ(ds.y, (std::vector<float>{2.5f, -1000, 4}));
  ExpectError("1 1:1\ncat 1:2\n", Svm(), "2: ", "cell 'cat' is not a number" + kNumericTargets);
  ExpectError("inf 1:2\n", Svm(), "1: ", "value 'inf' is not finite");
}

TEST_F(LibsvmTest, ClassLabels) {
  Dataset ds = Load("dog 1:1\ncat 2:1\ndog 1:2\n", Svm(Task::kClassification));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0, 1}));
  EXPECT_FALSE(ds.classes.numeric);
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"cat", "dog"}));
  // The usual +1/-1.
  ds = Load("+1 1:1\n-1 2:1\n1.0 1:2\n", Svm(Task::kClassification));
  EXPECT_EQ(ds.y, (std::vector<float>{1, 0, 1}));
  EXPECT_TRUE(ds.classes.numeric);
  EXPECT_EQ(ds.classes.names, (std::vector<std::string>{"-1", "1"}));
  // Through a given map.
  const ClassMap map = ClassMap::Build({"cat", "dog", "eel"});
  LoadOptions o = Svm(Task::kClassification);
  o.classes = &map;
  ds = Load("eel 1:1\ncat 1:2\n", o);
  EXPECT_EQ(ds.y, (std::vector<float>{2, 0}));
  EXPECT_EQ(ds.classes.names, map.names);
  ExpectError("cat 1:1\n# c\nfox 1:2\n", o, "3: ",
              "label 'fox' is not one of the model's 3 classes (cat, dog, eel)");
  ExpectError("1 1:1\n1 2:1\n", Svm(Task::kClassification), "",
              "classification needs at least 2 classes, the labels have 1 ('1')");
}

TEST_F(LibsvmTest, NoLabels) {
  LoadOptions o = NoLabels(3, Task::kClassification);
  o.file.format = "libsvm";
  Dataset ds = Load("fox 1:1\n? 3:2\n", o);
  EXPECT_EQ(ds.rows, 2);
  EXPECT_EQ(ds.x, (std::vector<float>{1, 0, 0, 0, 0, 2}));
  EXPECT_TRUE(ds.y.empty());
}

TEST_F(LibsvmTest, IndexErrors) {
  ExpectError("1 1:1\n1 0:1\n", Svm(), "2: ",
              "feature index '0' is not an integer >= 1 (LIBSVM indices start at 1)");
  ExpectError("1 -1:1\n", Svm(), "1: ",
              "feature index '-1' is not an integer >= 1 (LIBSVM indices start at 1)");
  ExpectError("1 a:1\n", Svm(), "1: ",
              "feature index 'a' is not an integer >= 1 (LIBSVM indices start at 1)");
  ExpectError("1 :1\n", Svm(), "1: ",
              "feature index '' is not an integer >= 1 (LIBSVM indices start at 1)");
  ExpectError("1 2.0:1\n", Svm(), "1: ",
              "feature index '2.0' is not an integer >= 1 (LIBSVM indices start at 1)");
  ExpectError("1 3:1 2:1\n", Svm(), "1: ",
              "feature index 2 follows 3 (indices must be ascending, each at most once)");
  ExpectError("1 1:1\n\n1 3:1 3:2\n", Svm(), "3: ",
              "feature index 3 follows 3 (indices must be ascending, each at most once)");
}

TEST_F(LibsvmTest, IndexBeyondWidth) {
  LoadOptions o = Svm();
  o.libsvm_features = 4;
  ExpectError("1 1:1 4:1\n1 5:1\n", o, "2: ", "feature index 5 is beyond the model's 4 inputs");
  o.features = 2;
  ExpectError("1 1:1 3:1\n", o, "1: ", "feature index 3 is beyond the model's 2 inputs");
}

TEST_F(LibsvmTest, TokenErrors) {
  ExpectError("1 1:2 5\n", Svm(), "1: ", "token '5' is not '<index>:<value>'");
  ExpectError("1 1:2\n2 2:abc\n", Svm(), "2: ", "feature 2: cell 'abc' is not a number");
  ExpectError("1 2:\n", Svm(), "1: ", "feature 2: cell is empty");
  ExpectError("1 2:nan\n", Svm(), "1: ", "feature 2: value 'nan' is not finite");
  ExpectError("1 2:1e39\n", Svm(), "1: ", "feature 2: value '1e39' is too large for a 32-bit float");
  ExpectError("1:2 3:4\n", Svm(), "1: ",
              "line starts with '1:2', not a label (LIBSVM lines are '<label> <index>:<value> ...')");
  // Also when the format is detected.
  ExpectError("1:2 3:4\n", {}, "1: ",
              "line starts with '1:2', not a label (LIBSVM lines are '<label> <index>:<value> ...')");
}

TEST_F(LibsvmTest, CsvIsNotLibsvm) {
  const std::string not_libsvm =
      " is not LIBSVM (LIBSVM lines are '<label> <index>:<value> ...'); it looks like CSV: try "
      "--format csv";
  // A header line, and headerless lines that would read as labels without features.
  ExpectError("a,b,y\n1,2,3\n", Svm(), "1: ", "line 'a,b,y'" + not_libsvm);
  ExpectError("# c\n\n1,2,3\n4,5,6\n", Svm(), "3: ", "line '1,2,3'" + not_libsvm);
  LoadOptions o = Svm(Task::kClassification);
  o.libsvm_features = 2;  // as train sets it: the rows would be zeros
  ExpectError("1,2,cat\n3,4,dog\n", o, "1: ", "line '1,2,cat'" + not_libsvm);
  ExpectError("1;2;cat\n", o, "1: ", "line '1;2;cat'" + not_libsvm);
  ExpectError("1 2:1\n1, 2, 3\n", o, "2: ", "line '1, 2, 3'" + not_libsvm);
  // Named as LIBSVM, detected by the name.
  ExpectErrorAs("d.svm", "1,2\n", {}, "1: ", "line '1,2'" + not_libsvm);
  // A label without features is still a row of zeros.
  Dataset ds = Load("cat\ndog 1:1\n", o);
  EXPECT_EQ(ds.x, (std::vector<float>{0, 0, 1, 0}));
}

TEST_F(LibsvmTest, ClassLabelWithAControlByteRefused) {
  ExpectError("cat 1:1\nd\x01g 1:2\n", Svm(Task::kClassification), "2: ",
              "label 'd\\x01g' holds a control byte (\\x01 at byte 1) (class names must be "
              "printable text)");
}

TEST_F(LibsvmTest, NanClassLabelRefused) {
  ExpectError("1 1:1\nnan 1:2\n", Svm(Task::kClassification), "2: ", "value 'nan' is not finite");
  ExpectError("NaN 1:2\n", Svm(Task::kClassification), "1: ", "value 'NaN' is not finite");
}

TEST_F(LibsvmTest, EmptyFiles) {
  ExpectError("# only\n\n  # comments\n", Svm(), "",
              "file is empty (it has only blank or comment lines)");
  ExpectErrorAs("c.svm", "# only\n", {}, "", "file is empty (it has only blank or comment lines)");
  ExpectErrorAs("e.svm", "", {}, "", "file is empty");
  ExpectError("", Svm(), "", "file is empty");
  ExpectError("1\n2\n", Svm(), "", "no row has a feature");
}

// ---- The NPY header ----

// A header numpy could not have written is refused as data, naming the file, what is wrong and
// where in the header: the parser's Status, prefixed by the file.
TEST_F(CsvTest, MalformedNpyHeaderNamesTheFileAndTheByte) {
  const auto npy = [](const std::string& dict) {
    const std::string len = {static_cast<char>(dict.size() & 0xFF),
                             static_cast<char>(dict.size() >> 8)};
    return std::string("\x93NUMPY\x01\x00", 8) + len + dict;
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"'descr': '<f4'}", "it does not start with '{' (at byte 0 of the header)"},
      {"{'descr' '<f4'}", "':' missing after 'descr' (at byte 9 of the header)"},
      {"{1: '<f4'}", "a key is not a string (at byte 1 of the header)"},
      {"{'shape': (3, x)}", "the value of 'shape' is not understood"},
      {"{'descr': '<f4' 'shape': (3,)}", "',' or '}' expected (at byte 16 of the header)"},
  };
  for (const auto& [dict, what] : cases) {
    SCOPED_TRACE(dict);
    const std::string path = Write(npy(dict), "x.npy");
    LoadOptions o;
    o.file.arrays.labels_path = path;  // the data file's header is read first
    Dataset ds;
    const Status s = LoadFile(path, o, &ds);
    EXPECT_EQ(s.code(), Status::Code::kData);
    EXPECT_EQ(s.message().rfind(path + ": the NPY header is not understood: " + what, 0), 0u)
        << s.message();
  }
}

// ---- The same data as CSV and as LIBSVM ----

TEST_F(LibsvmTest, SameAsCsv) {
  const std::string csv =
      "f1,f2,f3,label\n"
      "0,1.5,0,dog\n"
      "2,0,0,cat\n"
      "0,0,-3,eel\n"
      "0,0,0,cat\n"
      "0.25,4,1e-2,dog\n";
  const std::string svm =
      "dog 2:1.5\n"
      "cat 1:2\n"
      "eel 3:-3\n"
      "cat\n"
      "dog 1:0.25 2:4 3:1e-2\n";
  const LoadOptions o = Classify();
  Dataset a = LoadAs("same.csv", csv, o);
  Dataset b = LoadAs("same.svm", svm, o);
  EXPECT_EQ(a.rows, 5);
  EXPECT_EQ(b.rows, a.rows);
  EXPECT_EQ(b.features, a.features);
  EXPECT_EQ(b.x, a.x);
  EXPECT_EQ(b.y, a.y);
  EXPECT_EQ(b.classes.numeric, a.classes.numeric);
  EXPECT_EQ(b.classes.names, a.classes.names);
  EXPECT_EQ(b.classes.values, a.classes.values);
  EXPECT_EQ(a.y, (std::vector<float>{1, 0, 2, 0, 1}));
  // Numeric classes and regression targets too.
  a = LoadAs("n.csv", "1,0,5\n0,2,3\n0,0,5.0\n", o);
  b = LoadAs("n.svm", "5 1:1\n3 2:2\n5.0\n", o);
  EXPECT_EQ(b.x, a.x);
  EXPECT_EQ(b.y, a.y);
  EXPECT_EQ(b.classes.names, a.classes.names);
  EXPECT_EQ(b.classes.values, a.classes.values);
  EXPECT_TRUE(a.classes.numeric);
  EXPECT_TRUE(b.classes.numeric);
  a = LoadAs("r.csv", "1,0,0.5\n0,2,-3\n");
  b = LoadAs("r.svm", "0.5 1:1\n-3 2:2\n");
  EXPECT_EQ(b.features, a.features);
  EXPECT_EQ(b.x, a.x);
  EXPECT_EQ(b.y, a.y);
}

// ---- check_size ----

TEST_F(LibsvmTest, CheckSizeSeesTheShape) {
  std::vector<std::pair<int64_t, int>> calls;
  LoadOptions o;
  o.check_size = [&](int64_t rows, int features) {
    calls.emplace_back(rows, features);
    return Status::Ok();
  };
  Dataset ds = LoadAs("s.csv", "a,b,y\n1,2,3\n\n4,5,6\n7,8,9\n", o);
  EXPECT_EQ(ds.rows, 3);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_GE(calls[0].first, 3);
  EXPECT_LE(calls[0].first, 6);  // no more than the lines
  EXPECT_EQ(calls[0].second, 2);
  calls.clear();
  ds = LoadAs("s.svm", "1 2:1\n# c\n2 5:1\n3 1:1\n", o);
  EXPECT_EQ(ds.rows, 3);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_GE(calls[0].first, 3);
  EXPECT_EQ(calls[0].second, 5);
  calls.clear();
  o.features = 4;
  ds = LoadAs("t.svm", "1 2:1\n", o);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_GE(calls[0].first, 1);
  EXPECT_EQ(calls[0].second, 4);
}

TEST_F(LibsvmTest, CheckSizeRefusalIsReturned) {
  int calls = 0;
  LoadOptions o;
  o.check_size = [&](int64_t, int) {
    ++calls;
    return Status::Resource("too big");
  };
  for (const char* name : {"big.csv", "big.svm"}) {
    const std::string path =
        Write(std::string(name) == "big.csv" ? "a,y\n1,2\n3,4\n" : "1 1:2\n3 2:4\n", name);
    Dataset ds;
    ds.rows = 7;
    const Status s = LoadFile(path, o, &ds);
    EXPECT_EQ(s.code(), Status::Code::kResource) << name;
    EXPECT_EQ(s.message(), "too big") << name;
    EXPECT_EQ(ds.rows, 7) << name;
  }
  EXPECT_EQ(calls, 2);
  // CSV: refused before the rows are read, so a bad row further on is not reached.
  const std::string path = Write("a,y\n1,2\nx,4\n", "bad.csv");
  Dataset ds;
  const Status s = LoadFile(path, o, &ds);
  EXPECT_EQ(s.code(), Status::Code::kResource);
  EXPECT_EQ(s.message(), "too big");
}

// ---- SplitValidation ----

TEST(SplitValidationTest, WithoutLabels) {
  Dataset all;
  all.rows = 10;
  all.features = 2;
  for (int i = 0; i < 10; ++i) {
    all.x.push_back(static_cast<float>(i));
    all.x.push_back(static_cast<float>(100 + i));
  }
  all.classes = ClassMap::Build({"cat", "dog"});
  Dataset train, val;
  ASSERT_TRUE(SplitValidation(all, 0.3, 5, &train, &val).ok());
  EXPECT_EQ(train.rows, 7);
  EXPECT_EQ(val.rows, 3);
  EXPECT_EQ(train.features, 2);
  EXPECT_EQ(val.features, 2);
  EXPECT_TRUE(train.y.empty());
  EXPECT_TRUE(val.y.empty());
  ASSERT_EQ(train.x.size(), 14u);
  ASSERT_EQ(val.x.size(), 6u);
  // Every row once, whole, each side in the original order.
  std::vector<int> seen;
  for (const Dataset* d : {&train, &val}) {
    int prev = -1;
    for (int64_t i = 0; i < d->rows; ++i) {
      const int r = static_cast<int>(d->x[2 * i]);
      EXPECT_EQ(d->x[2 * i + 1], static_cast<float>(100 + r));
      EXPECT_GT(r, prev);
      prev = r;
      seen.push_back(r);
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int> want(10);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
  for (const Dataset* d : {&train, &val}) {
    EXPECT_FALSE(d->classes.numeric);
    EXPECT_EQ(d->classes.names, all.classes.names);
  }
  // With labels: the same rows, each with its label.
  all.y.resize(10);
  for (int i = 0; i < 10; ++i) all.y[i] = static_cast<float>(i % 2);
  Dataset train2, val2;
  ASSERT_TRUE(SplitValidation(all, 0.3, 5, &train2, &val2).ok());
  EXPECT_EQ(train2.x, train.x);
  EXPECT_EQ(val2.x, val.x);
  ASSERT_EQ(val2.y.size(), 3u);
  for (int64_t i = 0; i < val2.rows; ++i) {
    EXPECT_EQ(val2.y[i], static_cast<float>(static_cast<int>(val2.x[2 * i]) % 2));
  }
}

// ---- Normalizer ----

// Two features of 4 rows: `a` and `b` per row.
Dataset TwoFeatures(const std::vector<float>& a, const std::vector<float>& b) {
  Dataset d;
  d.rows = static_cast<int64_t>(a.size());
  d.features = 2;
  for (size_t i = 0; i < a.size(); ++i) {
    d.x.push_back(a[i]);
    d.x.push_back(b[i]);
  }
  return d;
}

// Fit with a per-feature kind, whose rows' shape nobody reads.
Normalizer FitFlat(const Dataset& d, Normalize kind) {
  Normalizer n;
  const Status s = Normalizer::Fit(d, kind, Shape{d.features, 1, 1}, &n);
  EXPECT_TRUE(s.ok()) << s.message();
  return n;
}

// A feature whose spread is so small that 1 / spread is beyond float (values below about
// 3e-39 apart: only subnormal floats are) is constant to float arithmetic: scale 1, as for a
// spread of 0, so that it scales to finite values whatever comes later. Its scale was +inf, and
// (x - min) * inf made NaN of the training rows themselves.
TEST(NormalizerTest, AScaleBeyondFloatMakesTheFeatureConstant) {
  const float tiny = 1e-40f;  // subnormal
  const Dataset d = TwoFeatures({0, tiny, 0, tiny}, {1, 2, 3, 4});
  for (const Normalize kind : {Normalize::kMinMax, Normalize::kStandard}) {
    const Normalizer n = FitFlat(d, kind);
    EXPECT_EQ(n.scale[0], 1.0f) << ToString(kind);
    EXPECT_TRUE(std::isfinite(n.scale[1])) << ToString(kind);
    EXPECT_NE(n.scale[1], 1.0f) << ToString(kind) << ": an ordinary feature keeps its scale";
    Dataset later = TwoFeatures({tiny, 1000}, {2, 3});
    ASSERT_TRUE(n.Apply(&later, "later").ok()) << ToString(kind);
    for (const float v : later.x) EXPECT_TRUE(std::isfinite(v)) << ToString(kind);
  }
  // A spread whose reciprocal float holds keeps it: features in small units (masses in
  // kilograms, 1e-27) are features, not constants.
  const Normalizer small =
      FitFlat(TwoFeatures({0, 1e-37f, 0, 1e-37f}, {1, 2, 3, 4}), Normalize::kMinMax);
  EXPECT_FLOAT_EQ(small.scale[0], 1e37f);
}

// `rows` images of 3x2x3, channels first, each channel with statistics of its own: channel 0
// near 10 and wide, channel 1 near -2 and narrow, channel 2 constant at 7.
constexpr Shape kImage{3, 2, 3};
Dataset ThreeChannels(int rows, int salt) {
  Dataset d;
  d.rows = rows;
  d.features = static_cast<int>(kImage.Size());
  for (int i = 0; i < rows; ++i) {
    auto spread = [&](int a, int b, int m) { return static_cast<float>((i * a + b + salt) % m); };
    for (int p = 0; p < 6; ++p) d.x.push_back(10 + 0.5f * spread(7, p * 3, 11));
    for (int p = 0; p < 6; ++p) d.x.push_back(-2 + 0.01f * spread(5, p, 13));
    for (int p = 0; p < 6; ++p) d.x.push_back(7);
  }
  return d;
}

// The reference: each channel's values gathered, then numpy's mean and std (ddof 0) in double.
void ChannelStats(const Dataset& d, int64_t channel, double* mean, double* stddev) {
  const int64_t hw = kImage.h * kImage.w;
  std::vector<double> v;
  for (int64_t i = 0; i < d.rows; ++i) {
    for (int64_t p = 0; p < hw; ++p) v.push_back(d.x[i * d.features + channel * hw + p]);
  }
  *mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double sq = 0;
  for (const double x : v) sq += (x - *mean) * (x - *mean);
  *stddev = std::sqrt(sq / static_cast<double>(v.size()));
}

// --normalize channel: every feature of a channel gets that channel's mean and 1 / its
// population standard deviation over all training rows and pixels; a constant channel scale 1,
// as a constant feature gets under --normalize standard.
TEST(NormalizerTest, ChannelStatisticsAreEachChannelsOverRowsAndPixels) {
  // By hand: channel 0 holds 1, 3, 5, 7 (mean 4, variance 5), channel 1 is constant.
  Dataset tiny;
  tiny.rows = 2;
  tiny.features = 4;
  tiny.x = {1, 3, 10, 10, 5, 7, 10, 10};
  Normalizer n;
  ASSERT_TRUE(Normalizer::Fit(tiny, Normalize::kChannel, Shape{2, 1, 2}, &n).ok());
  EXPECT_EQ(n.kind, Normalize::kChannel);
  EXPECT_EQ(n.offset, (std::vector<float>{4, 4, 10, 10}));
  const float s0 = static_cast<float>(1 / std::sqrt(5.0));
  EXPECT_EQ(n.scale, (std::vector<float>{s0, s0, 1, 1}));

  const Dataset train = ThreeChannels(5, 0);
  ASSERT_TRUE(Normalizer::Fit(train, Normalize::kChannel, kImage, &n).ok());
  ASSERT_EQ(n.offset.size(), 18u);
  ASSERT_EQ(n.scale.size(), 18u);
  for (int64_t k = 0; k < kImage.c; ++k) {
    double mean = 0, sd = 0;
    ChannelStats(train, k, &mean, &sd);
    for (int64_t p = 0; p < 6; ++p) {
      SCOPED_TRACE("channel " + std::to_string(k) + ", pixel " + std::to_string(p));
      EXPECT_FLOAT_EQ(n.offset[k * 6 + p], static_cast<float>(mean));
      EXPECT_FLOAT_EQ(n.scale[k * 6 + p], sd > 0 ? static_cast<float>(1 / sd) : 1.0f);
    }
  }
  EXPECT_EQ(n.offset[12], 7.0f);
  EXPECT_EQ(n.scale[12], 1.0f) << "a constant channel keeps its scale, as standard's rule says";
  EXPECT_GT(n.scale[6], 10 * n.scale[0]) << "the narrow channel is scaled up more";

  // Applied to later images: (x - mean_c) / std_c, as computed here in double.
  Dataset later = ThreeChannels(4, 3);
  const Dataset raw = later;
  ASSERT_TRUE(n.Apply(&later, "later").ok());
  for (int64_t i = 0; i < later.rows; ++i) {
    for (int64_t k = 0; k < kImage.c; ++k) {
      double mean = 0, sd = 0;
      ChannelStats(train, k, &mean, &sd);
      for (int64_t p = 0; p < 6; ++p) {
        const int64_t at = i * 18 + k * 6 + p;
        const double want = (raw.x[at] - mean) / (sd > 0 ? sd : 1);
        EXPECT_NEAR(later.x[at], want, 1e-5 * std::max(1.0, std::abs(want))) << "value " << at;
      }
    }
  }
}

// Flat rows have no channels: refused, pointing to --normalize standard.
TEST(NormalizerTest, ChannelOnFlatRowsIsRefused) {
  Normalizer n;
  const Status s = Normalizer::Fit(TwoFeatures({1, 2}, {3, 4}), Normalize::kChannel,
                                   Shape{2, 1, 1}, &n);
  EXPECT_EQ(s.code(), Status::Code::kUsage);
  EXPECT_EQ(s.message(),
            "--normalize: channel scales each channel of an image (rows of c x h x w), but the "
            "model's input is 2 flat features: --normalize standard scales each feature (images "
            "stored as flat rows take --input-shape C,H,W with --model)");
}

// ---- MakeParabola ----

TEST(MakeParabolaTest, FiftyPoints) {
  Dataset ds = MakeParabola(50);
  ASSERT_EQ(ds.rows, 50);
  ASSERT_EQ(ds.features, 1);
  ASSERT_EQ(ds.x.size(), 50u);
  ASSERT_EQ(ds.y.size(), 50u);
  EXPECT_EQ(ds.x.front(), -2.0f);
  EXPECT_EQ(ds.x.back(), 2.0f);
  EXPECT_EQ(ds.y.front(), 4.0f);
  EXPECT_EQ(ds.y.back(), 4.0f);
  for (int i = 0; i < 50; ++i) {
    double x = -2.0 + 4.0 * i / 49.0;
    EXPECT_EQ(ds.x[i], static_cast<float>(x)) << i;
    EXPECT_EQ(ds.y[i], static_cast<float>(x * x)) << i;
    if (i > 0) {
      EXPECT_LT(ds.x[i - 1], ds.x[i]);
    }
  }
}

TEST(MakeParabolaTest, OnePoint) {
  Dataset ds = MakeParabola(1);
  EXPECT_EQ(ds.rows, 1);
  EXPECT_EQ(ds.features, 1);
  EXPECT_EQ(ds.x, (std::vector<float>{0.0f}));
  EXPECT_EQ(ds.y, (std::vector<float>{0.0f}));
}

TEST(MakeParabolaTest, TwoPoints) {
  Dataset ds = MakeParabola(2);
  EXPECT_EQ(ds.x, (std::vector<float>{-2.0f, 2.0f}));
  EXPECT_EQ(ds.y, (std::vector<float>{4.0f, 4.0f}));
}

// ---- BatchPlan ----

TEST(BatchPlanTest, StepsPerEpoch) {
  EXPECT_EQ(BatchPlan(50, 0, 1).steps_per_epoch(), 1);
  EXPECT_EQ(BatchPlan(50, 10, 1).steps_per_epoch(), 5);
  EXPECT_EQ(BatchPlan(50, 7, 1).steps_per_epoch(), 8);
  EXPECT_EQ(BatchPlan(50, 50, 1).steps_per_epoch(), 1);
  EXPECT_EQ(BatchPlan(50, 1000, 1).steps_per_epoch(), 1);
  EXPECT_EQ(BatchPlan(50, 1, 1).steps_per_epoch(), 50);
  EXPECT_EQ(BatchPlan(1, 1, 1).steps_per_epoch(), 1);
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(BatchPlan(big, big, 1).steps_per_epoch(), 1);
  EXPECT_EQ(BatchPlan(big, big - 1, 1).steps_per_epoch(), 2);
}

TEST(BatchPlanTest, ShareOfPartitions) {
  // Unequal splits: 50 over 3 and over 7.
  EXPECT_EQ(BatchPlan::ShareOf(50, 0, 3).end, 16);
  EXPECT_EQ(BatchPlan::ShareOf(50, 1, 3).end, 33);
  EXPECT_EQ(BatchPlan::ShareOf(50, 2, 3).end, 50);
  EXPECT_EQ(BatchPlan::ShareOf(50, 6, 7).begin, 42);
  EXPECT_EQ(BatchPlan::ShareOf(50, 6, 7).end, 50);
  // No overflow at the int64 edge.
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(BatchPlan::ShareOf(big, 255, 256).end, big);
  EXPECT_EQ(BatchPlan::ShareOf(big, 128, 256).begin, big / 2);  // floor((2^63 - 1) / 2)
  for (int64_t b : {0, 1, 2, 5, 49, 50, 1000}) {
    for (int P = 1; P <= 9; ++P) {
      int64_t next = 0;
      for (int r = 0; r < P; ++r) {
        BatchPlan::Range range = BatchPlan::ShareOf(b, r, P);
        EXPECT_EQ(range.begin, next);
        EXPECT_LE(range.begin, range.end);
        EXPECT_EQ(range.begin, r * b / P);
        next = range.end;
      }
      EXPECT_EQ(next, b);
    }
  }
}

TEST(BatchPlanTest, FullBatchSharesPartitionRows) {
  BatchPlan plan(50, 0, 123);
  EXPECT_EQ(plan.steps_per_epoch(), 1);
  for (int P = 1; P <= 8; ++P) {
    for (int64_t step : {0, 1, 17}) {
      EXPECT_EQ(plan.BatchRows(step), 50);
      std::vector<int64_t> all;
      std::vector<int64_t> sizes;
      for (int r = 0; r < P; ++r) {
        std::vector<int64_t> idx = {99};  // must be cleared
        plan.Share(step, r, P, &idx);
        BatchPlan::Range range = BatchPlan::ShareOf(50, r, P);
        ASSERT_EQ(static_cast<int64_t>(idx.size()), range.end - range.begin);
        for (size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(idx[i], range.begin + int64_t(i));
        all.insert(all.end(), idx.begin(), idx.end());
        sizes.push_back(static_cast<int64_t>(idx.size()));
      }
      std::vector<int64_t> want(50);
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(all, want) << "P=" << P;  // in order, each row once
      auto [mn, mx] = std::minmax_element(sizes.begin(), sizes.end());
      EXPECT_LE(*mx - *mn, 1);
      if (P == 3 || P == 7) {
        EXPECT_EQ(*mx - *mn, 1) << "P=" << P;
      }
    }
  }
}

// The rows of a whole step, gathered from all P shares in rank order.
std::vector<int64_t> StepRows(BatchPlan& plan, int64_t step, int P) {
  std::vector<int64_t> all, idx;
  for (int r = 0; r < P; ++r) {
    plan.Share(step, r, P, &idx);
    all.insert(all.end(), idx.begin(), idx.end());
  }
  return all;
}

TEST(BatchPlanTest, SharesMakeUpTheBatch) {
  BatchPlan plan(50, 8, 7);
  for (int P : {1, 2, 3, 5, 8}) {
    BatchPlan one(50, 8, 7);
    for (int64_t step = 0; step < 20; ++step) {
      std::vector<int64_t> batch = StepRows(one, step, 1);
      EXPECT_EQ(static_cast<int64_t>(batch.size()), plan.BatchRows(step));
      EXPECT_EQ(StepRows(plan, step, P), batch) << "P=" << P << " step=" << step;
    }
  }
}

TEST(BatchPlanTest, EveryEpochCoversEveryRowOnce) {
  const int64_t rows = 50;
  for (int64_t batch : {1, 7, 10, 49, 50, 64}) {
    BatchPlan plan(rows, batch, 42);
    const int64_t spe = plan.steps_per_epoch();
    for (int64_t epoch = 0; epoch < 4; ++epoch) {
      std::vector<int64_t> seen;
      for (int64_t k = 0; k < spe; ++k) {
        std::vector<int64_t> b = StepRows(plan, epoch * spe + k, 3);
        EXPECT_EQ(static_cast<int64_t>(b.size()), std::min(batch, rows - k * batch));
        seen.insert(seen.end(), b.begin(), b.end());
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> want(rows);
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(seen, want) << "batch=" << batch << " epoch=" << epoch;
    }
  }
}

TEST(BatchPlanTest, LastBatchOfEpochIsSmaller) {
  BatchPlan plan(50, 8, 1);
  ASSERT_EQ(plan.steps_per_epoch(), 7);
  for (int64_t step = 0; step < 14; ++step) {
    EXPECT_EQ(plan.BatchRows(step), step % 7 == 6 ? 2 : 8) << step;
    EXPECT_EQ(static_cast<int64_t>(StepRows(plan, step, 4).size()), plan.BatchRows(step));
  }
}

TEST(BatchPlanTest, BatchNotLessThanRowsIsOnePermutedBatch) {
  BatchPlan plan(50, 80, 5);
  EXPECT_EQ(plan.steps_per_epoch(), 1);
  EXPECT_EQ(plan.BatchRows(0), 50);
  EXPECT_EQ(plan.BatchRows(3), 50);
  std::vector<int64_t> e0 = StepRows(plan, 0, 2), e1 = StepRows(plan, 1, 2);
  std::vector<int64_t> in_order(50);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_NE(e0, in_order);
  EXPECT_NE(e0, e1);  // a fresh permutation each epoch
}

TEST(BatchPlanTest, DeterministicAcrossInstances) {
  BatchPlan a(50, 8, 99), b(50, 8, 99);
  for (int64_t step = 0; step < 30; ++step) {
    EXPECT_EQ(StepRows(a, step, 3), StepRows(b, step, 3)) << step;
  }
}

TEST(BatchPlanTest, DifferentSeedsDiffer) {
  BatchPlan a(50, 50, 1), b(50, 50, 2);
  EXPECT_NE(StepRows(a, 0, 1), StepRows(b, 0, 1));
  EXPECT_NE(StepRows(a, 0, 1), StepRows(a, 1, 1));  // and epochs differ
}

TEST(BatchPlanTest, SharesCanBeEmpty) {
  BatchPlan plan(50, 3, 4);
  const int P = 8;
  std::vector<int64_t> idx;
  int empty = 0;
  std::vector<int64_t> all;
  for (int r = 0; r < P; ++r) {
    plan.Share(0, r, P, &idx);
    EXPECT_LE(idx.size(), 1u);
    empty += idx.empty();
    all.insert(all.end(), idx.begin(), idx.end());
  }
  EXPECT_EQ(empty, P - 3);
  EXPECT_EQ(all.size(), 3u);
  // The last batch of the epoch has 50 - 16 * 3 = 2 rows.
  EXPECT_EQ(StepRows(plan, 16, P).size(), 2u);
}

TEST(BatchPlanTest, RandomAccessMatchesInOrder) {
  const int P = 3;
  BatchPlan in_order(50, 7, 11);
  std::vector<std::vector<int64_t>> want;
  for (int64_t step = 0; step < 40; ++step) want.push_back(StepRows(in_order, step, P));
  BatchPlan jumpy(50, 7, 11);
  for (int64_t step : {33, 2, 39, 0, 8, 7, 16, 15, 1, 24, 5, 38, 8}) {
    EXPECT_EQ(StepRows(jumpy, step, P), want[step]) << step;
  }
  // One rank at a time out of order as well.
  std::vector<int64_t> idx;
  for (int64_t step : {20, 3, 20}) {
    for (int r = P - 1; r >= 0; --r) {
      jumpy.Share(step, r, P, &idx);
      BatchPlan::Range range = BatchPlan::ShareOf(jumpy.BatchRows(step), r, P);
      std::vector<int64_t> expect(want[step].begin() + range.begin, want[step].begin() + range.end);
      EXPECT_EQ(idx, expect) << step << " " << r;
    }
  }
}

// ---- gzip ----

// `text` as one gzip member (zlib's deflate with the gzip wrapper, as `gzip -c` writes).
std::string Gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// The bytes OpenFile yields for `path` to their end, or the refusal's message.
std::string ReadThrough(const std::string& path) {
  std::unique_ptr<ByteSource> src;
  if (Status s = OpenFile(path, &src); !s.ok()) return "refused: " + s.message();
  std::string all;
  char buf[4096];
  for (size_t got = sizeof buf; got == sizeof buf;) {
    if (Status s = src->Read(buf, sizeof buf, &got); !s.ok()) return "refused: " + s.message();
    all.append(buf, got);
  }
  return all;
}

// Zero bytes after the last member are padding (tapes and some tools pad files with them):
// `gzip -t` accepts them, and so does the reader. Anything else after the last member is
// trailing garbage to both, zeros followed by something else and zeros followed by another
// member included (gzip -t: "decompression OK, trailing garbage ignored", exit 2); so is a
// byte that is not the start of a member.
TEST_F(CsvTest, GzipZeroPaddingIsIgnoredLikeGzipDoes) {
  const std::string text = "1,2,0\n3,4,1\n";
  const std::string gz = Gzip(text), at = std::to_string(gz.size());
  EXPECT_EQ(ReadThrough(Write(gz + std::string(1000, '\0'), "pad.gz")), text);
  EXPECT_EQ(ReadThrough(Write(gz + std::string(1, '\0'), "pad1.gz")), text);
  EXPECT_EQ(ReadThrough(Write(gz + Gzip(text) + std::string(7, '\0'), "two_pad.gz")), text + text);
  const std::string garbage =
      "refused: " + dir_ + "/%s: trailing garbage after the gzip stream at byte " + at;
  auto refusal = [&](const std::string& name, const std::string& more) {
    char buf[512];
    std::snprintf(buf, sizeof buf, garbage.c_str(), name.c_str());
    return std::string(buf) + more;
  };
  EXPECT_EQ(ReadThrough(Write(gz + "x", "junk.gz")), refusal("junk.gz", ""));
  EXPECT_EQ(ReadThrough(Write(gz + std::string(10, '\0') + "x", "zeros_junk.gz")),
            refusal("zeros_junk.gz", " (zero bytes, then a non-zero byte at byte " +
                                         std::to_string(gz.size() + 10) + ")"));
  EXPECT_EQ(ReadThrough(Write(gz + std::string(3, '\0') + gz, "zeros_member.gz")),
            refusal("zeros_member.gz", " (zero bytes, then a non-zero byte at byte " +
                                           std::to_string(gz.size() + 3) + ")"));
  // Members one after another are one stream, as before.
  EXPECT_EQ(ReadThrough(Write(gz + gz, "two.gz")), text + text);
}

// A gzip file holds whatever its name says and its inflated bytes show, text too: a gzipped
// CSV or LIBSVM file loads as the file itself does, named .csv.gz, .svm.gz or anything.
TEST_F(CsvTest, GzippedTextLoadsAsItsText) {
  const std::string csv = "a,b,label\n1,2,0\n3,4,1\n5,6,0\n";
  const std::string svm = "1 1:0.5 3:2\n0 2:1\n1 1:1 2:1 3:1\n";
  LoadOptions o;
  o.task = Task::kClassification;
  for (const auto& [text, names] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {csv, {"data.csv.gz", "data.gz", "blob"}}, {svm, {"data.svm.gz", "blob.gz", "blob2"}}}) {
    Dataset plain;
    const Status p = LoadFile(Write(text, "plain.txt"), o, &plain);
    ASSERT_TRUE(p.ok()) << p.message();
    for (const std::string& name : names) {
      SCOPED_TRACE(name);
      Dataset d;
      const Status s = LoadFile(Write(Gzip(text), name), o, &d);
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(d.rows, plain.rows);
      EXPECT_EQ(d.features, plain.features);
      EXPECT_EQ(d.x, plain.x);
      EXPECT_EQ(d.y, plain.y);
    }
  }
  // The text's errors name the file and the line, as for a plain file.
  Dataset d;
  const std::string bad = Write(Gzip("1,2,0\n3,x,1\n"), "bad.csv.gz");
  const Status s = LoadFile(bad, o, &d);
  EXPECT_EQ(s.message().rfind(bad + ":2:2: ", 0), 0u) << s.message();
  // A damaged stream is refused at its byte, whatever the loader.
  std::string cut = Gzip(csv);
  cut.resize(cut.size() - 12);
  const Status c = LoadFile(Write(cut, "cut.csv.gz"), o, &d);
  EXPECT_NE(c.message().find("cut.csv.gz: truncated: the gzip stream ends at byte"),
            std::string::npos)
      << c.message();
}

// The damage of a gzip stream is reported where the text reaches it: the lines inflated
// before it are read first, so a bad cell among them is the error in blocks of any size (the
// csv fuzz target found a file whose error depended on the block size).
TEST_F(CsvTest, GzipDamageIsReportedWhereTheTextReachesIt) {
  std::string text = "1,2,0\n3,x,1\n";
  for (int i = 0; i < 300; ++i) text += "5,6," + std::to_string(i % 2) + "\n";
  std::string cut = Gzip(text);
  cut.resize(cut.size() - 12);  // into the deflate data
  const std::string bad = Write(cut, "cut.csv.gz");
  std::string good = Gzip("1,2,0\n3,4,1\n");
  good.resize(good.size() - 12);
  const std::string damaged = Write(good, "cut_good.csv.gz");
  for (size_t block : {size_t{64} << 10, size_t{7}, size_t{1}}) {
    SCOPED_TRACE("blocks of " + std::to_string(block));
    TextTuning t;
    t.block_bytes = block;
    t.threads = 1;
    Dataset d;
    Status s = LoadText(bad, {}, t, &d);
    EXPECT_EQ(s.message().rfind(bad + ":2:2: ", 0), 0u) << s.message();
    s = LoadText(damaged, {}, t, &d);
    EXPECT_EQ(s.message().rfind(damaged + ": truncated: the gzip stream ends at byte ", 0), 0u)
        << s.message();
  }
}

// A match whose distance reaches before the stream's start, in the last bytes of a file: zlib
// checks the distance only when it copies the match, so a reader whose buffer was full when
// the match was decoded must still inflate it after the file's last byte (libsvm's fuzz target
// found blocks of 15 bytes reporting the end of the file instead).
TEST_F(CsvTest, GzipDamageIsTheSameWhateverTheBlock) {
  const unsigned char kBytes[] = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xff,
                                  0x33, 0x54, 0x30, 0xb4, 0xd0, 0x32, 0x55, 0x30, 0x55, 0xe2,
                                  0xb6, 0x77, 0x32, 0x32, 0x3f, 0x30, 0xb2, 0x32, 0xe4};
  const std::string path =
      Write(std::string(reinterpret_cast<const char*>(kBytes), sizeof kBytes), "far.svm");
  LoadOptions opts;
  opts.file.format = "libsvm";
  for (size_t block = 1; block <= 64; ++block) {
    SCOPED_TRACE("blocks of " + std::to_string(block));
    TextTuning t;
    t.block_bytes = block;
    t.threads = 1;
    Dataset d;
    const Status s = LoadText(path, opts, t, &d);
    EXPECT_EQ(s.message(), path + ": damaged gzip data at byte 28: invalid distance too far back");
  }
}


// ---- The data-format flags (data/format.h): each format's list of the flags that apply to
// it, for the command line against --format and for the loader against the format a file's
// name or content gives.

// The flags of CSV files and --labels, as a command line gives them and as LoadOptions holds
// them.
struct FormatFlagCase {
  const char* flag;
  void (*set)(LoadOptions*);
};
const FormatFlagCase kFormatFlagCases[] = {
    {"--label-col", [](LoadOptions* o) { o->file.label_col = 2; }},
    {"--label-col", [](LoadOptions* o) { o->file.label_name = "y"; }},
    {"--header", [](LoadOptions* o) { o->file.header = HeaderMode::kNo; }},
    {"--delimiter", [](LoadOptions* o) { o->file.delimiter = ';'; }},
    {"--decimal", [](LoadOptions* o) { o->file.decimal = '.'; }},
    {"--labels", [](LoadOptions* o) { o->file.arrays.labels_path = "y.npy"; }},
};

TEST(FormatFlags, TheCommandLineRefusesEachFlagItsFormatTakesNot) {
  for (const char* name : {"auto", "csv", "libsvm", "svmlight", "idx", "npy", "npz"}) {
    for (const FormatFlagCase& c : kFormatFlagCases) {
      SCOPED_TRACE(std::string(c.flag) + " with --format " + name);
      TrainOptions o;
      ASSERT_TRUE(ParseFormat(name).has_value());
      o.file.format = *ParseFormatName(name);
      o.given[c.flag] = "";
      const std::string n = name;
      const std::string format = n == "svmlight" ? "libsvm" : n;
      const bool csv_flag = std::string_view(c.flag) != "--labels";
      std::string want;
      if (csv_flag && n != "auto" && n != "csv") {
        want = std::string(c.flag) + ": applies to CSV files only, not to --format " + format;
      }
      if (!csv_flag && (n == "csv" || n == "libsvm" || n == "svmlight")) {
        want = "--labels: applies to IDX and NumPy data, not to --format " + format +
               " (whose labels are in the file)";
      }
      const Status s = CheckFormatFlags(o);
      EXPECT_EQ(s.message(), want);
      if (!want.empty()) {
        EXPECT_EQ(s.code(), Status::Code::kUsage);
      }
    }
  }
}

// Refused before the file is opened (none of these exists), naming the format and how its name
// gave it. A text file its name does not tell is CSV to --labels (no text format takes it);
// the CSV flags wait for its first lines (LIBSVM takes none of them).
TEST(FormatFlags, TheLoaderRefusesEachFlagTheFilesFormatTakesNot) {
  const std::string dir = "/nonexistent-format-flags/";
  const std::pair<const char*, const char*> kFiles[] = {
      {"x.npy", "NumPy"}, {"x.npz", "NumPy"}, {"x.npy.gz", "NumPy"},
      {"x.idx", "IDX"},   {"t10k-images-idx3-ubyte", "IDX"},
      {"x.csv", "CSV"},   {"x.txt", "CSV"},  {"x.svm", "LIBSVM"}, {"x.libsvm", "LIBSVM"},
      {"x.svmlight.gz", "LIBSVM"}};
  for (const auto& [name, what] : kFiles) {
    for (const FormatFlagCase& c : kFormatFlagCases) {
      SCOPED_TRACE(std::string(c.flag) + " with " + name);
      LoadOptions o;
      c.set(&o);
      const bool csv_flag = std::string_view(c.flag) != "--labels";
      const bool arrays = std::string_view(what) == "NumPy" || std::string_view(what) == "IDX";
      const bool libsvm = std::string_view(what) == "LIBSVM";
      const std::string path = dir + name;
      Dataset d;
      const Status s = LoadFile(path, o, &d);
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.code(), Status::Code::kData);
      if (csv_flag && arrays) {
        EXPECT_EQ(s.message(), path + ": " + c.flag + " applies to CSV files; this is " + what +
                                   " data (by its name), whose labels come from --labels or the "
                                   ".npz's --npz-y array");
      } else if (csv_flag && libsvm) {
        EXPECT_EQ(s.message(), path + ": " + c.flag +
                                   " applies to CSV files; this file is LIBSVM (by its name), "
                                   "whose labels are in the file");
      } else if (!csv_flag && !arrays) {
        EXPECT_EQ(s.message(), path + ": --labels applies to IDX and NumPy data; this file is " +
                                   what + (libsvm ? " (by its name)" : "") +
                                   ", whose labels are in the file");
      } else {
        EXPECT_EQ(s.message().find("applies to"), std::string::npos) << s.message();
      }
    }
  }
}

// What the first bytes or lines tell is refused as what the name tells: LIBSVM lines take no
// CSV flag, NPY bytes none either; CSV (what no format claims) takes them all.
TEST_F(CsvTest, TheLoaderRefusesTheFlagsOfTheFormatTheContentTells) {
  const std::string svm = Write("1 1:0.5 2:1\n0 2:2\n", "data.txt");
  const std::string svm_gz = Write(Gzip("1 1:0.5 2:1\n0 2:2\n"), "data.gz");
  const std::string npy = Write(std::string("\x93NUMPY\x01\x00", 8) + "junk", "data.bin");
  for (const FormatFlagCase& c : kFormatFlagCases) {
    SCOPED_TRACE(c.flag);
    LoadOptions o;
    c.set(&o);
    Dataset d;
    const bool csv_flag = std::string_view(c.flag) != "--labels";
    for (const std::string& p : {svm, svm_gz}) {
      const Status s = LoadFile(p, o, &d);
      EXPECT_EQ(s.message(), p + ": " + c.flag + " applies to " +
                                 (csv_flag ? "CSV files" : "IDX and NumPy data") +
                                 "; this file is " + (csv_flag ? "LIBSVM (by its content)" : "CSV") +
                                 ", whose labels are in the file");
    }
    const Status a = LoadFile(npy, o, &d);
    if (csv_flag) {
      EXPECT_EQ(a.message(), npy + ": " + c.flag + " applies to CSV files; this is NumPy data (by "
                                 "its content), whose labels come from --labels or the .npz's "
                                 "--npz-y array");
    } else {
      EXPECT_EQ(a.message().find("applies to"), std::string::npos) << a.message();
    }
  }
  // As given by --format: the message says the format only.
  LoadOptions o;
  o.file.format = "libsvm";
  o.file.header = HeaderMode::kYes;
  Dataset d;
  EXPECT_EQ(LoadFile(svm, o, &d).message(),
            svm + ": --header applies to CSV files; this file is LIBSVM, whose labels are in the "
                  "file");
  o.file.format = "";
  o.file.header = HeaderMode::kAuto;
  ASSERT_TRUE(LoadFile(svm, o, &d).ok());
  EXPECT_EQ(d.rows, 2);
}

// Detection through the registry gives what the name, then the bytes, then the lines give.
TEST_F(CsvTest, DetectionByNameThenBytes) {
  const std::pair<const char*, const char*> kNames[] = {
      {"a.npy", "npy"},  {"a.npy.gz", "npy"}, {"a.npz", "npz"},       {"a.npz.gz", "npz"},
      {"a.idx", "idx"},  {"a.idx.gz", "idx"}, {"train-images-idx3-ubyte", "idx"},
      {"t-labels-idx1-ubyte.gz", "idx"},      {"a.svm", "libsvm"},    {"a.libsvm", "libsvm"},
      {"a.svmlight", "libsvm"},               {"a.csv", ""},          {"a.txt", ""},
      {"a-ubyte", ""},   {"a.gz", ""},        {"idx", ""}};
  for (const auto& [name, want] : kNames) {
    const Detection d = DetectFormat(dir_ + "/none/" + name);
    EXPECT_EQ(d.def ? d.def->name : "", std::string(want)) << name;
    if (d.def) {
      EXPECT_EQ(d.by, DetectedBy::kName) << name;
    }
  }
  const std::pair<std::string, const char*> kBytes[] = {
      {std::string("\x93NUMPY"), "npy"},
      {std::string("PK\x03\x04"), "npz"},
      {std::string("PK\x05\x06"), "npz"},
      {std::string("\0\0\x08\x01", 4), "idx"},
      {std::string("\0\0\x0d\x03", 4), "idx"},
      {std::string("\0\0\x07\x01", 4), ""},
      {Gzip(std::string("\x93NUMPY")), "npy"},
      {Gzip(std::string("\0\0\x08\x01", 4)), "idx"},
      {Gzip(std::string("PK\x03\x04")), ""},
      {std::string("1 1:2\n"), ""},
      {std::string("a,b\n"), ""}};
  int i = 0;
  for (const auto& [bytes, want] : kBytes) {
    const std::string p = Write(bytes, "f" + std::to_string(i++));
    const Detection d = DetectFormat(p);
    EXPECT_EQ(d.def ? d.def->name : "", std::string(want)) << i;
    if (d.def) {
      EXPECT_EQ(d.by, DetectedBy::kContent) << i;
    }
  }
  EXPECT_EQ(DetectFormat(dir_).def, FindFormat("images"));  // a directory is an image folder
}

// --format's names are the registry's, "auto" first; an alias parses, never prints.
TEST(FormatRegistry, NamesAreTheRegistrysOnes) {
  std::string want = "auto";
  for (const DataFormatDef* d : Formats()) want += std::string("|") + d->name;
  EXPECT_EQ(FormatNames("|"), want);
  EXPECT_EQ(FormatNames("|"), "auto|csv|libsvm|idx|npy|npz|images");
  EXPECT_EQ(ParseFormat("auto"), std::optional<const DataFormatDef*>(nullptr));
  EXPECT_EQ(ParseFormat("svmlight"), FindFormat("libsvm"));
  EXPECT_FALSE(ParseFormat("libsvm2").has_value());
  EXPECT_EQ(AppliesTo("--labels"), "IDX and NumPy data");
  EXPECT_EQ(AppliesTo("--header"), "CSV files");
}

// ---- The seam: a format registered by a test is detected, refused flags and loaded through
// LoadFile with no other change. "one number per line" files: named *.fake, or starting with
// the line "FAKE"; each number is a row of one feature, its label twice it.
Status LoadFake(const std::string& path, const LoadOptions&, Dataset* out) {
  std::istringstream in(PeekContent(path, 1 << 20));  // gzip-inflated, as every loader reads
  std::string line;
  Dataset d;
  d.features = 1;
  while (std::getline(in, line)) {
    if (line == "FAKE") continue;
    const float v = std::stof(line);
    d.x.push_back(v);
    d.y.push_back(2 * v);
    ++d.rows;
  }
  *out = std::move(d);
  return Status::Ok();
}

const DataFormatDef kFakeFormat = {
    .name = "fake", .noun = "fake files", .what = "file is fake", .labels = "are computed",
    .flags = {"--delimiter"},
    .by_name = [](std::string_view n) { return n.ends_with(".fake"); },
    .by_bytes = [](std::string_view head) { return head.starts_with("FAKE\n"); }, .gzip = true,
    .load = LoadFake};

TEST_F(CsvTest, ARegisteredFormatIsDetectedAndLoadedThroughLoadFile) {
  const std::string named = Write("1\n2.5\n", "numbers.fake");
  const std::string magic = Write("FAKE\n3\n", "numbers.txt");
  const std::string magic_gz = Write(Gzip("FAKE\n4\n"), "numbers.gz");
  Dataset d;
  ASSERT_FALSE(LoadFile(named, LoadOptions{}, &d).ok());  // CSV before: one column, no label
  {
    const FormatRegistration fake(kFakeFormat);
    EXPECT_EQ(FindFormat("fake"), &kFakeFormat);
    EXPECT_EQ(FormatNames("|"), "auto|csv|libsvm|idx|npy|npz|images|fake");
    ASSERT_TRUE(LoadFile(named, LoadOptions{}, &d).ok());
    EXPECT_EQ(d.x, (std::vector<float>{1, 2.5}));
    EXPECT_EQ(d.y, (std::vector<float>{2, 5}));
    ASSERT_TRUE(LoadFile(magic, LoadOptions{}, &d).ok());
    EXPECT_EQ(d.x, (std::vector<float>{3}));
    ASSERT_TRUE(LoadFile(magic_gz, LoadOptions{}, &d).ok());
    EXPECT_EQ(d.x, (std::vector<float>{4}));
    LoadOptions o;
    o.file.header = HeaderMode::kYes;
    EXPECT_EQ(LoadFile(named, o, &d).message(),
              named + ": --header applies to CSV files; this file is fake (by its name), whose "
                      "labels are computed");
    o.file.header = HeaderMode::kAuto;
    o.file.delimiter = ';';  // a flag it declares
    EXPECT_TRUE(LoadFile(magic, o, &d).ok());
    EXPECT_EQ(AppliesTo("--delimiter"), "CSV and fake files");
    TrainOptions t;
    t.file.format = *ParseFormatName("fake");
    t.given["--labels"] = "y.npy";
    EXPECT_EQ(CheckFormatFlags(t).message(),
              "--labels: applies to IDX and NumPy data, not to --format fake (whose labels are "
              "computed)");
  }
  EXPECT_EQ(FindFormat("fake"), nullptr);
  EXPECT_EQ(FormatNames("|"), "auto|csv|libsvm|idx|npy|npz|images");
}

// The pipeline (data/pipeline.h) asks the run for its figures through RunSizing, once the data's
// shape is known and before a row is stored, with the model's input the data gives.
class PipelineTest : public CsvTest {
 protected:
  // --data of 4 rows of 2 features for a --model without an input shape, batches of 3.
  TrainOptions Options() {
    TrainOptions o;
    o.data_path = Write("1,2,3\n4,5,6\n7,8,9\n1,1,1\n");
    o.model_text = "linear(1)";
    EXPECT_TRUE(plan::BuildModel(&o).ok());
    o.batch = 3;
    return o;
  }
  // A run whose segment is `bytes` (or which the workers refuse with `refusal`), and whose
  // workers pass over one row at a time: what it is asked, in order, and the rows it is asked
  // about (an upper bound of the file's, from its size).
  RunSizing Run(uint64_t bytes, const Status& refusal = Status::Ok()) {
    return {[this](const TrainOptions& o, int64_t rows) {
              asked_.push_back("worker rows, input " + o.model.input.Text());
              rows_.push_back(rows);
              return int64_t{1};
            },
            [this, bytes, refusal](const TrainOptions&, const nn::ResolvedModel& model,
                                   int64_t rows, int features, uint64_t* out) {
              asked_.push_back("segment of " + std::to_string(features) + " features, input " +
                               model.spec.input.Text());
              rows_.push_back(rows);
              *out = bytes;
              return refusal;
            }};
  }
  std::vector<std::string> asked_;
  std::vector<int64_t> rows_;
};

TEST_F(PipelineTest, TheRunIsSizedOnTheDatasShapeBeforeTheRowsAreStored) {
  TrainOptions o = Options();
  RunData rd;
  const Status s = PrepareData(o, Run(4096), &rd);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(asked_, (std::vector<std::string>{"segment of 2 features, input 2",
                                               "worker rows, input 2"}));
  ASSERT_EQ(rows_.size(), 2u);
  EXPECT_GE(rows_[0], 4);
  EXPECT_EQ(rows_[1], rows_[0]);
  EXPECT_EQ(o.model.input, (Shape{2, 1, 1})) << "a --model's input is the data's width";
  EXPECT_EQ(rd.train.rows, 4);
}

TEST_F(PipelineTest, WhatTheWorkersWouldRefuseEndsTheLoad) {
  TrainOptions o = Options();
  RunData rd;
  const Status s =
      PrepareData(o, Run(4096, Status::Usage("--workers: the workers would refuse this run")), &rd);
  EXPECT_EQ(s.code(), Status::Code::kUsage);
  EXPECT_EQ(s.message(), "--workers: the workers would refuse this run");
  EXPECT_EQ(asked_, (std::vector<std::string>{"segment of 2 features, input 2"}));
  EXPECT_EQ(rd.train.rows, 0);
}

// The refusal of --normalize channel for a --model whose input the data gives as flat rows
// comes once the input is known, before a row is scaled.
TEST_F(PipelineTest, ChannelScalingOfFlatDataIsRefused) {
  TrainOptions o = Options();
  o.normalize = Normalize::kChannel;
  RunData rd;
  const Status s = PrepareData(o, Run(4096), &rd);
  EXPECT_EQ(s.code(), Status::Code::kUsage);
  EXPECT_NE(s.message().find("the model's input is 2 flat features: --normalize standard"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(rd.train.x, (std::vector<float>{1, 2, 4, 5, 7, 8, 1, 1})) << "nothing was scaled";
}

TEST_F(PipelineTest, ASegmentLargerThanDevShmIsRefused) {
  TrainOptions o = Options();
  RunData rd;
  const Status s = PrepareData(o, Run(UINT64_MAX / 2), &rd);
  EXPECT_EQ(s.code(), Status::Code::kResource);
  EXPECT_EQ(s.message().rfind(o.data_path + ": the run needs a shared memory segment of ", 0), 0u)
      << s.message();
  EXPECT_NE(s.message().find(" rows x 2 features, and the model) but /dev/shm has "),
            std::string::npos)
      << s.message();
  EXPECT_EQ(rd.train.rows, 0);
}

// ---------------------------------------------------------------------------------------------
// A stop signal (SetLoadStop: the master's) ends a load between two blocks of its input, and a
// pipe whose writer stalls within a round of WaitReadable, rather than after the whole file.

std::atomic<int> g_stop_calls{0};
std::atomic<int> g_stop_after{0};
int StopAfterSomeCalls() { return g_stop_calls.fetch_add(1) >= g_stop_after ? SIGTERM : 0; }

class LoadStopTest : public CsvTest {
 protected:
  void StopAfter(int calls) {
    g_stop_calls = 0;
    g_stop_after = calls;
    SetLoadStop(StopAfterSomeCalls);
  }
  void TearDown() override {
    SetLoadStop(nullptr);
    CsvTest::TearDown();
  }
};

TEST_F(LoadStopTest, EndsATextLoadBetweenBlocks) {
  std::string text = "x,y\n";
  for (int i = 0; i < 20000; ++i) text += std::to_string(i) + "," + std::to_string(i % 3) + "\n";
  const std::string path = Write(text);
  TextTuning t;
  t.block_bytes = 4096;  // about 45 blocks
  for (int threads : {1, 2}) {
    t.threads = threads;
    StopAfter(3);
    Dataset d;
    const Status s = LoadText(path, {}, t, &d);
    EXPECT_EQ(s.code(), Status::Code::kInterrupted) << s.message();
    EXPECT_EQ(s.message(), "stopped by SIGTERM while reading " + path);
    EXPECT_LE(g_stop_calls.load(), 6) << "the load went on after the stop";
  }
  SetLoadStop(nullptr);
  Dataset d;
  ASSERT_TRUE(LoadText(path, {}, t, &d).ok());
  EXPECT_EQ(d.rows, 20000);
}

TEST_F(LoadStopTest, EndsAnArrayReadBetweenBlocks) {
  // 4M float32 values: 16 blocks of 1 MiB.
  const int64_t n = int64_t{1} << 22;
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(n) + ",), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  file.append(static_cast<size_t>(n) * 4, '\0');
  const std::string path = Write(file, "big.npy");
  const auto read = [&](std::vector<float>* v) {
    std::unique_ptr<ByteSource> src;
    if (Status s = OpenFile(path, &src); !s.ok()) return s;
    ArrayReader r;
    if (Status s = ReadNpyHeader(std::move(src), &r); !s.ok()) return s;
    return ReadFloats(r, n, v, [](int64_t i) { return std::to_string(i); });
  };
  StopAfter(2);
  std::vector<float> v;
  const Status s = read(&v);
  EXPECT_EQ(s.code(), Status::Code::kInterrupted) << s.message();
  EXPECT_EQ(s.message(), "stopped by SIGTERM while reading " + path);
  EXPECT_LE(g_stop_calls.load(), 4);  // the block that stops asks twice (LoadStopped)
  SetLoadStop(nullptr);
  ASSERT_TRUE(read(&v).ok());
  EXPECT_EQ(static_cast<int64_t>(v.size()), n);
}

// A FIFO whose writer opened it, wrote a few lines and went quiet: the load waits for more,
// and a stop ends the wait. Nobody writing at all is the same wait (open(2) does not hold it).
TEST_F(LoadStopTest, EndsTheWaitForAStalledPipe) {
  const std::string path = dir_ + "/pipe.csv";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  for (bool writes : {true, false}) {
    SCOPED_TRACE(writes ? "a writer that stalls" : "no writer");
    StopAfter(1 << 30);
    std::atomic<bool> done{false};
    std::thread writer;
    if (writes) {
      writer = std::thread([&] {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) return;
        const std::string lines = "x,y\n1,0\n2,1\n";
        EXPECT_EQ(::write(fd, lines.data(), lines.size()), static_cast<ssize_t>(lines.size()));
        while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ::close(fd);
      });
    }
    std::thread stopper([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      g_stop_after = 0;
    });
    const auto t0 = std::chrono::steady_clock::now();
    Dataset d;
    const Status s = LoadText(path, {}, TextTuning{}, &d);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done = true;
    stopper.join();
    if (writer.joinable()) writer.join();
    EXPECT_EQ(s.code(), Status::Code::kInterrupted) << s.message();
    EXPECT_EQ(s.message(), "stopped by SIGTERM while reading " + path);
    // 300 ms, then at most a round of 200 ms; a loaded machine may add some.
    EXPECT_LT(waited, 1.5);
  }
}

}  // namespace
}  // namespace shmtrain::data
