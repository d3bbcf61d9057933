#include "master/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "master/model_file.h"

namespace shmtrain::master {
namespace {

std::string BaseOf(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool SameInode(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// The same file, or the same name in the same directory (for files that do not exist yet:
// "m.bin" and "./m.bin").
bool SameFile(const std::string& a, const std::string& b) {
  return a == b || SameInode(a, b) || (BaseOf(a) == BaseOf(b) && SameInode(DirOf(a), DirOf(b)));
}

// A regular file (or none yet) at `target`, the end of `path`'s links: replaced atomically.
Status CheckReplaceable(const std::string& flag, const std::string& path,
                        const std::string& target, const std::vector<NamedPath>& inputs) {
  auto bad = [&](const std::string& what) {
    return Status::Usage(flag + " " + path + ": " + what);
  };
  for (const NamedPath& in : inputs) {
    if (!in.path.empty() && (SameFile(path, in.path) || SameFile(target, in.path))) {
      return bad("is the same file as " + in.flag + " " + in.path + ", which it would overwrite");
    }
  }
  const std::string via = target == path ? "" : " (it leads to " + target + ")";
  const std::string dir = DirOf(target);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) {
    return bad("directory " + dir + " does not exist (" + std::strerror(errno) + ")" + via);
  }
  if (!S_ISDIR(ds.st_mode)) return bad(dir + " is not a directory" + via);
  // The probe is the real test: the same open() WriteFileDurably makes, in the same directory.
  const std::string probe = target + ".probe." + std::to_string(getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return bad("cannot create files in directory " + dir + " (" + std::strerror(errno) + ")" +
               via);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

// The pid in a lock file ("" if none can be read).
std::string PidIn(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "";
  int pid = 0;
  const auto [end, ec] = std::from_chars(buf, buf + n, pid);
  return ec == std::errc() && pid > 0 ? std::to_string(pid) : "";
}

}  // namespace

Status CheckOutputPath(const std::string& flag, const std::string& path,
                       const std::vector<NamedPath>& inputs) {
  if (path.empty()) return Status::Ok();
  auto bad = [&](const std::string& what) {
    return Status::Usage(flag + " " + path + ": " + what);
  };
  if (path.back() == '/') return bad("names a directory; give a file name");
  OutputTarget t;
  if (Status s = ResolveOutput(path, &t); !s.ok()) return bad(s.message());
  switch (t.kind) {
    case OutputTarget::Kind::kFile:
      return CheckReplaceable(flag, path, t.path, inputs);
    case OutputTarget::Kind::kStream:
      if (::faccessat(AT_FDCWD, t.path.c_str(), W_OK, AT_EACCESS) != 0) {
        return bad(std::string(t.fifo ? "the FIFO " : "the character device ") + t.path +
                   " cannot be written (" + std::strerror(errno) + ")");
      }
      return Status::Ok();
    case OutputTarget::Kind::kFd:
      return Status::Ok();  // ResolveOutput checked that it is open for writing
  }
  return Status::Internal("unknown output kind");
}

OutputLock::~OutputLock() { Release(); }

OutputLock::OutputLock(OutputLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

OutputLock& OutputLock::operator=(OutputLock&& o) noexcept {
  if (this != &o) {
    Release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

// Removed while still locked, then closed: a run that opened the file meanwhile and locks it
// after us finds it removed (below) and starts over on a new one.
void OutputLock::Release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

Status OutputLock::Acquire(const std::string& flag, const std::string& path, OutputLock* out) {
  if (path.empty()) return Status::Ok();
  auto bad = [&](const std::string& what) {
    return Status::Usage(flag + " " + path + ": " + what);
  };
  OutputTarget t;
  if (Status s = ResolveOutput(path, &t); !s.ok()) return bad(s.message());
  if (t.kind != OutputTarget::Kind::kFile) return Status::Ok();
  const std::string lock = t.path + ".lock";
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      return bad("cannot create the lock file " + lock + " (" + std::strerror(errno) + ")");
    }
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (::fcntl(fd, F_SETLK, &fl) != 0) {
      const int e = errno;
      struct flock holder = fl;
      const bool held = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK;
      // l_pid is 0 for a holder in another pid namespace: the file says which.
      const std::string pid = held && holder.l_pid > 0 ? std::to_string(holder.l_pid) : PidIn(fd);
      ::close(fd);
      if (e != EACCES && e != EAGAIN) {
        return bad("cannot lock " + lock + " (" + std::strerror(e) + ")");
      }
      if (!held) continue;  // released meanwhile
      return bad("another shmtrain run (pid " + (pid.empty() ? "unknown" : pid) +
                 ") is writing it (it holds " + lock +
                 "); wait for that run to end, or choose another path");
    }
    // The previous holder may have removed the file between our open() and our lock: a lock
    // on a removed file guards nothing.
    struct stat held {}, now {};
    if (::fstat(fd, &held) != 0 || ::stat(lock.c_str(), &now) != 0 || held.st_dev != now.st_dev ||
        held.st_ino != now.st_ino) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      const int e = errno;
      ::unlink(lock.c_str());
      ::close(fd);
      return bad("cannot write the lock file " + lock + " (" + std::strerror(e) + ")");
    }
    out->Release();
    out->fd_ = fd;
    out->path_ = lock;
    return Status::Ok();
  }
  return bad("cannot lock " + lock + ": it keeps being replaced");
}

}  // namespace shmtrain::master
