// Image files: the kind by the first bytes, the file read once into memory, then the JPEG or
// PNG decoder (data/image_jpeg.cc, data/image_png.cc).
#include "data/image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/utf8.h"
#include "data/image_codec.h"

namespace shmtrain::data {
namespace {

using image_internal::Bad;

// The largest image file read: the images this is for are 32 x 32 to a few MB, and the file
// is held in memory whole while it is decoded.
constexpr int64_t kMaxFileBytes = int64_t{64} << 20;

// What a file that is not a regular file is, and why it is not read.
std::string NotARegularFile(mode_t mode) {
  const char* what = S_ISFIFO(mode)  ? "a FIFO (named pipe)"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISDIR(mode)  ? "a directory"
                                      : "not a regular file";
  return std::string("cannot read the image: it is ") + what +
         ", not a regular file (an image is read from a regular file; remove it or move it "
         "out of the folder)";
}

// Reads all of `path`, refusing a file over kMaxFileBytes before reading it, and one that is
// not a regular file (after symbolic links) before opening it: opening a FIFO waits for a
// writer, and opening a device may act on it. The descriptor is opened without blocking and
// checked again, in case the name was replaced meanwhile.
Status ReadImageFile(const std::string& path, std::vector<uint8_t>* out) {
  if (Status s = CheckImageFile(path); !s.ok()) return s;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Bad(path, std::string("cannot open the image: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Bad(path, NotARegularFile(st.st_mode));
  }
  if (st.st_size > kMaxFileBytes) {
    ::close(fd);
    return Bad(path, "the image file has " + std::to_string(st.st_size) +
                         " bytes, more than the " + std::to_string(kMaxFileBytes) +
                         " (64 MiB) an image file may have");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      return Bad(path, std::string("cannot read the image: ") + std::strerror(e));
    }
    if (r == 0) break;  // shorter than fstat said (it shrank meanwhile): decode what there is
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  bytes.resize(got);
  *out = std::move(bytes);
  return Status::Ok();
}

// The first bytes of a file that is neither kind, for the message.
std::string NotAnImage(const uint8_t* bytes, size_t n) {
  if (n == 0) return "not a JPEG or PNG file: the file is empty";
  std::string first;
  for (size_t i = 0; i < n && i < 8; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%s%02x", i == 0 ? "" : " ", bytes[i]);
    first += hex;
  }
  return "not a JPEG or PNG file: it starts with " + first +
         ", neither the JPEG marker ff d8 ff nor the PNG signature 89 50 4e 47 0d 0a 1a 0a";
}

Status Decode(const uint8_t* bytes, size_t n, const std::string& name, const ImageLimits& limits,
              bool header_only, Image* out) {
  ImageKind kind;
  if (!SniffImage(bytes, n, &kind)) return Bad(name, NotAnImage(bytes, n));
  return kind == ImageKind::kJpeg
             ? image_internal::DecodeJpeg(bytes, n, name, limits, header_only, out)
             : image_internal::DecodePng(bytes, n, name, limits, header_only, out);
}

}  // namespace

namespace image_internal {

Status Bad(const std::string& name, const std::string& what) {
  return Status::Data(Printable(name) + ": " + what);
}

Status CheckDeclaredSize(const std::string& name, const char* kind, int64_t width,
                         int64_t height, const ImageLimits& limits) {
  if (width <= 0 || height <= 0) {
    return Bad(name, std::string("corrupt ") + kind + ": its header declares " +
                         std::to_string(width) + " x " + std::to_string(height) + " pixels");
  }
  const int64_t pixels = width * height;  // both below 2^31: no overflow
  if (pixels > limits.max_pixels) {
    return Bad(name, std::string(kind) + " too large: its header declares " +
                         std::to_string(width) + " x " + std::to_string(height) + " = " +
                         std::to_string(pixels) + " pixels, more than the limit of " +
                         std::to_string(limits.max_pixels));
  }
  return Status::Ok();
}

}  // namespace image_internal

bool SniffImage(const uint8_t* bytes, size_t n, ImageKind* kind) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    *kind = ImageKind::kJpeg;
    return true;
  }
  if (n >= sizeof kPng && std::memcmp(bytes, kPng, sizeof kPng) == 0) {
    *kind = ImageKind::kPng;
    return true;
  }
  return false;
}

Status CheckImageFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Bad(path, std::string("cannot open the image: ") + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Bad(path, NotARegularFile(st.st_mode));
  return Status::Ok();
}

Status ReadImageHeader(const std::string& path, const ImageLimits& limits, ImageHeader* out) {
  std::vector<uint8_t> bytes;
  if (Status s = ReadImageFile(path, &bytes); !s.ok()) return s;
  Image image;
  if (Status s = Decode(bytes.data(), bytes.size(), path, limits, true, &image); !s.ok()) {
    return s;
  }
  *out = image.header;
  return Status::Ok();
}

Status DecodeImage(const std::string& path, const ImageLimits& limits, Image* out) {
  std::vector<uint8_t> bytes;
  if (Status s = ReadImageFile(path, &bytes); !s.ok()) return s;
  return Decode(bytes.data(), bytes.size(), path, limits, false, out);
}

Status DecodeImage(const uint8_t* bytes, size_t n, const std::string& name,
                   const ImageLimits& limits, Image* out) {
  return Decode(bytes, n, name, limits, false, out);
}

}  // namespace shmtrain::data
