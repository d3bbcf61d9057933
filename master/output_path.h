// Output paths are checked before a run starts, so that a finished run is never lost to a
// path that could not have been written (issue: a bad --save found only after every step),
// and held for the run's life, so that two runs never write the same file.
#pragma once

#include <string>
#include <vector>

#include "shmtrain/status.h"

namespace shmtrain::master {

// An input the output must not overwrite: the flag that named it and its path.
struct NamedPath {
  std::string flag;
  std::string path;
};

// Checks that `path` (named by `flag`, e.g. "--save") can be written by WriteFileDurably.
// Its symbolic links are followed (master/model_file.h, ResolveOutput); what they lead to is:
//  - a regular file or nothing yet: its directory must exist, be a directory, and let a file
//    be created in it (probed with a temporary file, removed at once: this also catches
//    read-only file systems, which access() misses for root); and it must not be the same
//    file as any of `inputs` (same device and inode, or the same path);
//  - a FIFO or a character device: it must be writable (it is written in place);
//  - /dev/stdout, /dev/fd/N: the descriptor must be open for writing;
//  - anything else (a directory, a block device, a socket) is refused: never replaced.
// An empty path is fine (no output). Failures are Status::Usage (exit 2) naming the flag,
// the path and what is wrong.
Status CheckOutputPath(const std::string& flag, const std::string& path,
                       const std::vector<NamedPath>& inputs);

// Holds an output for the life of a run: a write lock (fcntl, F_SETLK) on "<target>.lock"
// beside the output's final target (its symlinks followed), a file that holds the run's pid.
// The kernel releases the lock when the process ends, however it ends: a lock file left by a
// killed run is not held, and the next run takes it over. The destructor removes the file.
// Outputs that are written in place (FIFOs, devices, descriptors) are not locked.
class OutputLock {
 public:
  OutputLock() = default;
  ~OutputLock();
  OutputLock(OutputLock&& o) noexcept;
  OutputLock& operator=(OutputLock&& o) noexcept;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  // Locks `path` (named by `flag`); an empty path or an output written in place locks
  // nothing. Status::Usage naming the flag, the path and the pid of the run that holds it.
  static Status Acquire(const std::string& flag, const std::string& path, OutputLock* out);

 private:
  void Release();
  int fd_ = -1;
  std::string path_;  // the lock file
};

}  // namespace shmtrain::master
