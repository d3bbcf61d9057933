// Where the bytes of an array file come from: a file, plain or gzip (RFC 1952: one member or
// several concatenated, as gzip reads them), or one member of a zip archive (an .npz: stored
// or deflated). The array readers (data/array_file.h) see only this seam, so a format is
// independent of how its bytes are packed, and every source reads in blocks: no source holds
// a whole file in memory.
//
// No size a file declares is trusted: each source says how many bytes it can still yield at
// most (Left), so a reader refuses a header that claims more before it allocates for it.
//
// The zip directory and members are read here, not by libzip (Debian's libzip-dev 1.7).
// Measured side by side on 50 MB members, both stream (a 5.7 MB peak either way) at the same
// speed (medians of 5: stored, CRC-32 included, 35 ms here and 38 ms; deflated 284 and 280 ms),
// but libzip says less and stops later on a bad file: a damaged deflate stream is "Zlib error:
// data error" (here: the archive's byte and zlib's reason), a member that inflates past the
// size its directory states is inflated to its end (64 MiB, 880 ms) before "CRC error" (here:
// refused at the first byte past it), and of two members named alike it reads the first without
// a word, where numpy reads the last (here: refused as ambiguous). And in the fuzz build libzip
// would be Debian's uninstrumented library: fuzz/npz.cc would get no coverage from inside it,
// and ASan would check only the libc calls it intercepts there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shmtrain/status.h"

namespace shmtrain::data {

// What a source can still yield: at most `most` bytes (UINT64_MAX: no bound, a pipe), exactly
// that many when `exact`; `why` says so in a message ("the file has only 64 more bytes").
struct Capacity {
  uint64_t most = UINT64_MAX;
  bool exact = false;
  std::string why;
};

// Deflate's greatest expansion: 258 bytes from 2 bits, so at most 1032 bytes per input byte.
constexpr uint64_t kMaxInflateRatio = 1032;

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to n bytes into buf; *got < n only at the end of the stream. A read error, or
  // a compressed stream found damaged, is Status::Data naming the source; *got then counts the
  // bytes before it, which are the stream's (a file's, and what gzip inflated up to the
  // damage; 0 where a source cannot tell), so that a reader can use them before it reports it.
  virtual Status Read(void* buf, size_t n, size_t* got) = 0;
  // The bytes still to come (see Capacity): a bound that holds whatever the file declares.
  virtual Capacity Left() const = 0;
  // For messages: the path, or "path (array 'x')" for a member of an archive.
  const std::string& name() const { return name_; }

 protected:
  explicit ByteSource(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

// Reads exactly n bytes, else Status::Data "<name>: truncated: <what> needs N bytes, the file
// has only M more".
Status ReadExact(ByteSource& src, void* buf, size_t n, const std::string& what);
// Status::Data "<name>: <what> is followed by more bytes (the file is longer than its header
// says)" unless the source is at its end.
Status ExpectEnd(ByteSource& src, const std::string& what);

// Status::Data "<name>: truncated: <what> needs N bytes, <why>" when the source cannot yield
// `need` more bytes (Left()), before anything is read or allocated for them.
Status ExpectAtLeast(const ByteSource& src, uint64_t need, const std::string& what);

// A file, decompressed when it starts with the gzip magic. A gzip file is checked as `gzip -t`
// checks it: its CRC-32 and length, every member, and nothing after the last member but zero
// bytes to the end (padding, which gzip ignores too; anything else is refused as trailing
// garbage with its offset); a damaged stream is refused at the compressed byte where inflation
// failed. Every message names the path.
Status OpenFile(const std::string& path, std::unique_ptr<ByteSource>* out);
// OpenFile on `fd`, open for reading on `path` (which names it in messages), from where the
// descriptor stands: the source takes it over and closes it.
Status OpenDescriptor(const std::string& path, int fd, std::unique_ptr<ByteSource>* out);
// Whether the file open at `fd` (a regular file: read at offset 0, the descriptor's own offset
// left alone) starts with the gzip magic.
bool IsGzip(int fd);

// The names of the members of a zip archive, in the archive's order. Two members of one name
// are refused as ambiguous (readers disagree on which one counts), naming it.
Status ListZip(const std::string& path, std::vector<std::string>* names);
// The member `member` of a zip archive (methods stored and deflate, zip64 sizes as numpy
// writes them); its CRC-32 and size are checked when its end is read, and inflation stops,
// refused, the moment the member exceeds the uncompressed size the directory states.
// Status::Data when the archive has no such member, or its data lies past the archive's end.
Status OpenZipMember(const std::string& path, const std::string& member,
                     std::unique_ptr<ByteSource>* out);

// Reads the member `member` to its end: Status::Data when its CRC-32 or size is wrong.
Status CheckZipMember(const std::string& path, const std::string& member);

// The first bytes of a file as stored (not decompressed), for telling formats apart; fewer
// when the file is shorter. Empty when it cannot be read (the loader then says why).
std::string PeekFile(const std::string& path, size_t n);
// The first bytes of a file after gzip decompression (the same as PeekFile for a plain file).
std::string PeekContent(const std::string& path, size_t n);

}  // namespace shmtrain::data
