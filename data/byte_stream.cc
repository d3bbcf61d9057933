#include "data/byte_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "data/read_wait.h"

namespace shmtrain::data {
namespace {

constexpr size_t kBlock = size_t{1} << 18;  // bytes read from the file at a time

Status Damaged(const std::string& name, const std::string& what) {
  return Status::Data(name + ": " + what);
}

// An open file descriptor, closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

Status OpenFd(const std::string& path, Fd* fd) {
  const int f = OpenForReading(path);
  if (f < 0) return Status::Data(path + ": cannot open file: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(f);
    return Status::Data(path + ": is a directory, not a data file");
  }
  fd->reset(f);
  return Status::Ok();
}

// pread of exactly n bytes at `off`; false at a short read.
bool PreadAll(int fd, void* buf, size_t n, uint64_t off) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

// A file read a block at a time: passed through when plain, inflated when it starts with the
// gzip magic. zlib's gzread is not used: it skips garbage after the last member and names the
// file "<fd:N>" in its errors.
class FileSource final : public ByteSource {
 public:
  FileSource(std::string path, int fd, bool regular, uint64_t size)
      : ByteSource(std::move(path)), fd_(fd), regular_(regular), size_(size), in_(kBlock) {}
  ~FileSource() override {
    if (gzip_) inflateEnd(&z_);
  }

  // Reads the first bytes: gzip or plain.
  Status Start() {
    z_.next_in = in_.data();
    while (z_.avail_in < 2 && !eof_) {
      if (Status s = Fill(); !s.ok()) return s;
    }
    if (z_.avail_in < 2 || in_[0] != 0x1f || in_[1] != 0x8b) return Status::Ok();
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) return Damaged(name(), "cannot start zlib");
    gzip_ = true;
    return Status::Ok();
  }

  Status Read(void* buf, size_t n, size_t* got) override {
    *got = 0;
    Status s =
        gzip_ ? Inflate(static_cast<Bytef*>(buf), n, got) : Plain(static_cast<Bytef*>(buf), n, got);
    out_ += *got;
    return s;
  }

  Capacity Left() const override {
    Capacity c;
    if (!regular_) return c;
    const uint64_t size = std::max(size_, read_);
    if (!gzip_) {
      c.most = size - out_;
      c.exact = true;
      c.why = "the file has only " + std::to_string(c.most) + " more (it ends at byte " +
              std::to_string(size) + ")";
      return c;
    }
    // Inflate may hold a few output bytes of input it has consumed: a match's unwritten rest.
    const uint64_t rest = size - Consumed(), slack = 1u << 16;
    c.most = rest > (UINT64_MAX - slack) / kMaxInflateRatio ? UINT64_MAX
                                                            : rest * kMaxInflateRatio + slack;
    c.why = "the rest of this " + std::to_string(size) + "-byte gzip file inflates to at most " +
            std::to_string(c.most) + " (deflate yields at most " +
            std::to_string(kMaxInflateRatio) + " bytes per byte)";
    return c;
  }

 private:
  // The file offset of the first byte not yet consumed.
  uint64_t Consumed() const { return read_ - z_.avail_in; }

  // Appends the file's next bytes to the unconsumed ones (at least one, unless at its end).
  Status Fill() {
    if (z_.avail_in > 0 && z_.next_in != in_.data()) {
      std::memmove(in_.data(), z_.next_in, z_.avail_in);
    }
    z_.next_in = in_.data();
    for (;;) {
      if (Status s = WaitReadable(fd_.get(), name()); !s.ok()) return s;
      const ssize_t r = ::read(fd_.get(), in_.data() + z_.avail_in, in_.size() - z_.avail_in);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Damaged(name(), std::string("cannot read file: ") + std::strerror(errno));
      eof_ = r == 0;
      z_.avail_in += static_cast<uInt>(r);
      read_ += static_cast<uint64_t>(r);
      return Status::Ok();
    }
  }

  Status Plain(Bytef* p, size_t n, size_t* got) {
    while (*got < n) {
      if (z_.avail_in == 0) {
        if (eof_) break;
        if (Status s = Fill(); !s.ok()) return s;
        continue;
      }
      const size_t k = std::min<size_t>(n - *got, z_.avail_in);
      std::memcpy(p + *got, z_.next_in, k);
      z_.next_in += k;
      z_.avail_in -= static_cast<uInt>(k);
      *got += k;
    }
    return Status::Ok();
  }

  // *got: what was inflated, before an error too.
  Status Inflate(Bytef* p, size_t n, size_t* got) {
    z_.next_out = p;
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, UINT_MAX));
    const Status s = InflateToBuffer();
    *got = static_cast<size_t>(z_.next_out - p);
    return s;
  }

  // Inflates into z_.next_out until it is full or the stream ends.
  Status InflateToBuffer() {
    while (z_.avail_out > 0 && !end_) {
      if (member_done_) {
        if (Status s = NextMember(); !s.ok()) return s;
        continue;
      }
      if (z_.avail_in == 0) {
        if (Status s = Fill(); !s.ok()) return s;
      }
      // Inflated even when the file has no more bytes: zlib may hold decoded input it has not
      // written for want of room (a match, whose distance it checks only when it copies it),
      // and a full buffer of one size must find what a larger one finds. No progress with
      // no input left is the file's end inside the stream.
      const int r = inflate(&z_, Z_NO_FLUSH);
      if (r == Z_STREAM_END) {
        member_done_ = true;
      } else if (r == Z_BUF_ERROR && z_.avail_in == 0) {
        return Damaged(name(), "truncated: the gzip stream ends at byte " +
                                   std::to_string(read_) + ", inside its compressed data");
      } else if (r != Z_OK) {
        // The byte inflation failed at: the last one it read.
        const uint64_t at = Consumed() > 0 ? Consumed() - 1 : 0;
        return Damaged(name(), "damaged gzip data at byte " + std::to_string(at) + ": " +
                                   (z_.msg ? z_.msg : "inflate failed"));
      }
    }
    return Status::Ok();
  }

  // After a member's end: the file's end, another member (RFC 1952 allows several, and gzip
  // reads them as one stream), zero bytes to the end (padding: tapes and some tools pad a file
  // with zeros, and gzip ignores them), or garbage, refused as `gzip -t` refuses it.
  Status NextMember() {
    while (z_.avail_in < 2 && !eof_) {
      if (Status s = Fill(); !s.ok()) return s;
    }
    if (z_.avail_in == 0) {
      end_ = true;
      return Status::Ok();
    }
    if (z_.next_in[0] == 0) return ZeroPadding();
    if (z_.avail_in < 2 || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b) {
      return Damaged(
          name(), "trailing garbage after the gzip stream at byte " + std::to_string(Consumed()));
    }
    inflateReset(&z_);
    member_done_ = false;
    return Status::Ok();
  }

  // Zero bytes from here: the end of the stream when they go on to the end of the file, else
  // garbage from here (gzip too calls zeros followed by anything, a member included, garbage).
  Status ZeroPadding() {
    const uint64_t from = Consumed();
    for (;;) {
      while (z_.avail_in > 0 && z_.next_in[0] == 0) {
        ++z_.next_in;
        --z_.avail_in;
      }
      if (z_.avail_in > 0) {
        return Damaged(name(), "trailing garbage after the gzip stream at byte " +
                                   std::to_string(from) +
                                   " (zero bytes, then a non-zero byte at byte " +
                                   std::to_string(Consumed()) + ")");
      }
      if (eof_) {
        end_ = true;
        return Status::Ok();
      }
      if (Status s = Fill(); !s.ok()) return s;
    }
  }

  Fd fd_;
  bool regular_;
  uint64_t size_;
  std::vector<Bytef> in_;
  z_stream z_{};
  bool gzip_ = false, eof_ = false, member_done_ = false, end_ = false;
  uint64_t read_ = 0;  // file bytes read
  uint64_t out_ = 0;   // bytes yielded
};

uint16_t U16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t U32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
uint64_t U64(const unsigned char* p) { return U32(p) | static_cast<uint64_t>(U32(p + 4)) << 32; }

// One member as the central directory describes it.
struct ZipEntry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, local_offset = 0;
};

// Where the central directory is: the end record, or its zip64 form when a field overflowed.
Status FindCentralDirectory(const std::string& path, int fd, uint64_t size, uint64_t* offset,
                            uint64_t* count) {
  const std::string bad = "not a valid zip archive (.npz): ";
  const size_t tail = static_cast<size_t>(std::min<uint64_t>(size, 22 + 65535));
  std::vector<unsigned char> t(tail);
  if (tail < 22 || !PreadAll(fd, t.data(), tail, size - tail)) {
    return Damaged(path, bad + "too short for a zip end record");
  }
  size_t e = tail - 22 + 1;
  do {
    --e;
  } while (e > 0 && U32(&t[e]) != 0x06054b50);
  if (U32(&t[e]) != 0x06054b50) return Damaged(path, bad + "no end record (truncated?)");
  *count = U16(&t[e + 10]);
  *offset = U32(&t[e + 16]);
  if (*count == 0xFFFF || *offset == 0xFFFFFFFF) {
    const uint64_t eocd = size - tail + e;
    unsigned char loc[20], z[56];
    if (eocd < 20 || !PreadAll(fd, loc, 20, eocd - 20) || U32(loc) != 0x07064b50 ||
        !PreadAll(fd, z, 56, U64(loc + 8)) || U32(z) != 0x06064b50) {
      return Damaged(path, bad + "its zip64 end record is missing or damaged");
    }
    *count = U64(z + 32);
    *offset = U64(z + 48);
  }
  if (*offset >= size) return Damaged(path, bad + "the central directory lies past the end");
  return Status::Ok();
}

// Applies a zip64 extra field (id 1) to the fields that overflowed, in the order the
// specification lists them.
void ApplyZip64(const unsigned char* extra, size_t len, ZipEntry* e, bool usize_ff,
                bool csize_ff, bool offset_ff) {
  for (size_t i = 0; i + 4 <= len;) {
    const uint16_t id = U16(extra + i), n = U16(extra + i + 2);
    const unsigned char* f = extra + i + 4;
    if (id == 1 && i + 4 + n <= len) {
      size_t k = 0;
      if (usize_ff && k + 8 <= n) e->usize = U64(f + k), k += 8;
      if (csize_ff && k + 8 <= n) e->csize = U64(f + k), k += 8;
      if (offset_ff && k + 8 <= n) e->local_offset = U64(f + k), k += 8;
    }
    i += 4 + n;
  }
}

Status ReadDirectory(const std::string& path, int fd, std::vector<ZipEntry>* out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return Damaged(path, std::string("cannot stat: ") + std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t off = 0, count = 0;
  if (Status s = FindCentralDirectory(path, fd, size, &off, &count); !s.ok()) return s;
  std::unordered_map<std::string, uint64_t> seen;  // name -> entry
  for (uint64_t i = 0; i < count; ++i) {
    unsigned char h[46];
    if (!PreadAll(fd, h, 46, off) || U32(h) != 0x02014b50) {
      return Damaged(path, "not a valid zip archive (.npz): central directory entry " +
                               std::to_string(i + 1) + " is damaged");
    }
    const size_t nlen = U16(h + 28), xlen = U16(h + 30), clen = U16(h + 32);
    std::vector<unsigned char> var(nlen + xlen);
    if (!PreadAll(fd, var.data(), var.size(), off + 46)) {
      return Damaged(path, "not a valid zip archive (.npz): the central directory is truncated");
    }
    ZipEntry e;
    e.name.assign(var.begin(), var.begin() + static_cast<std::ptrdiff_t>(nlen));
    e.flags = U16(h + 8);
    e.method = U16(h + 10);
    e.crc = U32(h + 16);
    e.csize = U32(h + 20);
    e.usize = U32(h + 24);
    e.local_offset = U32(h + 42);
    ApplyZip64(var.data() + nlen, xlen, &e, e.usize == 0xFFFFFFFF, e.csize == 0xFFFFFFFF,
               e.local_offset == 0xFFFFFFFF);
    if (const auto [at, fresh] = seen.emplace(e.name, i); !fresh) {
      return Damaged(path, "the archive has two members named '" + e.name + "' (entries " +
                               std::to_string(at->second + 1) + " and " + std::to_string(i + 1) +
                               "): ambiguous, readers differ on which one counts");
    }
    out->push_back(std::move(e));
    off += 46 + nlen + xlen + clen;
  }
  return Status::Ok();
}

// A member's bytes: stored, or raw deflate; the CRC-32 and size are checked at its end.
class ZipMember final : public ByteSource {
 public:
  ZipMember(std::string name, int fd, const ZipEntry& e, uint64_t data_offset)
      : ByteSource(std::move(name)), fd_(fd), entry_(e), next_(data_offset),
        left_(e.csize) {}
  ~ZipMember() override {
    if (inflating_) inflateEnd(&z_);
  }

  Status Start() {
    if (entry_.method != 8) return Status::Ok();
    std::memset(&z_, 0, sizeof z_);
    if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) return Damaged(name(), "cannot start zlib");
    inflating_ = true;
    in_.resize(kBlock);
    return Status::Ok();
  }

  Status Read(void* buf, size_t n, size_t* got) override {
    *got = 0;
    if (done_) return Status::Ok();
    Status s = entry_.method == 8 ? Inflate(buf, n, got) : Stored(buf, n, got);
    if (!s.ok()) return s;
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(buf), *got);
    total_ += *got;
    if (*got < n || (entry_.method == 0 && left_ == 0)) return Finish();
    return Status::Ok();
  }

  Capacity Left() const override {
    Capacity c;
    c.most = entry_.usize - std::min(total_, entry_.usize);
    c.exact = entry_.method == 0;
    c.why = "the archive states only " + std::to_string(c.most) + " more for this member";
    return c;
  }

 private:
  Status Stored(void* buf, size_t n, size_t* got) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, left_));
    if (!PreadAll(fd_.get(), buf, want, next_)) return Damaged(name(), "the archive is truncated");
    next_ += want;
    left_ -= want;
    *got = want;
    return Status::Ok();
  }

  // Inflates at most one byte past the stated size: that byte is the refusal.
  Status Inflate(void* buf, size_t n, size_t* got) {
    const uint64_t room = entry_.usize - std::min(total_, entry_.usize);
    z_.next_out = static_cast<Bytef*>(buf);
    z_.avail_out = static_cast<uInt>(std::min<uint64_t>(room < n ? room + 1 : n, UINT_MAX));
    while (z_.avail_out > 0 && !ended_) {
      if (z_.avail_in == 0 && left_ > 0) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(in_.size(), left_));
        if (!PreadAll(fd_.get(), in_.data(), want, next_)) {
          return Damaged(name(), "the archive is truncated");
        }
        next_ += want;
        left_ -= want;
        z_.next_in = in_.data();
        z_.avail_in = static_cast<uInt>(want);
      }
      const int r = inflate(&z_, Z_NO_FLUSH);
      if (r == Z_STREAM_END) {
        ended_ = true;
      } else if (r != Z_OK) {
        // The byte inflation failed at: the last one it read (never before the member's data).
        return Damaged(
            name(), "damaged compressed data at byte " + std::to_string(next_ - z_.avail_in - 1) +
                        " of the archive: " + (z_.msg ? z_.msg : "the deflate stream ends early"));
      }
    }
    *got = static_cast<size_t>(z_.next_out - static_cast<Bytef*>(buf));
    if (*got > room) {
      return Damaged(name(), "damaged: it inflates past the " + std::to_string(entry_.usize) +
                                 " bytes the archive states for it");
    }
    return Status::Ok();
  }

  Status Finish() {
    done_ = true;
    if (total_ != entry_.usize || crc_ != entry_.crc) {
      return Damaged(name(), "damaged: its bytes do not match the archive's CRC-32 and size");
    }
    return Status::Ok();
  }

  Fd fd_;
  ZipEntry entry_;
  uint64_t next_, left_;
  z_stream z_{};
  bool inflating_ = false, ended_ = false, done_ = false;
  std::vector<Bytef> in_;
  uLong crc_ = crc32_z(0, nullptr, 0);
  uint64_t total_ = 0;
};

}  // namespace

Status ReadExact(ByteSource& src, void* buf, size_t n, const std::string& what) {
  size_t got = 0;
  if (Status s = src.Read(buf, n, &got); !s.ok()) return s;
  if (got < n) {
    return Status::Data(src.name() + ": truncated: " + what + " needs " + std::to_string(n) +
                        " bytes, the file has only " + std::to_string(got) + " more");
  }
  return Status::Ok();
}

Status ExpectAtLeast(const ByteSource& src, uint64_t need, const std::string& what) {
  const Capacity left = src.Left();
  if (need <= left.most) return Status::Ok();
  return Status::Data(src.name() + ": truncated: " + what + " needs " + std::to_string(need) +
                      " bytes, " + left.why);
}

Status ExpectEnd(ByteSource& src, const std::string& what) {
  char c;
  size_t got = 0;
  if (Status s = src.Read(&c, 1, &got); !s.ok()) return s;
  if (got != 0) {
    return Status::Data(src.name() + ": " + what +
                        " is followed by more bytes (the file is longer than its header says)");
  }
  return Status::Ok();
}

namespace {

// A member's stated sizes against the archive: its data within the file, and a stored member
// as long uncompressed as compressed.
Status CheckExtent(const std::string& name, int fd, const ZipEntry& e, uint64_t data) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Damaged(name, std::string("cannot stat: ") + std::strerror(errno));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (data > size || e.csize > size - data) {
    return Damaged(name, "the archive is truncated: the member's " + std::to_string(e.csize) +
                             " bytes from byte " + std::to_string(data) +
                             " lie past its end at byte " + std::to_string(size));
  }
  if (e.method == 0 && e.csize != e.usize) {
    return Damaged(name, "damaged: a stored member of " + std::to_string(e.csize) +
                             " bytes states " + std::to_string(e.usize) + " uncompressed");
  }
  return Status::Ok();
}

}  // namespace

Status OpenFile(const std::string& path, std::unique_ptr<ByteSource>* out) {
  Fd fd;
  if (Status s = OpenFd(path, &fd); !s.ok()) return s;
  return OpenDescriptor(path, fd.release(), out);
}

Status OpenDescriptor(const std::string& path, int fd, std::unique_ptr<ByteSource>* out) {
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  auto f = std::make_unique<FileSource>(path, fd, regular,
                                        regular ? static_cast<uint64_t>(st.st_size) : 0);
  if (Status s = f->Start(); !s.ok()) return s;
  *out = std::move(f);
  return Status::Ok();
}

bool IsGzip(int fd) {
  unsigned char magic[2];
  return PreadAll(fd, magic, 2, 0) && magic[0] == 0x1f && magic[1] == 0x8b;
}

Status ListZip(const std::string& path, std::vector<std::string>* names) {
  Fd fd;
  if (Status s = OpenFd(path, &fd); !s.ok()) return s;
  std::vector<ZipEntry> entries;
  if (Status s = ReadDirectory(path, fd.get(), &entries); !s.ok()) return s;
  names->clear();
  for (const ZipEntry& e : entries) names->push_back(e.name);
  return Status::Ok();
}

Status OpenZipMember(const std::string& path, const std::string& member,
                     std::unique_ptr<ByteSource>* out) {
  Fd fd;
  if (Status s = OpenFd(path, &fd); !s.ok()) return s;
  std::vector<ZipEntry> entries;
  if (Status s = ReadDirectory(path, fd.get(), &entries); !s.ok()) return s;
  const auto it = std::find_if(entries.begin(), entries.end(),
                               [&](const ZipEntry& e) { return e.name == member; });
  if (it == entries.end())
    return Status::Data(path + ": the archive has no member '" + member + "'");
  const std::string name = path + " (" + member + ")";
  if (it->flags & 1) return Damaged(name, "is encrypted, which is not supported");
  if (it->method != 0 && it->method != 8) {
    return Damaged(name, "compression method " + std::to_string(it->method) +
                             " is not supported (stored or deflate, as numpy writes)");
  }
  unsigned char h[30];
  if (!PreadAll(fd.get(), h, 30, it->local_offset) || U32(h) != 0x04034b50) {
    return Damaged(name, "its local zip header is missing or damaged");
  }
  const uint64_t data = it->local_offset + 30 + U16(h + 26) + U16(h + 28);
  if (Status s = CheckExtent(name, fd.get(), *it, data); !s.ok()) return s;
  auto m = std::make_unique<ZipMember>(name, fd.release(), *it, data);
  if (Status s = m->Start(); !s.ok()) return s;
  *out = std::move(m);
  return Status::Ok();
}

Status CheckZipMember(const std::string& path, const std::string& member) {
  std::unique_ptr<ByteSource> src;
  if (Status s = OpenZipMember(path, member, &src); !s.ok()) return s;
  std::vector<char> buf(kBlock);
  for (size_t got = buf.size(); got == buf.size();) {
    if (Status s = src->Read(buf.data(), buf.size(), &got); !s.ok()) return s;
  }
  return Status::Ok();
}

std::string PeekFile(const std::string& path, size_t n) {
  Fd fd;
  if (!OpenFd(path, &fd).ok()) return "";
  std::string s(n, '\0');
  const ssize_t r = ::pread(fd.get(), s.data(), n, 0);
  s.resize(r > 0 ? static_cast<size_t>(r) : 0);
  return s;
}

std::string PeekContent(const std::string& path, size_t n) {
  std::unique_ptr<ByteSource> src;
  if (!OpenFile(path, &src).ok()) return "";
  std::string s(n, '\0');
  size_t got = 0;
  if (!src->Read(s.data(), n, &got).ok()) got = 0;
  s.resize(got);
  return s;
}

}  // namespace shmtrain::data
