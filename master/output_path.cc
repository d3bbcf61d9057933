#include "master/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

}  // namespace shmtrain::master
