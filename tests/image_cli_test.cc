// Image folders through the command line: `train --data DIR` trains what the same images as a
// NumPy array train (tests/make_image_folders.py writes both), --val-data DIR validates through
// the training's classes, predict writes each file's path, and the refusals name what is wrong.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using test::ProcResult;

constexpr test::milliseconds kTimeout{120'000};
constexpr const char* kModel = "conv2d(6,3,padding=1),relu,maxpool2d(2),flatten,linear(4)";

ProcResult Shm(std::vector<std::string> args) { return test::Shmtrain(std::move(args), kTimeout); }
bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

class ImageCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    const ProcResult r = test::RunProcess(
        {NUMPY_PYTHON, MAKE_IMAGE_FOLDERS_PY, "same", dir_->File("same")}, test::milliseconds{120'000});
    ASSERT_TRUE(test::ExitedWith(r, 0)) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string In(const std::string& name) { return dir_->File(name); }
  static std::vector<std::string> Train(const std::vector<std::string>& data,
                                        const std::string& save) {
    std::vector<std::string> args = {"train", "--model", kModel, "--lr", "0.05", "--steps", "40",
                                     "--batch", "4", "--workers", "2", "--seed", "3",
                                     "--normalize", "channel", "--save", save};
    args.insert(args.end(), data.begin(), data.end());
    return args;
  }
  static test::TempDir* dir_;
};
test::TempDir* ImageCli::dir_ = nullptr;

// The same images, the same rows: the same training, and the same outputs for every row.
TEST_F(ImageCli, AFolderTrainsAsTheSameImagesAsANumPyArray) {
  const ProcResult a = Shm(Train({"--data", In("same/images")}, In("a.bin")));
  ASSERT_TRUE(test::ExitedWith(a, 0)) << a.err;
  EXPECT_TRUE(Has(a.err, "1 file is not an image by its name")) << a.err;
  const ProcResult b = Shm(Train({"--data", In("same/x.npy"), "--labels", In("same/y.npy"),
                                  "--task", "classification"},
                                 In("b.bin")));
  ASSERT_TRUE(test::ExitedWith(b, 0)) << b.err;
  // The loss lines, and the summary's loss (its times differ).
  auto losses = [](const std::string& out) {
    std::vector<std::string> l = Lines(out);
    for (std::string& line : l) line = line.substr(0, line.find(", 0."));
    return l;
  };
  EXPECT_EQ(losses(a.out), losses(b.out));
  const ProcResult pa = Shm({"predict", "--model", In("a.bin"), "--data", In("same/images")});
  const ProcResult pb = Shm({"predict", "--model", In("b.bin"), "--data", In("same/x.npy")});
  ASSERT_TRUE(test::ExitedWith(pa, 0)) << pa.err;
  ASSERT_TRUE(test::ExitedWith(pb, 0)) << pb.err;
  const std::vector<std::string> la = Lines(pa.out), lb = Lines(pb.out);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(la[0], "path,class,p_10,p_2,p_a,p_b");
  const std::vector<std::string> paths = Lines(test::ReadWholeFile(In("same/paths.txt")));
  std::set<std::string> distinct;
  for (size_t i = 1; i < la.size(); ++i) {
    EXPECT_EQ(la[i].substr(0, la[i].find(',')), paths[i - 1]) << "row " << i;
    const std::string pa_i = la[i].substr(la[i].find(',', la[i].find(',') + 1));
    const std::string pb_i = lb[i].substr(lb[i].find(','));
    EXPECT_EQ(pa_i, pb_i) << "row " << i;
    distinct.insert(pa_i);
  }
  EXPECT_GT(distinct.size(), 3u) << "the model tells the rows apart";
}

TEST_F(ImageCli, HeldOutFoldersGoThroughTheTrainingsClasses) {
  const ProcResult r = Shm(Train({"--data", In("same/images"), "--val-data", In("same/images"),
                                  "--log-format", "json"},
                                 In("v.bin")));
  ASSERT_TRUE(test::ExitedWith(r, 0)) << r.err;
  EXPECT_TRUE(Has(r.out, "\"val_accuracy\"")) << r.out;
  const ProcResult e = Shm({"eval", "--model", In("v.bin"), "--data", In("same/images")});
  ASSERT_TRUE(test::ExitedWith(e, 0)) << e.err;
  EXPECT_TRUE(Has(e.out, "eval: 12 rows")) << e.out;
}

TEST_F(ImageCli, RefusalsNameWhatIsWrong) {
  const ProcResult shape = Shm({"train", "--data", In("same/images"), "--model", kModel,
                                "--input-shape", "1,7,5", "--lr", "0.1", "--steps", "2"});
  EXPECT_TRUE(test::ExitedWith(shape, 2)) << shape.err;
  EXPECT_TRUE(Has(shape.err, "3x7x5")) << shape.err;
  const ProcResult flag = Shm({"train", "--data", In("same/images"), "--model", kModel, "--lr",
                               "0.1", "--steps", "2", "--header", "yes"});
  EXPECT_TRUE(test::ExitedWith(flag, 2)) << flag.err;
  EXPECT_TRUE(Has(flag.err, "--header")) << flag.err;
  const ProcResult file = Shm({"train", "--data", In("same/x.npy"), "--format", "images",
                               "--model", kModel, "--lr", "0.1", "--steps", "2"});
  EXPECT_FALSE(test::ExitedWith(file, 0)) << file.err;
  EXPECT_TRUE(Has(file.err, "x.npy")) << file.err;
}

}  // namespace
}  // namespace shmtrain
