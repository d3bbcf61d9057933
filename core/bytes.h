// Writing and reading fixed-width values in a byte string: the one encoder and the one reader of
// the binary file formats (model files, checkpoints). The formats are little-endian, which is
// this machine's order (asserted below, and for the segment in shm/layout.h).
#pragma once

#include <bit>
#include <cstddef>
#include <cstring>
#include <string>

namespace shmtrain {

static_assert(std::endian::native == std::endian::little,
              "values are copied byte for byte into little-endian files");

template <class T>
void AppendRaw(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Reads values off a byte string in order. A read past the end reads nothing and returns false,
// so a decoder names what was cut short instead of reading out of bounds.
class ByteReader {
 public:
  explicit ByteReader(const std::string& b) : b_(b) {}
  template <class T>
  bool Get(T* v) {
    if (left() < sizeof(T)) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // The next n bytes as a string; false (and nothing read) when fewer are left.
  bool GetBytes(size_t n, std::string* out) {
    if (left() < n) return false;
    out->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  const char* here() const { return b_.data() + pos_; }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

}  // namespace shmtrain
