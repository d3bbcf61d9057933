#include "master/files/output_write.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/decimal.h"
#include "core/signal_name.h"
#include "master/files/output_path.h"
#include "shm/futex.h"

namespace shmtrain::master {
namespace {

// How a write ended: 0 or the errno of its failure, or stopped on the way.
struct Outcome {
  int err = 0;
  bool stopped = false;
};

// Writes all of `bytes` to a regular file's descriptor (which has no reader to wait for).
int WriteAll(int fd, const std::string& bytes, off_t at) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, at + static_cast<off_t>(done));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(w);
  }
  return 0;
}

// Writes all of `bytes` to fd, whose writes never block (opened O_NONBLOCK, or a socket
// written with MSG_DONTWAIT): when it has no room, waits for room in poll(), kStopPollMs at a
// time, asking stopped() in between.
Outcome WriteWithoutBlocking(int fd, bool socket, const std::string& bytes,
                             const std::function<bool()>& stopped) {
  size_t done = 0;
  while (done < bytes.size()) {
    const char* p = bytes.data() + done;
    const size_t n = bytes.size() - done;
    const ssize_t w = socket ? ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) : ::write(fd, p, n);
    if (w >= 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    const int e = errno;
    if (e != EINTR && e != EAGAIN && e != EWOULDBLOCK) return {e, false};
    if (stopped && stopped()) return {0, true};
    if (e == EINTR) continue;
    pollfd pfd{fd, POLLOUT, 0};
    ::poll(&pfd, 1, kStopPollMs);
  }
  return {};
}

// Opens a FIFO or character device for writing, non-blocking (its writes then never block:
// WriteWithoutBlocking). A FIFO without a reader refuses (ENXIO): retried every 10 ms up to
// wait_ms, or until stopped().
int OpenStream(const OutputTarget& t, int wait_ms, const std::function<bool()>& stopped,
               Outcome* why) {
  // In nanoseconds: a deadline in whole milliseconds could end up to 1 ms short of the wait.
  const int64_t deadline = shm::MonotonicNs() + int64_t{wait_ms} * 1'000'000;
  for (;;) {
    const int fd = ::open(t.path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) return fd;
    why->err = errno;
    if (why->err == EINTR) continue;
    if (!t.fifo || why->err != ENXIO || shm::MonotonicNs() >= deadline) return -1;
    if (stopped && stopped()) {
      *why = {0, true};
      return -1;
    }
    const timespec tick{0, 10'000'000};
    nanosleep(&tick, nullptr);
  }
}

Status Interrupted(const std::string& path) {
  const int sig = g_stop_signal.load();
  return Status::Interrupted("stopped" + (sig != 0 ? " by " + SignalName(sig) : "") +
                             " while writing " + path +
                             ", which was not taking the bytes (a FIFO or pipe whose reader does "
                             "not read, or a terminal that does not print); it was not written");
}

Status WriteStream(const std::string& path, const OutputTarget& t, const std::string& bytes,
                   const WriteOptions& o) {
  Outcome r;
  const int fd = OpenStream(t, o.reader_wait_ms, o.stopped, &r);
  if (fd < 0 && r.stopped) return Interrupted(path);
  if (fd < 0 && t.fifo && r.err == ENXIO) {
    return Status::Resource("cannot write " + path + ": no process opened the FIFO " + t.path +
                            " for reading within " + Fmt("%g s", o.reader_wait_ms / 1000.0) +
                            "; start its reader first");
  }
  if (fd < 0) return Status::Resource("cannot write " + path + ": " + std::strerror(r.err));
  r = WriteWithoutBlocking(fd, false, bytes, o.stopped);
  ::close(fd);
  if (r.stopped) return Interrupted(path);
  if (r.err != 0) {
    return Status::Resource("cannot write " + path + ": write: " + std::strerror(r.err));
  }
  return Status::Ok();
}

// One of this process's descriptors (/dev/stdout, /dev/fd/N). A pipe, FIFO or terminal is
// opened again through /proc/self/fd/N, as an open file description of our own, which can be
// non-blocking (O_NONBLOCK on the inherited one would change it for every process that holds
// it); a socket is written with MSG_DONTWAIT; anything else (a regular file) as it is, at its
// offset.
Status WriteDescriptor(const std::string& path, int fd, const std::string& bytes,
                       const WriteOptions& o) {
  struct stat st {};
  Outcome r;
  if (::fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
    const std::string again = "/proc/self/fd/" + std::to_string(fd);
    const int own = ::open(again.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (own >= 0) {
      r = WriteWithoutBlocking(own, false, bytes, o.stopped);
      ::close(own);
    } else {
      r = WriteWithoutBlocking(fd, false, bytes, o.stopped);  // blocking: as it was given
    }
  } else if (S_ISSOCK(st.st_mode)) {
    r = WriteWithoutBlocking(fd, true, bytes, o.stopped);
  } else {
    const off_t at = ::lseek(fd, 0, SEEK_CUR);
    r.err =
        at < 0 ? WriteWithoutBlocking(fd, false, bytes, o.stopped).err : WriteAll(fd, bytes, at);
    if (r.err == 0 && at >= 0) ::lseek(fd, at + static_cast<off_t>(bytes.size()), SEEK_SET);
  }
  if (r.stopped) return Interrupted(path);
  if (r.err != 0) {
    return Status::Resource("cannot write " + path + ": write: " + std::strerror(r.err));
  }
  return Status::Ok();
}

// The temporary file of a regular-file output: "<target>.tmp.<pid>", removed unless Commit
// renamed it over the target (and by the handlers should the process die: RemovedOnDeath).
class TempFile {
 public:
  TempFile() = default;
  TempFile(int fd, std::string tmp, RemovedOnDeath on_death)
      : fd_(fd), tmp_(std::move(tmp)), on_death_(std::move(on_death)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  static std::string NameFor(const std::string& target) {
    return target + ".tmp." + std::to_string(getpid());
  }
  // Creates the temporary file for target; errno on failure.
  int Create(const std::string& target) {
    tmp_ = NameFor(target);
    on_death_ = RemovedOnDeath(tmp_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ >= 0) return 0;
    const int e = errno;
    tmp_.clear();  // not ours to remove
    on_death_.Forget();
    return e;
  }
  int fd() const { return fd_; }
  // Gives the file up: its descriptor, its name and its registration go to the caller.
  void HandOver(int* fd, std::string* tmp, RemovedOnDeath* on_death) {
    *fd = std::exchange(fd_, -1);
    *tmp = std::exchange(tmp_, "");
    *on_death = std::move(on_death_);
  }
  // Writes bytes (the file becomes exactly them), fsyncs, renames over target, fsyncs the
  // directory.
  Status Commit(const std::string& path, const std::string& target, const std::string& bytes) {
    auto fail = [&](const std::string& what, int e) {
      return Status::Resource("cannot write " + path + ": " + what + ": " + std::strerror(e));
    };
    if (const int e = WriteAll(fd_, bytes, 0); e != 0) return fail("write", e);
    if (::ftruncate(fd_, static_cast<off_t>(bytes.size())) != 0) return fail("truncate", errno);
    if (::fsync(fd_) != 0) return fail("fsync", errno);
    ::close(std::exchange(fd_, -1));
    if (::rename(tmp_.c_str(), target.c_str()) != 0) return fail("rename", errno);
    tmp_.clear();
    on_death_.Forget();
    const int dfd = ::open(DirOf(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    return Status::Ok();
  }

 private:
  int fd_ = -1;
  std::string tmp_;
  RemovedOnDeath on_death_;
};

std::string Bytes(uint64_t n) {
  return std::to_string(n) + " bytes";
}

}  // namespace

Status OutputReservation::Make(const std::string& flag, const std::string& path, uint64_t bytes,
                               OutputReservation* out) {
  out->Release();
  if (path.empty()) return Status::Ok();
  OutputTarget t;
  if (Status s = ResolveOutput(path, &t); !s.ok()) {
    return Status::Resource(flag + " " + path + ": " + s.message());
  }
  if (t.kind != OutputTarget::Kind::kFile) return Status::Ok();
  TempFile tmp;
  if (const int e = tmp.Create(t.path); e != 0) {
    return Status::Resource(flag + " " + path + ": cannot create " + TempFile::NameFor(t.path) +
                            ": " + std::strerror(e));
  }
  const int e = bytes > 0 ? ::posix_fallocate(tmp.fd(), 0, static_cast<off_t>(bytes)) : 0;
  if (e != 0) {
    struct statvfs vfs {};
    const std::string dir = DirOf(t.path);
    const std::string free =
        ::statvfs(dir.c_str(), &vfs) == 0
            ? "; " + dir + " has " + Bytes(uint64_t{vfs.f_bavail} * vfs.f_frsize) + " free"
            : "";
    return Status::Resource(flag + " " + path + ": cannot reserve the " + Bytes(bytes) +
                            " it will take (" + std::strerror(e) + free +
                            "); free some space or choose another path: the run was not started");
  }
  tmp.HandOver(&out->fd_, &out->tmp_, &out->on_death_);
  out->target_ = t.path;
  return Status::Ok();
}

void OutputReservation::Release() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  on_death_.Forget();
  fd_ = -1;
  tmp_.clear();
  target_.clear();
}

Status WriteFileDurably(const std::string& path, const std::string& bytes, const WriteOptions& o) {
  OutputTarget t;
  if (Status s = ResolveOutput(path, &t); !s.ok()) {
    return Status::Resource("cannot write " + path + ": it " + s.message());
  }
  switch (t.kind) {
    case OutputTarget::Kind::kFile: {
      OutputReservation* r = o.reservation;
      if (r != nullptr && r->holds(t.path)) {
        TempFile reserved(std::exchange(r->fd_, -1), std::exchange(r->tmp_, ""),
                          std::move(r->on_death_));
        r->target_.clear();
        return reserved.Commit(path, t.path, bytes);
      }
      TempFile tmp;
      if (const int e = tmp.Create(t.path); e != 0) {
        return Status::Resource("cannot write " + path + ": " + std::strerror(e));
      }
      return tmp.Commit(path, t.path, bytes);
    }
    case OutputTarget::Kind::kStream:
      return WriteStream(path, t, bytes, o);
    case OutputTarget::Kind::kFd:
      return WriteDescriptor(path, t.fd, bytes, o);
  }
  return Status::Internal("unknown output kind");
}

}  // namespace shmtrain::master
