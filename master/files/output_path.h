// Output paths: where the bytes written to a path go (its symbolic links followed), whether a
// run may write there, and the lock that makes it the only writer. Paths are checked before a
// run starts, so that a finished run is never lost to a path that could not have been written
// (a bad --save found only after every step), and held for the run's life, so that two runs
// never write the same file. Writing the bytes is master/files/output_write.h.
#pragma once

#include <string>
#include <vector>

#include "master/unit/removed_on_death.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// Where the bytes written to an output path go, its symbolic links followed to the end.
struct OutputTarget {
  enum class Kind {
    kFile,    // a regular file, or nothing yet: replaced atomically (temporary file, rename)
    kStream,  // a FIFO or a character device: written in place, never replaced
    kFd,      // one of this process's descriptors (/dev/stdout, /dev/fd/N): written to `fd`
  };
  Kind kind = Kind::kFile;
  std::string path;   // kFile: the final target (never a symlink); kStream: the node
  bool fifo = false;  // kStream: a FIFO (else a character device)
  int fd = -1;        // kFd
};
// Follows the symbolic links of `path` (up to 40) to what its bytes would go to. A directory,
// a block device, a socket, or a descriptor not open for writing is kUsage with a message that
// says what it is (without the path: callers name it).
Status ResolveOutput(const std::string& path, OutputTarget* out);

// The directory of a path: "." for a bare name, "/" for a file at the root.
std::string DirOf(const std::string& path);

// An input the output must not overwrite: the flag that named it and its path.
struct NamedPath {
  std::string flag;
  std::string path;
};

// What an output may be: any of the kinds below (a model, predictions, an export), or only a
// regular file (a checkpoint, which must be durable and is read back by --resume).
enum class OutputKinds { kAny, kRegularFile };

// Checks that `path` (named by `flag`, e.g. "--save") can be written (master/files/output_write.h).
// Its symbolic links are followed (ResolveOutput); what they lead to is:
//  - a regular file or nothing yet: its directory must exist, be a directory, and let a file
//    be created in it (probed with a temporary file, removed at once: this also catches
//    read-only file systems, which access() misses for root); and it must not be the same
//    file as any of `inputs` (same device and inode, or the same path);
//  - a FIFO: it must be writable (it is written in place; its reader may come later);
//  - a character device: it must open for writing now (it is written in place; /dev/tty
//    without a controlling terminal does not);
//  - /dev/stdout, /dev/fd/N: the descriptor must be open for writing;
//  - anything else (a directory, a block device, a socket) is refused: never replaced.
// With OutputKinds::kRegularFile only the first is accepted. An empty path is fine (no
// output). Failures are Status::Usage (exit 2) naming the flag, the path and what is wrong.
Status CheckOutputPath(const std::string& flag, const std::string& path,
                       const std::vector<NamedPath>& inputs, OutputKinds kinds = OutputKinds::kAny);

// Holds an output for the life of a run: a write lock (fcntl, F_SETLK) on "<target>.lock"
// beside the output's final target (its symlinks followed), a file that holds the run's pid.
// The kernel releases the lock when the process ends, however it ends: a lock file left by a
// killed run is not held, and the next run takes it over. The destructor removes the file.
// Outputs that are written in place (FIFOs, devices, descriptors) are not locked.
// Holding the lock, a run is the only one that writes the target, so temporary files of it
// ("<target>.tmp.<pid>", master/files/output_write.h) that a SIGKILLed run left are removed then.
class OutputLock {
 public:
  OutputLock() = default;
  ~OutputLock();
  OutputLock(OutputLock&& o) noexcept;
  OutputLock& operator=(OutputLock&& o) noexcept;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  // Locks `path` (named by `flag`); an empty path or an output written in place locks
  // nothing. Status::Usage naming the flag, the path and the pid of the run that holds it,
  // or saying that the lock file is not a regular file (a symbolic link is never followed
  // there: whoever could plant one would have the run truncate what it leads to).
  static Status Acquire(const std::string& flag, const std::string& path, OutputLock* out);

 private:
  void Release();
  int fd_ = -1;
  std::string path_;         // the lock file
  RemovedOnDeath on_death_;  // removed by the handlers too (master/run/signals.h)
};

}  // namespace shmtrain::master
