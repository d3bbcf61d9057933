// A text file read in blocks of whole lines, so that a loader holds one block of the file at a
// time and never all of it: the peak memory of a load is then its result plus O(block).
// Internal to data/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "shmtrain/status.h"

namespace shmtrain::data {

// The count of '\n' in [p, p + n).
int64_t CountNewlines(const char* p, size_t n);

class LineBlocks {
 public:
  // block_bytes: how much is read at a time (a block holds more when a line is longer).
  LineBlocks(std::string path, size_t block_bytes);
  ~LineBlocks();
  LineBlocks(const LineBlocks&) = delete;
  LineBlocks& operator=(const LineBlocks&) = delete;

  // Opens the file and reads the first block. Errors are Status::Data, "<path>: cannot open
  // file: <strerror>" or "... cannot read file: ...".
  Status Open();

  // Bytes after the end of a block that may be read (parsers read words, not bytes): zeros or
  // the next lines' text.
  static constexpr size_t kPadding = 64;

  // The current block: whole lines, each ending in '\n' (one is added in memory to a last
  // line that has none, which changes no line's text), the first block without the file's
  // UTF-8 byte order mark, then kPadding readable bytes. Empty only when there is no more
  // text. Valid until the next call of a non-const method.
  std::string_view block() const { return {buf_.get() + begin_, end_ - begin_}; }
  // Whether the file held no byte at all (not even a byte order mark).
  bool file_empty() const { return raw_bytes_ == 0; }
  bool at_eof() const { return eof_; }

  // Reads more lines into the current block (at least one more, unless at the end).
  Status Extend();
  // Moves to the next block; *more false when the file has none.
  Status Next(bool* more);

  // The size of the whole text (without a byte order mark) and its count of '\n': a regular
  // file is read again for it, through a small buffer. A file that is not regular (a pipe)
  // cannot be read twice: Open reads it whole into the first block, as one block.
  Status Measure(int64_t* bytes, int64_t* newlines) const;

 private:
  // Appends up to `want` bytes of the file after the data (fewer at its end: eof_ is set).
  Status Fill(size_t want);
  // Moves end_ past the last '\n' of the data after it, reading more while there is none;
  // at the end of the file, to the end of the data (adding a '\n' if the last line has none).
  Status CutAtLine();
  Status ReadError() const;
  void ZeroPadding() { std::memset(buf_.get() + data_, 0, kPadding); }

  std::string path_;
  size_t block_bytes_;
  int fd_ = -1;
  bool regular_ = false;
  bool eof_ = false;
  bool added_newline_ = false;  // a '\n' is in buf_ that the file does not have
  int64_t raw_bytes_ = 0;       // read from the file so far
  size_t bom_ = 0;              // bytes of byte order mark skipped
  std::unique_ptr<char[]> buf_;  // not a vector: nothing is zeroed before read() fills it
  size_t cap_ = 0;
  size_t begin_ = 0, end_ = 0;  // the block in buf_
  size_t data_ = 0;             // bytes of file data in buf_: the block and what follows it
};

}  // namespace shmtrain::data
