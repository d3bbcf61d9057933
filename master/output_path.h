// Output paths are checked before a run starts, so that a finished run is never lost to a
// path that could not have been written (issue: a bad --save found only after every step).
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

}  // namespace shmtrain::master
