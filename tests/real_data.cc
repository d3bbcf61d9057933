#include "tests/real_data.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shmtrain::test {
namespace {

// Where the package puts the files (IDX format, gzip'd: a big-endian u32 magic, one big-endian
// u32 per dimension, then the uint8 values row-major).
constexpr const char* kPackage = "dataset-fashion-mnist";
constexpr const char* kImages = SHMTRAIN_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz";
constexpr const char* kLabels = SHMTRAIN_FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz";
constexpr uint32_t kImagesMagic = 0x00000803;               // uint8, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;               // uint8, 1 dimension
constexpr int kSide = 28, kCrop = 2, kBlock = 3, kOut = 8;  // 28 = 2 + 8 * 3 + 2

// The file's name says what it holds; a change to the definition must change the name.
constexpr const char* kFileName = "fashion8-t10k-first1797-v1.csv";

// Reads a gzip'd IDX file's header (magic and `dims` dimensions) and then `values` bytes.
bool ReadIdx(const char* path, uint32_t magic, size_t dims, size_t values,
             std::vector<uint32_t>* shape, std::vector<uint8_t>* out, std::string* error) {
  gzFile f = gzopen(path, "rb");
  if (f == nullptr) {
    *error = std::string("cannot open ") + path + ": " + std::strerror(errno);
    return false;
  }
  auto read = [&](void* buf, size_t n) {
    return gzread(f, buf, static_cast<unsigned>(n)) == static_cast<int>(n);
  };
  auto be32 = [](const uint8_t* b) {
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | uint32_t{b[3]};
  };
  std::vector<uint8_t> header(4 * (1 + dims));
  bool ok = read(header.data(), header.size());
  if (ok && be32(header.data()) != magic) {
    *error = std::string(path) + " is not an IDX file of " + std::to_string(dims) +
             " dimensions (magic " + std::to_string(be32(header.data())) + ")";
    gzclose(f);
    return false;
  }
  shape->clear();
  for (size_t d = 0; ok && d < dims; ++d) shape->push_back(be32(header.data() + 4 * (d + 1)));
  out->resize(values);
  ok = ok && read(out->data(), values);
  gzclose(f);
  if (!ok) *error = std::string(path) + " is cut short or not gzip";
  return ok;
}

// The CSV text of the set (tests/real_data.h), or "" and *error.
std::string MakeCsv(std::string* error) {
  const size_t pixels = size_t{kSide} * kSide;
  std::vector<uint32_t> image_shape, label_shape;
  std::vector<uint8_t> images, labels;
  if (!ReadIdx(kImages, kImagesMagic, 3, kFashion8Rows * pixels, &image_shape, &images, error) ||
      !ReadIdx(kLabels, kLabelsMagic, 1, kFashion8Rows, &label_shape, &labels, error)) {
    return "";
  }
  if (image_shape[0] < kFashion8Rows || image_shape[1] != kSide || image_shape[2] != kSide ||
      label_shape[0] != image_shape[0]) {
    *error = std::string("unexpected shapes in ") + kImages + " and " + kLabels;
    return "";
  }
  constexpr int kBlockMax = kBlock * kBlock * 255;  // a block's largest pixel sum
  std::string csv;
  csv.reserve(kFashion8Rows * 200);
  for (int r = 0; r < kFashion8Rows; ++r) {
    const uint8_t* img = images.data() + r * pixels;
    for (int by = 0; by < kOut; ++by) {
      for (int bx = 0; bx < kOut; ++bx) {
        int sum = 0;
        for (int y = 0; y < kBlock; ++y) {
          for (int x = 0; x < kBlock; ++x) {
            sum += img[(kCrop + by * kBlock + y) * kSide + kCrop + bx * kBlock + x];
          }
        }
        // round(16 * sum / kBlockMax), half up, in integers: the same on every machine.
        csv += std::to_string((32 * sum + kBlockMax) / (2 * kBlockMax));
        csv += ',';
      }
    }
    if (labels[r] > 9) {
      *error = std::string(kLabels) + ": label " + std::to_string(labels[r]) + " at row " +
               std::to_string(r);
      return "";
    }
    csv += std::to_string(labels[r]);
    csv += '\n';
  }
  return csv;
}

// Whether `path` holds a whole set: kFashion8Rows lines, the last one ended. (A file is only
// ever renamed into place whole; this guards against a file damaged by hand.)
bool Complete(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  size_t lines = 0;
  for (const char c : text) lines += c == '\n';
  return lines == static_cast<size_t>(kFashion8Rows) && text.back() == '\n';
}

// Writes text to `path` through a temporary file of this process renamed into place.
bool WriteAtomically(const std::string& path, const std::string& text, std::string* error) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    *error = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) {
    *error = "cannot write " + tmp + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

std::string SmallFashionCsv() {
  static std::mutex mu;
  static std::string made;  // once found or written, for the rest of the process
  const std::lock_guard<std::mutex> lock(mu);
  if (!made.empty()) return made;
  const std::string dir = SHMTRAIN_TEST_DATA_DIR;
  const std::string path = dir + "/" + kFileName;
  if (Complete(path)) return made = path;
  std::string error;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    error = "cannot create " + dir + ": " + ec.message();
  } else {
    const std::string csv = MakeCsv(&error);
    if (!csv.empty() && WriteAtomically(path, csv, &error)) return made = path;
  }
  ADD_FAILURE() << "the test data set (tests/real_data.h) cannot be made: " << error
                << ". It is made from the Debian package " << kPackage << " (in "
                << SHMTRAIN_FASHION_MNIST_DIR << "): install it with scripts/install-deps.sh "
                << "(or apt-get install " << kPackage << ").";
  return "";
}

}  // namespace shmtrain::test
