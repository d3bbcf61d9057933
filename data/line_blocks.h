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

#include "data/byte_stream.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

// The count of byte c in [p, p + n).
int64_t CountByte(const char* p, size_t n, char c);
// The count of '\n' in [p, p + n).
inline int64_t CountNewlines(const char* p, size_t n) {
  return CountByte(p, n, '\n');
}

// Lines end in '\n' ("\r\n" too: the loaders drop the '\r's that end a line), or, in a file
// whose first line ends in a lone '\r' (old Mac OS, as pandas and R read it), in '\r': each
// '\r' of such a file is read as '\n'. A regular file and a pipe are read alike, a block at a
// time; only a regular file can be measured (read twice) before its blocks are parsed. A gzip
// file is read inflated (data/byte_stream.h), as a pipe is: its text's size is known only once
// it is read; and so is a pipe of gzip data.
class LineBlocks {
 public:
  // block_bytes: how much is read at a time (a block holds more when a line is longer).
  // max_line_bytes: a longer line is refused (a file of one endless line is not text).
  LineBlocks(std::string path, size_t block_bytes, size_t max_line_bytes = kMaxLineBytes);
  ~LineBlocks();
  LineBlocks(const LineBlocks&) = delete;
  LineBlocks& operator=(const LineBlocks&) = delete;

  static constexpr size_t kMaxLineBytes = size_t{256} << 20;

  // Opens the file and reads the first block. Errors are Status::Data, "<path>: cannot open
  // file: <strerror>" or "... cannot read file: ...", or one of a line too long to be text:
  // "<path>:<line>: ..." for a line longer than max_line_bytes, or one of 64 KiB or more
  // with a NUL byte (binary data; a shorter line with one is the loaders' to refuse, at its
  // cell), or a gzip file's damage (data/byte_stream.h). Extend and Next return these too. A
  // read error or a damaged gzip stream is returned once the whole lines before it are read.
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

  // Whether Measure can tell the size of the whole text: a regular file (read again for it,
  // through a small buffer), or a pipe that ended within the blocks read so far, before Next.
  bool sized() const { return regular_ || (eof_ && !moved_); }
  // The size of the whole text (without a byte order mark) and a bound of its lines (its
  // count of '\n', and of '\r' in a file read with '\r' line ends). Only when sized().
  Status Measure(int64_t* bytes, int64_t* newlines) const;

 private:
  enum class Ends { kUndecided, kLf, kCr };

  // Appends up to `want` bytes of the file after the data (fewer at its end: eof_ is set; or
  // at a read error, or a damaged gzip stream: failed_ is set, and returned once the lines
  // read before it are used up, so the text before a fault is read as in blocks of any size).
  void Fill(size_t want);
  // Decides the line ends at the first one read, and reads '\r' as '\n' from `from` on in a
  // file of '\r' line ends.
  void LineEnds(size_t from);
  // Moves end_ past the last '\n' of the data after it, reading more while there is none;
  // at the end of the file, to the end of the data (adding a '\n' if the last line has none).
  Status CutAtLine();
  // The error of the line after the block, which has no end yet, when it is too long to be
  // text (see Open); else OK.
  Status CheckLongLine() const;
  Status ReadError() const;
  // Reads up to n bytes of text at p; *got == 0 only at its end.
  Status ReadSome(char* p, size_t n, size_t* got);
  void ZeroPadding() { std::memset(buf_.get() + data_, 0, kPadding); }

  std::string path_;
  size_t block_bytes_;
  size_t max_line_bytes_;
  int fd_ = -1;                      // a regular file that is not gzip, read and measured as it is
  std::unique_ptr<ByteSource> src_;  // else: gzip inflated, or a stream passed through
  bool regular_ = false;
  bool eof_ = false;
  Status failed_;               // the reading's error, after the data read before it
  bool moved_ = false;          // Next has dropped a block
  bool added_newline_ = false;  // a '\n' is in buf_ that the file does not have
  Ends ends_ = Ends::kUndecided;
  size_t ends_scan_ = 0;        // LineEnds looked for the first line end before this offset
  int64_t raw_bytes_ = 0;       // read from the file so far
  int64_t lines_before_ = 0;    // lines of the blocks dropped by Next
  size_t bom_ = 0;              // bytes of byte order mark skipped
  std::unique_ptr<char[]> buf_;  // not a vector: nothing is zeroed before read() fills it
  size_t cap_ = 0;
  size_t begin_ = 0, end_ = 0;  // the block in buf_
  size_t data_ = 0;             // bytes of file data in buf_: the block and what follows it
};

}  // namespace shmtrain::data
