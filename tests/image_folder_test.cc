// Image folders (data/image_folder.h) against torchvision's ImageFolder rules restated in
// tests/make_image_folders.py, which writes the folders with PIL and the same images, decoded
// by PIL, as NumPy arrays in ImageFolder's row order: the loader must give exactly those rows,
// labels, classes and files. Then each hostile folder, refused with a message naming the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/image.h"
#include "data/image_folder.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

constexpr const char* kPython = NUMPY_PYTHON;
constexpr const char* kMakeFolders = MAKE_IMAGE_FOLDERS_PY;

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class ImageFolders : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    for (const char* mode : {"same", "grey", "bad"}) {
      const test::ProcResult r =
          test::RunProcess({kPython, kMakeFolders, mode, dir_->File(mode)}, milliseconds{120'000});
      ASSERT_TRUE(test::ExitedWith(r, 0)) << "tests/make_image_folders.py needs Debian's "
                                             "python3-pil and python3-numpy: " << r.err;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string In(const std::string& name) { return dir_->File(name); }
  static data::LoadOptions Classify() {
    data::LoadOptions o;
    o.task = Task::kClassification;
    return o;
  }
  // The NumPy arrays of a folder's images (uint8 (n, c, h, w), int64 labels), as loaded.
  static data::Dataset Arrays(const std::string& mode) {
    data::LoadOptions o = Classify();
    o.file.arrays.labels_path = In(mode + "/y.npy");
    data::Dataset d;
    const Status s = data::LoadFile(In(mode + "/x.npy"), o, &d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }
  static test::TempDir* dir_;
};
test::TempDir* ImageFolders::dir_ = nullptr;

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

TEST_F(ImageFolders, RowsAreImageFoldersOrderAndPilsPixels) {
  data::Dataset d;
  const Status s = data::LoadImageFolder(In("same/images"), Classify(), &d);
  ASSERT_TRUE(s.ok()) << s.message();
  const data::Dataset want = Arrays("same");
  EXPECT_EQ(d.rows, 12);
  EXPECT_EQ(d.features, 3 * 7 * 5);
  EXPECT_EQ(d.x, want.x) << "pixels, channels first, in ImageFolder's order";
  EXPECT_EQ(d.y, want.y);
  EXPECT_EQ(d.classes.names, (std::vector<std::string>{"10", "2", "a", "b"}))
      << "classes sorted as text, as ImageFolder sorts them (\"10\" before \"2\")";
  EXPECT_FALSE(d.classes.numeric);
  EXPECT_EQ(d.row_names, Lines(In("same/paths.txt")));
  EXPECT_EQ(d.skipped_files, 1) << "notes.txt is not a row; README at the root is no class";
  EXPECT_TRUE(Has(d.first_skipped, "a/notes.txt")) << d.first_skipped;
  Shape shape;
  ASSERT_TRUE(data::ImageFolderShape(In("same/images"), false, &shape).ok());
  EXPECT_EQ(shape, (Shape{3, 7, 5}));
}

TEST_F(ImageFolders, GreyImagesAreOneChannel) {
  data::Dataset d;
  const Status s = data::LoadImageFolder(In("grey/images"), Classify(), &d);
  ASSERT_TRUE(s.ok()) << s.message();
  const data::Dataset want = Arrays("grey");
  EXPECT_EQ(d.features, 1 * 4 * 6);
  EXPECT_EQ(d.x, want.x);
  EXPECT_EQ(d.y, want.y);
}

// Held-out folders go through the training's classes; a class it does not know is refused.
TEST_F(ImageFolders, AGivenClassMapIsTheModelsOutputs) {
  data::ClassMap map;
  map.numeric = false;
  map.names = {"10", "2", "a", "b", "c"};
  data::LoadOptions o = Classify();
  o.classes = &map;
  data::Dataset d;
  ASSERT_TRUE(data::LoadImageFolder(In("same/images"), o, &d).ok());
  EXPECT_EQ(d.y, Arrays("same").y);
  map.names = {"10", "a", "b"};
  const Status s = data::LoadImageFolder(In("same/images"), o, &d);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "images/2: class '2' is not one of the model's classes"))
      << s.message();
}

TEST_F(ImageFolders, TheSizeIsCheckedBeforeARowIsStored) {
  data::LoadOptions o = Classify();
  int64_t seen_rows = 0;
  o.check_size = [&](int64_t rows, int features) {
    seen_rows = rows;
    EXPECT_EQ(features, 105);
    return Status::Resource("too big");
  };
  data::Dataset d;
  EXPECT_EQ(data::LoadImageFolder(In("same/images"), o, &d).code(), Status::Code::kResource);
  EXPECT_EQ(seen_rows, 12);
  o.check_size = nullptr;
  o.check_image = [](const Shape& s) {
    return Status::Usage("the model takes 1x28x28, the data gives " + s.Text());
  };
  const Status s = data::LoadImageFolder(In("same/images"), o, &d);
  EXPECT_TRUE(Has(s.message(), "gives 3x7x5")) << s.message();
}

TEST_F(ImageFolders, PredictTakesAFolderOfImagesWithoutClasses) {
  data::LoadOptions o;
  o.no_labels = true;
  data::Dataset d;
  const Status s = data::LoadImageFolder(In("bad/no_classes"), o, &d);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(d.rows, 1);
  EXPECT_TRUE(d.y.empty());
  EXPECT_TRUE(Has(d.row_names[0], "no_classes/0.png"));
}

TEST_F(ImageFolders, EachHostileFolderIsRefusedNamingTheFile) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"no_classes", "no_classes: no class folder in it"},
      {"empty_class", "empty_class/c: the class folder holds no image"},
      {"other_size", "other_size/b/1.png: 5x4 colour, but the data set's images are 4x4 colour"},
      {"other_channels", "other_channels/b/1.png: 4x4 grey, but the data set's images are 4x4 "
                         "colour"},
      {"not_an_image", "not_an_image/b/1.jpg"},
      {"truncated", "truncated/b/1.png"},
      {"bmp", "bmp/b/1.bmp: only JPEG (.jpg, .jpeg) and PNG (.png) images are read"},
      {"loop", "loop/b/up/b: this folder is "},
      {"broken_link", "broken_link/b/1.png"},
  };
  for (const auto& [name, want] : cases) {
    data::Dataset d;
    const Status s = data::LoadImageFolder(In("bad/" + name), Classify(), &d);
    EXPECT_EQ(s.code(), Status::Code::kData) << name << ": " << s.message();
    EXPECT_TRUE(Has(s.message(), want)) << name << ": " << s.message();
  }
}

// Runs `body` beside a watchdog that, once 10 s have passed, keeps opening `fifos` for writing
// without blocking: that releases a reader blocked in opening one, so a load that would block
// for ever fails the test instead of hanging it. True when nothing had to be released.
bool EndsWithoutRelease(const std::vector<std::string>& fifos, const std::function<void()>& body) {
  std::atomic<bool> done{false}, released{false};
  std::thread dog([&] {
    const auto release_at = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    while (!done.load()) {
      std::this_thread::sleep_for(milliseconds{10});
      if (std::chrono::steady_clock::now() < release_at) continue;
      for (const std::string& f : fifos) {
        const int fd = ::open(f.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
          released.store(true);
          ::close(fd);
        }
      }
    }
  });
  body();
  done.store(true);
  dog.join();
  return !released.load();
}

// A class folder of one good image: root/a/0.png, and root/b/ empty for the case's file.
std::string TwoClasses(const std::string& root, const std::string& png) {
  for (const char* c : {"a", "b"}) fs::create_directories(root + "/" + c);
  fs::copy_file(png, root + "/a/0.png");
  fs::copy_file(png, root + "/b/0.png");
  return root;
}

// A file named as an image that is not a regular file is refused by its kind, without being
// opened: opening a FIFO waits for a writer (the loader used to block there for ever, and a
// stop signal with it). A FIFO with another name is left out like any other file.
TEST_F(ImageFolders, SpecialFilesNamedAsImagesAreRefusedWithoutBlocking) {
  const std::string png = In("grey/images/one/0.png");
  const std::string fifo = TwoClasses(In("fifo"), png) + "/b/stuck.jpg";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string link = TwoClasses(In("fifo_link"), png) + "/b/link.png";
  fs::create_symlink(fifo, link);
  const std::string sock = TwoClasses(In("socket"), png) + "/b/sock.png";
  const int sfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(sfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << std::strerror(errno);
  const std::string dev = TwoClasses(In("device"), png) + "/b/null.jpg";
  fs::create_symlink("/dev/null", dev);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "a FIFO (named pipe), not a regular file"},
      {link, "a FIFO (named pipe), not a regular file"},
      {sock, "a socket, not a regular file"},
      {dev, "a character device, not a regular file"}};
  EXPECT_TRUE(EndsWithoutRelease({fifo}, [&] {
    for (const auto& [path, what] : cases) {
      const std::string root = fs::path(path).parent_path().parent_path().string();
      data::Dataset d;
      const Status s = data::LoadImageFolder(root, Classify(), &d);
      EXPECT_EQ(s.code(), Status::Code::kData) << path << ": " << s.message();
      EXPECT_TRUE(Has(s.message(), path + ": cannot read the image: it is " + what))
          << s.message();
      data::Image image;
      EXPECT_TRUE(Has(data::DecodeImage(path, data::ImageLimits{}, &image).message(), what));
    }
  })) << "a load opened the FIFO and waited for a writer";
  ::close(sfd);
  // Named as no image: left out without being opened.
  const std::string root = TwoClasses(In("fifo_other"), png);
  ASSERT_EQ(::mkfifo((root + "/b/pipe").c_str(), 0600), 0);
  EXPECT_TRUE(EndsWithoutRelease({root + "/b/pipe"}, [&] {
    data::Dataset d;
    const Status s = data::LoadImageFolder(root, Classify(), &d);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(d.rows, 2);
    EXPECT_EQ(d.skipped_files, 1);
    EXPECT_EQ(d.first_skipped, root + "/b/pipe");
  }));
}

// Predict's folder is one of images or one of class folders. Images beside folders would not
// be rows of a folder of class folders: predict used to write the sub-folder's one row, exit 0.
TEST_F(ImageFolders, PredictRefusesImagesBesideFolders) {
  const std::string root = In("mixed");
  fs::create_directories(root + "/sub");
  for (const char* name : {"c.png", "a.png", "e.png", "b.png", "d.png"}) {
    fs::copy_file(In("grey/images/one/0.png"), root + "/" + name);
  }
  fs::copy_file(In("grey/images/one/1.png"), root + "/sub/0.png");
  data::LoadOptions o;
  o.no_labels = true;
  data::Dataset d;
  const Status s = data::LoadImageFolder(root, o, &d);
  EXPECT_EQ(s.code(), Status::Code::kData) << d.rows << " rows";
  EXPECT_TRUE(Has(s.message(), root + ": holds both images (5, the first " + root +
                                   "/a.png) and folders (the first " + root + "/sub)"))
      << s.message();
  EXPECT_TRUE(Has(s.message(), "would not be predicted")) << s.message();
  Shape shape;
  EXPECT_EQ(data::ImageFolderShape(root, true, &shape).code(), Status::Code::kData);
  // Training reads it as ImageFolder does: the class folder's image, the top's files no row.
  ASSERT_TRUE(data::LoadImageFolder(root, Classify(), &d).ok());
  EXPECT_EQ(d.rows, 1);
  // Only images count: a README beside the class folders is no reason to refuse.
  fs::remove_all(root);
  fs::create_directories(root + "/sub");
  fs::copy_file(In("grey/images/one/1.png"), root + "/sub/0.png");
  std::ofstream(root + "/README.txt") << "the images\n";
  ASSERT_TRUE(data::LoadImageFolder(root, o, &d).ok());
  EXPECT_EQ(d.rows, 1);
}

// A name holding a control byte (a line break) is shown as \xNN in a message, never raw.
TEST_F(ImageFolders, ControlBytesInNamesAreEscapedInMessages) {
  const std::string root = In("names");
  fs::create_directories(root + "/bad\nclass");
  fs::copy_file(In("grey/images/one/0.png"), root + "/bad\nclass/0.png");
  data::Dataset d;
  Status s = data::LoadImageFolder(root, Classify(), &d);
  EXPECT_EQ(s.code(), Status::Code::kData);
  EXPECT_TRUE(Has(s.message(), root + "/bad\\x0aclass: the class folder's name holds a "
                                      "control byte (\\x0a at byte 3)"))
      << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  fs::rename(root + "/bad\nclass", root + "/b");
  std::ofstream(root + "/b/x\ty.bmp") << "BM";
  s = data::LoadImageFolder(root, Classify(), &d);
  EXPECT_TRUE(Has(s.message(), root + "/b/x\\x09y.bmp: only JPEG")) << s.message();
  fs::remove(root + "/b/x\ty.bmp");
  std::ofstream(root + "/b/1\n.png") << "not a png";
  s = data::LoadImageFolder(root, Classify(), &d);
  EXPECT_TRUE(Has(s.message(), root + "/b/1\\x0a.png: not a JPEG or PNG file")) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

// The stop a master reports (SetLoadStop) ends a load between two images, naming the signal.
std::atomic<int> g_stop_calls{0};
int g_stop_after = 0;
int StopAfterSomeCalls() {
  return g_stop_calls.fetch_add(1) >= g_stop_after ? SIGTERM : 0;
}

TEST_F(ImageFolders, AStopEndsTheLoadBetweenImages) {
  const std::string root = In("stop");
  for (const char* c : {"a", "b"}) {
    fs::create_directories(root + "/" + c);
    for (int i = 0; i < 1000; ++i) {
      fs::create_hard_link(In("grey/images/one/0.png"),
                           root + "/" + c + "/" + std::to_string(i) + ".png");
    }
  }
  data::SetLoadStop(StopAfterSomeCalls);
  g_stop_after = 500;
  g_stop_calls = 0;
  data::Dataset d;
  Status s = data::LoadImageFolder(root, Classify(), &d);
  EXPECT_EQ(s.code(), Status::Code::kInterrupted) << s.message();
  EXPECT_TRUE(Has(s.message(), "stopped by SIGTERM while loading the images of " + root + " ("))
      << s.message();
  EXPECT_TRUE(Has(s.message(), " of 2000 decoded)")) << s.message();
  EXPECT_LT(g_stop_calls.load(), 700) << "each thread stops before its next image";
  g_stop_after = 0;
  s = data::LoadImageFolder(root, Classify(), &d);
  EXPECT_TRUE(Has(s.message(), "stopped by SIGTERM while listing " + root + "/a")) << s.message();
  data::SetLoadStop(nullptr);
  ASSERT_TRUE(data::LoadImageFolder(root, Classify(), &d).ok());
  EXPECT_EQ(d.rows, 2000);
  fs::remove_all(root);
}

// 100,000 tiny files (2 classes of 50,000 copies of a 6x4 PNG; a tenth under a sanitizer):
// every one a row, in order, each file's bytes read once into a row's room.
TEST_F(ImageFolders, AHundredThousandTinyFilesLoad) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kPerClass = 5'000;
#else
  constexpr int kPerClass = 50'000;
#endif
  std::ifstream in(In("grey/images/one/0.png"), std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(png.empty());
  const std::string root = In("many");
  for (const char* c : {"a", "b"}) {
    std::filesystem::create_directories(root + "/" + c);
    for (int i = 0; i < kPerClass; ++i) {
      std::ofstream(root + "/" + c + "/" + std::to_string(i) + ".png", std::ios::binary) << png;
    }
  }
  data::Dataset d;
  const Status s = data::LoadImageFolder(root, Classify(), &d);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(d.rows, 2 * kPerClass);
  EXPECT_EQ(d.x.size(), static_cast<size_t>(2 * kPerClass * 24));
  EXPECT_EQ(d.y.front(), 0);
  EXPECT_EQ(d.y.back(), 1);
  EXPECT_TRUE(Has(d.row_names[1], "a/1.png")) << "sorted as text: 0.png, 1.png, 10.png, ...";
  EXPECT_TRUE(Has(d.row_names[2], "a/10.png")) << d.row_names[2];
  const std::vector<float> first(d.x.begin(), d.x.begin() + 24);
  for (int64_t r = 1; r < d.rows; r += 997) {
    ASSERT_TRUE(std::equal(first.begin(), first.end(), d.x.begin() + r * 24)) << "row " << r;
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace shmtrain
