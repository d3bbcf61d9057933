// Tests of the data layer: the CSV loader (good files and every error message), the built-in
// parabola, and the batch plan (which rows each worker uses at each step).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "data/batch_plan.h"
#include "data/dataset.h"
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
  o.label_col = label_col;
  o.header = header;
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

TEST_F(CsvTest, DirectoryIsUnreadable) {
  std::string path = dir_ + "/sub";
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  Dataset ds;
  Status s = LoadFile(path, {}, &ds);
  ASSERT_FALSE(s.ok());
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

}  // namespace
}  // namespace shmtrain::data
