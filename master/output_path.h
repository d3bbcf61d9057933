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

// Checks that `path` (named by `flag`, e.g. "--save") can be written by WriteFileDurably:
//  - it is not a directory;
//  - its directory exists, is a directory, and a file can be created in it (probed with a
//    temporary file, removed at once: this also catches read-only file systems, which
//    access() misses for root);
//  - it is not the same file as any of `inputs` (same device and inode, or the same path).
// An empty path is fine (no output). Failures are Status::Usage (exit 2) naming the flag,
// the path and what is wrong.
Status CheckOutputPath(const std::string& flag, const std::string& path,
                       const std::vector<NamedPath>& inputs);

}  // namespace shmtrain::master
