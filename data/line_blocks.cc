#include "data/line_blocks.h"

#include <fcntl.h>
#include <string.h>  // memrchr (GNU)
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "core/utf8.h"
#include "data/dataset.h"
#include "data/read_wait.h"

namespace shmtrain::data {
namespace {

constexpr char kBom[] = "\xEF\xBB\xBF";

// A line with no end after this many bytes and a NUL byte among them is binary data: /dev/zero
// is refused here, not read on for ever.
constexpr size_t kBinaryLineBytes = size_t{64} << 10;

}  // namespace

int64_t CountByte(const char* p, size_t n, char c) {
  // 16 bytes a lane each, counted in bytes for up to 255 rounds: SSE2 compares and adds them
  // at once (std::count widens every byte to 64 bits first, several times slower).
  typedef unsigned char Bytes __attribute__((vector_size(16)));
  int64_t total = 0;
  size_t i = 0;
  while (n - i >= 16) {
    Bytes acc = {};
    for (int r = 0; r < 255 && n - i >= 16; ++r, i += 16) {
      Bytes v;
      std::memcpy(&v, p + i, 16);
      acc -=
          reinterpret_cast<Bytes>(v == static_cast<unsigned char>(c));  // a match is all ones: -1
    }
    for (int l = 0; l < 16; ++l) total += acc[l];
  }
  for (; i < n; ++i) total += p[i] == c;
  return total;
}

LineBlocks::LineBlocks(std::string path, size_t block_bytes, size_t max_line_bytes)
    : path_(std::move(path)),
      block_bytes_(std::max<size_t>(block_bytes, 1)),
      max_line_bytes_(max_line_bytes) {}

LineBlocks::~LineBlocks() {
  if (fd_ >= 0) ::close(fd_);
}

Status LineBlocks::ReadError() const {
  return Status::Data(path_ + ": cannot read file: " + std::strerror(errno));
}

Status LineBlocks::Open() {
  fd_ = OpenForReading(path_);
  if (fd_ < 0) return Status::Data(path_ + ": cannot open file: " + std::strerror(errno));
  struct stat st {};
  size_t first = block_bytes_;
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) && !IsGzip(fd_)) {
    regular_ = true;
    // +1: the end of the file is seen without another block.
    first = std::min(block_bytes_, static_cast<size_t>(st.st_size) + 1);
  } else {
    // A gzip file, or a stream (whose first bytes cannot be looked at and left for the
    // reader): read through a ByteSource, which inflates gzip and passes anything else through.
    if (Status s = OpenDescriptor(path_, std::exchange(fd_, -1), &src_); !s.ok()) return s;
  }
  Fill(std::max<size_t>(first, 3));  // 3: a whole BOM
  // A UTF-8 byte order mark (spreadsheet exports write one) is not part of the first cell.
  if (data_ >= 3 && std::memcmp(buf_.get(), kBom, 3) == 0) bom_ = 3;
  begin_ = end_ = bom_;
  return CutAtLine();
}

void LineBlocks::Fill(size_t want) {
  // +1: room for the '\n' a last line may get.
  if (cap_ < data_ + want + 1 + kPadding) {
    const size_t cap = std::max(data_ + want + 1 + kPadding, cap_ + cap_ / 2);
    std::unique_ptr<char[]> grown(new char[cap]);
    if (data_ > 0) std::memcpy(grown.get(), buf_.get(), data_);  // buf_ is null at first
    buf_ = std::move(grown);
    cap_ = cap;
  }
  const size_t from = data_;
  for (size_t got = 0; got < want && !eof_ && failed_.ok();) {
    size_t n = 0;
    const Status s = ReadSome(buf_.get() + data_, want - got, &n);
    if (!s.ok()) {
      failed_ = s;
    } else if (n == 0) {
      eof_ = true;
    }
    data_ += n;
    got += n;
    raw_bytes_ += static_cast<int64_t>(n);
  }
  LineEnds(from);
  ZeroPadding();
}

Status LineBlocks::ReadSome(char* p, size_t n, size_t* got) {
  if (src_ != nullptr) return src_->Read(p, n, got);
  for (;;) {
    if (Status s = WaitReadable(fd_, Printable(path_)); !s.ok()) return s;
    const ssize_t r = ::read(fd_, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ReadError();
    *got = static_cast<size_t>(r);
    return Status::Ok();
  }
}

void LineBlocks::LineEnds(size_t from) {
  if (ends_ == Ends::kUndecided) {
    // The first '\r' or '\n': a '\n', or '\r's then a '\n', end lines in '\n'; '\r's then
    // anything else, or the end of the file, end them in '\r'.
    const char* const b = buf_.get();
    size_t i = ends_scan_;
    while (i < data_ && b[i] != '\n' && b[i] != '\r') ++i;
    size_t j = i;
    while (j < data_ && b[j] == '\r') ++j;
    if (j == data_ && !eof_) {
      ends_scan_ = i;  // undecided until more is read
      return;
    }
    ends_ = i < data_ && (b[i] == '\r' && (j == data_ || b[j] != '\n')) ? Ends::kCr : Ends::kLf;
    from = 0;  // the data read so far too
  }
  if (ends_ == Ends::kCr) std::replace(buf_.get() + from, buf_.get() + data_, '\r', '\n');
}

Status LineBlocks::CheckLongLine() const {
  const size_t n = data_ - end_;
  const bool too_long = n > max_line_bytes_;
  const bool binary = n >= kBinaryLineBytes && std::memchr(buf_.get() + end_, '\0', n) != nullptr;
  if (!too_long && !binary) return Status::Ok();
  const int64_t line = lines_before_ + CountNewlines(buf_.get() + begin_, end_ - begin_) + 1;
  const std::string at = path_ + ":" + std::to_string(line) + ": ";
  if (binary) {
    return Status::Data(at + "no line end in the first " + std::to_string(n) +
                        " bytes of the line, and a NUL byte: this is binary data, not a CSV or "
                        "LIBSVM text file");
  }
  return Status::Data(at + "line is longer than " + std::to_string(max_line_bytes_ >> 20) +
                      " MiB without a line end: not a CSV or LIBSVM text file");
}

Status LineBlocks::CutAtLine() {
  for (;;) {
    if (eof_) {
      if (data_ > end_ && buf_[data_ - 1] != '\n') {
        buf_[data_++] = '\n';  // Fill kept room for it
        added_newline_ = true;
        ZeroPadding();
      }
      end_ = data_;
      return Status::Ok();
    }
    if (const void* nl = memrchr(buf_.get() + end_, '\n', data_ - end_)) {
      end_ = static_cast<size_t>(static_cast<const char*>(nl) - buf_.get()) + 1;
      return Status::Ok();
    }
    // No whole line after the block yet (one longer than a block): read on until it ends.
    if (Status s = CheckLongLine(); !s.ok()) return s;
    if (!failed_.ok()) return failed_;
    Fill(std::max(block_bytes_, data_ - begin_));
  }
}

Status LineBlocks::Extend() {
  if (eof_ && end_ == data_) return Status::Ok();
  if (end_ == data_) Fill(block_bytes_);
  return CutAtLine();
}

Status LineBlocks::Next(bool* more) {
  // A stop signal ends a load between two blocks (data/dataset.h).
  if (Status s = LoadStopped("reading " + Printable(path_)); !s.ok()) return s;
  lines_before_ += CountNewlines(buf_.get() + begin_, end_ - begin_);
  moved_ = true;
  // What follows the block (a line in part) moves to the front of the buffer.
  std::memmove(buf_.get(), buf_.get() + end_, data_ - end_);
  data_ -= end_;
  ends_scan_ -= std::min(ends_scan_, end_);
  begin_ = end_ = 0;
  if (!eof_) Fill(block_bytes_);
  if (Status s = CutAtLine(); !s.ok()) return s;
  *more = end_ > begin_;
  return Status::Ok();
}

Status LineBlocks::Measure(int64_t* bytes, int64_t* newlines) const {
  if (!regular_) {
    *bytes = raw_bytes_ - static_cast<int64_t>(bom_);
    *newlines = CountNewlines(buf_.get(), data_) - (added_newline_ ? 1 : 0);
    return Status::Ok();
  }
  std::vector<char> tmp(size_t{1} << 20);
  int64_t total = 0, lines = 0;
  for (;;) {
    const ssize_t n = ::pread(fd_, tmp.data(), tmp.size(), total);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ReadError();
    }
    if (n == 0) break;
    total += n;
    lines += CountNewlines(tmp.data(), static_cast<size_t>(n));
    if (ends_ == Ends::kCr) lines += CountByte(tmp.data(), static_cast<size_t>(n), '\r');
  }
  *bytes = total - static_cast<int64_t>(bom_);
  *newlines = lines;
  return Status::Ok();
}

}  // namespace shmtrain::data
