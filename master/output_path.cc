#include "master/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "master/model_file.h"

namespace shmtrain::master {
namespace {

bool SameFile(const std::string& a, const std::string& b) {
  if (a == b) return true;
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

}  // namespace

Status CheckOutputPath(const std::string& flag, const std::string& path,
                       const std::vector<NamedPath>& inputs) {
  if (path.empty()) return Status::Ok();
  auto bad = [&](const std::string& what) {
    return Status::Usage(flag + " " + path + ": " + what);
  };
  if (path.back() == '/') return bad("names a directory; give a file name");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return bad("is a directory; give a file name");
  }
  for (const NamedPath& in : inputs) {
    if (!in.path.empty() && SameFile(path, in.path)) {
      return bad("is the same file as " + in.flag + " " + in.path + ", which it would overwrite");
    }
  }
  const std::string dir = DirOf(path);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) {
    return bad("directory " + dir + " does not exist (" + std::strerror(errno) + ")");
  }
  if (!S_ISDIR(ds.st_mode)) return bad(dir + " is not a directory");
  // The probe is the real test: the same open() WriteFileDurably makes, in the same directory.
  const std::string probe = path + ".probe." + std::to_string(getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return bad("cannot create files in directory " + dir + " (" + std::strerror(errno) + ")");
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

}  // namespace shmtrain::master
