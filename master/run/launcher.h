// Starting worker processes. An interface, so that tests can inject faults at the seam
// (a launcher that fails, or that starts something else) without #ifdefs in the run loop.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "shmtrain/status.h"

namespace shmtrain::master {

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts the worker for `rank` with `incarnation` on segment `segment`, returning its pid.
  // The caller owns the child from then on: it reaps it (waitpid) and kills it if needed.
  virtual Status Spawn(const std::string& segment, int rank, uint32_t incarnation,
                       pid_t* pid) = 0;
};

// fork+exec of the worker executable through Boost.Process, with argv
// "<segment> <rank> <incarnation>" and stdin closed; stdout/stderr are inherited.
class ProcessLauncher final : public Launcher {
 public:
  explicit ProcessLauncher(std::string worker_path) : path_(std::move(worker_path)) {}
  Status Spawn(const std::string& segment, int rank, uint32_t incarnation, pid_t* pid) override;

 private:
  std::string path_;
};

// The worker executable beside the running `shmtrain` executable.
std::string DefaultWorkerPath();

}  // namespace shmtrain::master
