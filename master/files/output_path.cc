#include "master/files/output_path.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace shmtrain::master {
namespace {

constexpr int kMaxLinks = 40;  // as the kernel's own limit (ELOOP)

// `target` of a symlink at `link`, as a path: relative targets are relative to the link's
// directory.
std::string LinkTarget(const std::string& link, const std::string& target) {
  if (target.front() == '/') return target;
  const std::string dir = DirOf(link);
  if (dir == ".") return target;
  return dir == "/" ? "/" + target : dir + "/" + target;
}

bool SameInode(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

OutputTarget FileTarget(const std::string& path) {
  OutputTarget t;
  t.kind = OutputTarget::Kind::kFile;
  t.path = path;
  return t;
}

OutputTarget StreamTarget(const std::string& path, bool fifo) {
  OutputTarget t;
  t.kind = OutputTarget::Kind::kStream;
  t.path = path;
  t.fifo = fifo;
  return t;
}

// A link in /proc (/proc/self/fd/1, what /dev/stdout and /dev/fd/1 lead to) names an open
// file, not a path: one of our descriptors is written as it is (at its offset, like any write
// to stdout); another process's FIFO or character device is opened through the link.
Status ResolveProcLink(const std::string& link, OutputTarget* out) {
  const std::string dir = DirOf(link), name = link.substr(link.rfind('/') + 1);
  int fd = -1;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), fd);
  if (ec == std::errc() && end == name.data() + name.size() && SameInode(dir, "/proc/self/fd")) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0) return Status::Usage("is descriptor " + name + ", which is not open");
    if ((flags & O_ACCMODE) == O_RDONLY) {
      return Status::Usage("is descriptor " + name + ", which is open for reading only");
    }
    *out = OutputTarget{};
    out->kind = OutputTarget::Kind::kFd;
    out->fd = fd;
    return Status::Ok();
  }
  struct stat st {};
  if (::stat(link.c_str(), &st) != 0) {
    return Status::Usage("leads to " + link + ", which cannot be opened (" + std::strerror(errno) +
                         ")");
  }
  if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
    return Status::Usage("leads to " + link + " in /proc; name the file itself");
  }
  *out = StreamTarget(link, S_ISFIFO(st.st_mode));
  return Status::Ok();
}

// What a non-link node at `node` is as an output.
Status ResolveNode(const std::string& node, const struct stat& st, OutputTarget* out) {
  const std::string never =
      ": shmtrain writes regular files (replaced atomically), FIFOs and character devices "
      "(written in place) only";
  if (S_ISREG(st.st_mode)) {
    *out = FileTarget(node);
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    *out = StreamTarget(node, S_ISFIFO(st.st_mode));
  } else if (S_ISDIR(st.st_mode)) {
    return Status::Usage("is a directory; give a file name");
  } else if (S_ISBLK(st.st_mode)) {
    return Status::Usage("is a block device" + never);
  } else if (S_ISSOCK(st.st_mode)) {
    return Status::Usage("is a socket" + never);
  } else {
    return Status::Usage("is neither a regular file nor a FIFO nor a character device" + never);
  }
  return Status::Ok();
}

std::string BaseOf(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
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

// A FIFO or a character device, written in place. A FIFO's reader may come later (the write
// waits for it); a device must open for writing now, as the write will open it (/dev/tty
// without a controlling terminal fails here, not after the training).
template <class Bad>
Status CheckStream(const OutputTarget& t, const Bad& bad) {
  const std::string what = std::string(t.fifo ? "the FIFO " : "the character device ") + t.path;
  if (::faccessat(AT_FDCWD, t.path.c_str(), W_OK, AT_EACCESS) != 0) {
    return bad(what + " cannot be written (" + std::strerror(errno) + ")");
  }
  if (t.fifo) return Status::Ok();
  const int fd = ::open(t.path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return bad(what + " cannot be opened for writing (" + std::strerror(errno) + ")");
  ::close(fd);
  return Status::Ok();
}

// Opens (creating it if need be) the lock file `lock`: never through a symbolic link, and only
// a regular file.
template <class Bad>
Status OpenLockFile(const std::string& lock, const Bad& bad, int* out) {
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP) {
    return bad("its lock file " + lock +
               " is a symbolic link, which shmtrain never follows there (the run would truncate "
               "whatever it leads to); remove it, or choose another path");
  }
  if (fd < 0) {
    return bad("cannot create the lock file " + lock + " (" + std::strerror(errno) + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return bad("its lock file " + lock +
               " is not a regular file; remove it, or choose another path");
  }
  *out = fd;
  return Status::Ok();
}

// Removes the temporary files "<target>.tmp.<pid>" (master/files/output_write.h) in target's
// directory: called holding target's lock, when no other run can be writing one.
void RemoveStaleTemporaries(const std::string& target) {
  const std::string prefix = BaseOf(target) + ".tmp.";
  DIR* dir = ::opendir(DirOf(target).c_str());
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) continue;
    ::unlinkat(::dirfd(dir), name.c_str(), 0);
  }
  ::closedir(dir);
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

std::string DirOf(const std::string& path) {
  const size_t p = path.rfind('/');
  if (p == std::string::npos) return ".";
  return p == 0 ? "/" : path.substr(0, p);
}

Status ResolveOutput(const std::string& path, OutputTarget* out) {
  std::string node = path;
  for (int hops = 0; hops <= kMaxLinks; ++hops) {
    struct stat st {};
    if (::lstat(node.c_str(), &st) != 0) {
      if (errno != ENOENT) {
        return Status::Usage("cannot be inspected" +
                             (node == path ? "" : " (it leads to " + node + ")") + ": " +
                             std::strerror(errno));
      }
      *out = FileTarget(node);
      return Status::Ok();
    }
    if (!S_ISLNK(st.st_mode)) return ResolveNode(node, st, out);
    struct statfs fs {};
    if (::statfs(DirOf(node).c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) {
      return ResolveProcLink(node, out);
    }
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
    const ssize_t n = ::readlink(node.c_str(), target.data(), target.size());
    if (n <= 0 || static_cast<size_t>(n) >= target.size()) {
      return Status::Usage("leads to the symbolic link " + node + ", which cannot be read");
    }
    target.resize(static_cast<size_t>(n));
    node = LinkTarget(node, target);
  }
  return Status::Usage("has more than " + std::to_string(kMaxLinks) +
                       " levels of symbolic links (a loop?)");
}

Status CheckOutputPath(const std::string& flag, const std::string& path,
                       const std::vector<NamedPath>& inputs, OutputKinds kinds) {
  if (path.empty()) return Status::Ok();
  auto bad = [&](const std::string& what) {
    return Status::Usage(flag + " " + path + ": " + what);
  };
  if (path.back() == '/') return bad("names a directory; give a file name");
  OutputTarget t;
  if (Status s = ResolveOutput(path, &t); !s.ok()) return bad(s.message());
  if (t.kind != OutputTarget::Kind::kFile && kinds == OutputKinds::kRegularFile) {
    const std::string what = t.kind == OutputTarget::Kind::kFd ? "an open descriptor"
                             : t.fifo                          ? "a FIFO"
                                                               : "a character device";
    return bad("is " + what + (t.path.empty() || t.path == path ? "" : " (" + t.path + ")") +
               "; a checkpoint must be a regular file, written durably and read back by "
               "--resume");
  }
  switch (t.kind) {
    case OutputTarget::Kind::kFile:
      return CheckReplaceable(flag, path, t.path, inputs);
    case OutputTarget::Kind::kStream:
      return CheckStream(t, bad);
    case OutputTarget::Kind::kFd:
      return Status::Ok();  // ResolveOutput checked that it is open for writing
  }
  return Status::Internal("unknown output kind");
}

OutputLock::~OutputLock() { Release(); }

OutputLock::OutputLock(OutputLock&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)), on_death_(std::move(o.on_death_)) {
  o.fd_ = -1;
}

OutputLock& OutputLock::operator=(OutputLock&& o) noexcept {
  if (this != &o) {
    Release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    on_death_ = std::move(o.on_death_);
    o.fd_ = -1;
  }
  return *this;
}

// Removed while still locked, then closed: a run that opened the file meanwhile and locks it
// after us finds it removed (below) and starts over on a new one.
void OutputLock::Release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  on_death_.Forget();
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
    int fd = -1;
    if (Status s = OpenLockFile(lock, bad, &fd); !s.ok()) return s;
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
    out->on_death_ = RemovedOnDeath(lock);
    RemoveStaleTemporaries(t.path);
    return Status::Ok();
  }
  return bad("cannot lock " + lock + ": it keeps being replaced");
}

}  // namespace shmtrain::master
