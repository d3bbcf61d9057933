// Image folders through the command line: `train --data DIR` trains what the same images as a
// NumPy array train (tests/make_image_folders.py writes both), --val-data DIR validates through
// the training's classes, predict writes each file's path, and the refusals name what is wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using test::ProcResult;
namespace fs = std::filesystem;

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

// A model of the "same" images (3x7x5, classes 10, 2, a, b), trained once for the tests below.
std::string SameModel(const std::string& path) {
  if (test::FileExists(path)) return path;
  const ProcResult r = Shm({"train", "--data", path.substr(0, path.rfind('/')) + "/same/images",
                            "--model", kModel, "--lr", "0.05", "--steps", "2", "--batch", "4",
                            "--save", path});
  EXPECT_TRUE(test::ExitedWith(r, 0)) << r.err;
  return path;
}

// A FIFO named as an image: every command refuses it at once, naming it (the loader used to
// open it, wait for a writer for ever, and take a stop signal with it: only SIGKILL ended
// train). The deadline only bounds a hang: a refusal takes milliseconds.
TEST_F(ImageCli, AFifoAmongTheImagesIsRefusedByEveryCommand) {
  const std::string model = SameModel(In("same.bin"));
  const std::string root = In("fifo");
  fs::copy(In("same/images"), root, fs::copy_options::recursive);
  const std::string fifo = root + "/b/stuck.jpg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::vector<std::vector<std::string>> commands = {
      {"train", "--data", root, "--model", kModel, "--lr", "0.05", "--steps", "2"},
      {"train", "--data", In("same/images"), "--val-data", root, "--model", kModel, "--lr",
       "0.05", "--steps", "2"},
      {"eval", "--model", model, "--data", root},
      {"predict", "--model", model, "--data", root}};
  for (const std::vector<std::string>& args : commands) {
    SCOPED_TRACE(args[0] + " " + args[2] + " " + args[4]);
    const ProcResult r = test::Shmtrain(args, test::milliseconds{30'000});
    EXPECT_TRUE(test::ExitedWith(r, 2)) << r.err;
    EXPECT_TRUE(Has(r.err, fifo + ": cannot read the image: it is a FIFO (named pipe), not a "
                                  "regular file"))
        << r.err;
  }
}

// Predict on a folder of images and a folder beside them: refused, naming what it would leave
// out (it used to predict the folder's one image and exit 0).
TEST_F(ImageCli, PredictRefusesImagesBesideAFolder) {
  const std::string model = SameModel(In("same.bin"));
  const std::string root = In("mixed");
  fs::create_directories(root + "/more");
  for (const char* name : {"1.jpg", "2.jpg", "3.jpg", "4.jpg", "5.jpg"}) {
    fs::copy_file(In("same/images/b/m.jpg"), root + "/" + name);
  }
  fs::copy_file(In("same/images/2/q.jpg"), root + "/more/6.jpg");
  const ProcResult r = Shm({"predict", "--model", model, "--data", root});
  EXPECT_TRUE(test::ExitedWith(r, 2)) << r.out;
  EXPECT_TRUE(Has(r.err, root + ": holds both images (5, the first " + root + "/1.jpg) and "
                             "folders (the first " + root + "/more)"))
      << r.err;
  EXPECT_EQ(r.out, "") << "nothing is predicted";
  fs::remove_all(root + "/more");
  const ProcResult flat = Shm({"predict", "--model", model, "--data", root});
  ASSERT_TRUE(test::ExitedWith(flat, 0)) << flat.err;
  EXPECT_EQ(Lines(flat.out).size(), 6u) << "a header and the 5 images";
}

// Whether pid holds open a file whose path starts with `prefix` and ends with `suffix`.
bool HoldsOpen(pid_t pid, const std::string& prefix, const std::string& suffix) {
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string target = fs::read_symlink(it->path(), ec).string();
    if (!ec && target.rfind(prefix, 0) == 0 && target.size() >= suffix.size() &&
        target.compare(target.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return true;
    }
  }
  return false;
}

// `shmtrain train args` stopped by `sig` once it is decoding the images of `root`: how long
// it took to end after the signal, with how it ended in *r.
std::chrono::milliseconds StopWhileDecoding(const std::vector<std::string>& args,
                                            const std::string& root, int sig, ProcResult* r) {
  std::vector<std::string> argv = {SHMTRAIN_BIN, "train", "--no-metrics", "--no-progress",
                                   "--log-every", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  test::Subprocess p(argv);
  const auto give_up = test::Clock::now() + std::chrono::seconds{60};
  while (p.running() && !HoldsOpen(p.pid(), root + "/", ".png") && test::Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  }
  EXPECT_TRUE(p.Signal(sig)) << "the run ended before it decoded an image: " << p.err();
  const auto signalled = test::Clock::now();
  *r = p.Wait(test::milliseconds{60'000});
  return std::chrono::duration_cast<std::chrono::milliseconds>(r->end - signalled);
}

// A stop signal during a long image load (--data, then --val-data) ends train within about a
// second of it, exit 128 + n, naming the load: the loader checks for a stop between images
// (it used to decode every image first, seconds after the signal, and then stop at step 0).
TEST_F(ImageCli, AStopSignalEndsAnImageLoadWithinASecond) {
  const std::string gen = In("heavy");
  const ProcResult g = test::RunProcess({NUMPY_PYTHON, MAKE_IMAGE_FOLDERS_PY, "heavy", gen},
                                        test::milliseconds{120'000});
  ASSERT_TRUE(test::ExitedWith(g, 0)) << g.err;
  // 2 classes of 5,000 links to a 6x4 PNG that takes about a millisecond to read: seconds of
  // loading (3 to 6 on 2 idle cores, longer on busy ones), no disk, and 1 MB of rows.
  constexpr int kPerClass = 5'000;
  const std::string big = In("many"), few = In("few");
  for (const char* c : {"/c0/", "/c1/"}) {
    fs::create_directories(big + c);
    fs::create_directories(few + c);
    for (const char* name : {"0.png", "1.png"}) {
      fs::create_hard_link(gen + "/heavy.png", few + c + name);
    }
    for (int i = 0; i < kPerClass; ++i) {
      fs::create_hard_link(gen + "/heavy.png", big + c + std::to_string(i) + ".png");
    }
  }
  const std::vector<std::string> flags = {"--layers", "24,2", "--loss", "xent", "--lr", "0.1",
                                          "--steps", "1", "--batch", "4"};
  struct Case {
    std::vector<std::string> data;
    int sig;
  };
  for (const Case& c : {Case{{"--data", big}, SIGTERM},
                        Case{{"--data", few, "--val-data", big}, SIGINT}}) {
    SCOPED_TRACE(c.data.back() + " " + std::to_string(c.sig));
    std::vector<std::string> args = flags;
    args.insert(args.end(), c.data.begin(), c.data.end());
    ProcResult r;
    const std::chrono::milliseconds took = StopWhileDecoding(args, big, c.sig, &r);
    EXPECT_TRUE(test::ExitedWith(r, 128 + c.sig));
    EXPECT_TRUE(Has(r.err, "stopped by " + std::string(c.sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                               " while loading the images of " + big))
        << r.err;
    EXPECT_LT(took.count(), 1500) << "ms from the signal to the end";
    EXPECT_EQ(test::SegmentsOf(r.pid), std::vector<std::string>());
  }
  fs::remove_all(big);
  fs::remove_all(few);
}

}  // namespace
}  // namespace shmtrain
