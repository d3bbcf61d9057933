// Writing an output's bytes (a model, a checkpoint, predictions, an export) to wherever its path
// leads (master/files/output_path.h, ResolveOutput):
//  - a regular file (or none yet, or a symbolic link to either, dangling or not): durably. The
//    bytes go to a temporary file "<target>.tmp.<pid>" in the final target's directory, which
//    is fsynced and renamed over the target, and the directory is fsynced: a crash leaves the
//    old file or the new one, never a mix, and a link stays a link while its target gets the
//    bytes. The temporary file is removed on every path out, by the crash and stop handlers
//    too (RemovedOnDeath); one left by a SIGKILL is removed by the next run that locks the
//    output (OutputLock).
//  - a FIFO or a character device (/dev/null, a terminal): straight into it, no temporary file
//    and no rename. A FIFO waits up to reader_wait_ms for a reader to open it, then fails.
//  - /dev/stdout, /dev/stderr, /dev/fd/N: into that descriptor (a pipe, FIFO or terminal
//    through an open file description of its own, so that its flags are ours to set).
// No write to a FIFO, a pipe, a device or a socket blocks for good: whenever it has no room (a
// reader that opened it and does not read), the write waits in poll(), kStopPollMs at a time,
// and asks stopped() in between; stopped() ends the write with kInterrupted, nothing left
// behind. Failures are kResource naming the path.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "master/unit/removed_on_death.h"
#include "master/unit/stop_flag.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// How long a write to a FIFO waits for a reader to open it before it fails.
inline constexpr int kFifoReaderWaitMs = 10'000;
// How often a waiting write asks whether to stop.
inline constexpr int kStopPollMs = 50;

// Room on the file system for a regular-file output, taken when a run starts, so that a full
// disk is found before the training rather than after it (and the model lost): the temporary
// file the write will use, created and allocated (posix_fallocate) to the size the output will
// have. Outputs written in place take none. The write of its target uses it (WriteOptions);
// an unused one is removed by the destructor.
struct WriteOptions;

class OutputReservation {
 public:
  OutputReservation() = default;
  ~OutputReservation() { Release(); }
  OutputReservation(const OutputReservation&) = delete;
  OutputReservation& operator=(const OutputReservation&) = delete;

  // Reserves `bytes` for `path` (named by `flag`); nothing for an empty path or an output
  // written in place. kResource naming the flag, the path, the bytes and the file system's
  // free space when they do not fit.
  static Status Make(const std::string& flag, const std::string& path, uint64_t bytes,
                     OutputReservation* out);
  bool holds(const std::string& target) const { return fd_ >= 0 && target == target_; }

 private:
  friend Status WriteFileDurably(const std::string&, const std::string&, const WriteOptions&);
  void Release();
  int fd_ = -1;
  std::string target_, tmp_;
  RemovedOnDeath on_death_;
};

struct WriteOptions {
  int reader_wait_ms = kFifoReaderWaitMs;
  // Asked while a write waits: true ends it (kInterrupted). By default, a stop signal came.
  std::function<bool()> stopped = StopRequested;
  // Used by the write of its target (and then spent); null or another target's: none.
  OutputReservation* reservation = nullptr;
};

// Writes `bytes` to `path` as above.
Status WriteFileDurably(const std::string& path, const std::string& bytes,
                        const WriteOptions& options = {});

}  // namespace shmtrain::master
