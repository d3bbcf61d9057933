// What the fuzz targets share: the input as a file for loaders that take a path, and the
// checks that turn a broken invariant into a finding.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/crc32.h"

namespace shmtrain::fuzz {

// The input written to a file of this process in $SHMTRAIN_FUZZ_DIR, else /dev/shm (tmpfs: no
// disk traffic), named fuzz-shmtrain-<pid>-<tag><suffix> so that a loader that looks at the
// name sees `suffix` (and never the segments' "shmtrain-<uid>-" prefix). The file is removed
// when this object goes, so no iteration leaves anything behind; a process that dies on a
// finding leaves its last one, which is why scripts/fuzz.sh gives each run a directory of its
// own and removes it afterwards.
class InputFile {
 public:
  InputFile(const std::string& tag, const std::string& suffix, const void* data, size_t n)
      : path_(Dir() + "/fuzz-shmtrain-" + std::to_string(::getpid()) + "-" + tag + suffix) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) Die("cannot create the input file", path_);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w <= 0) Die("cannot write the input file", path_);
      p += w;
      n -= static_cast<size_t>(w);
    }
    ::close(fd);
  }
  ~InputFile() { ::unlink(path_.c_str()); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  static std::string Dir() {
    const char* d = std::getenv("SHMTRAIN_FUZZ_DIR");
    return d != nullptr && *d != '\0' ? d : "/dev/shm";
  }
  [[noreturn]] static void Die(const char* what, const std::string& path) {
    std::fprintf(stderr, "fuzz: %s %s\n", what, path.c_str());
    std::abort();
  }
  std::string path_;
};

// A broken invariant: printed, then abort() (libFuzzer saves the input as a crash).
#define SHMTRAIN_FUZZ_CHECK(cond, ...)                                              \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", __FILE__, __LINE__, \
                   #cond);                                                          \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fputc('\n', stderr);                                                     \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

// Whether two float vectors hold the same bits (NaN included).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A 64-bit FNV-1a hash of the input: picks the options of a run deterministically from the
// bytes, so that one corpus file always replays the same call.
inline uint64_t Hash(const uint8_t* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

// The input as a file whose last 4 bytes are a CRC-32 of the rest: half the inputs get a
// valid one (chosen by their hash), so the decoder's checks past the CRC are reached too.
inline std::string WithValidCrcHalfTheTime(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size >= 4 && (Hash(data, size) & 1)) {
    const uint32_t crc = Crc32(bytes.data(), size - 4);
    std::memcpy(bytes.data() + size - 4, &crc, 4);
  }
  return bytes;
}

}  // namespace shmtrain::fuzz
