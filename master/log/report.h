// A host master's reports to `shmtrain launch` (master/launch/launch.h), the launcher that
// supervises its job: one TCP connection per host master, newline-delimited JSON events, from
// this process to the launcher only.
//
// The launcher sets SHMTRAIN_LAUNCH_REPORT=HOST:PORT in the job's environment. Each host master
// connects once it knows its place among the hosts, says `hello` (its index, count, pid,
// node), then the events every host master prints (Logger::Always and Logger::Notice: where
// its segment is, where it wrote its stop checkpoint), `training` at its first step, and
// `exit` with its exit code just before it ends. A connection that closes without `exit` is a
// host master that died: the launcher learns who was lost from the job itself, at the moment
// the kernel closed the socket, and not from mpirun's messages.
//
// The launcher speaks once, if at all: `stop`, when it has seen another host master lost. This
// process then stops as on mpirun's SIGTERM (it raises SIGTERM itself), so that every survivor
// checkpoints where it stopped at once, well before mpirun's own end of the job, which gives a
// host master a second from SIGCONT to SIGTERM and then only milliseconds before SIGKILL. The
// launcher's end (its connection closed) stops it the same way, and one that has not ended a
// minute later (Open MPI can hold a thread in its transport) is killed: no job goes on
// headless.
//
// Sending never blocks the run: the socket is non-blocking, and an event that does not fit
// the kernel's buffer, or finds the launcher gone, is dropped (the launcher's own death ends
// the job through mpirun: master/launch/launch.h).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "shmtrain/status.h"

namespace shmtrain::master {

// The environment variable that names the launcher's address.
inline constexpr const char* kLaunchReportVar = "SHMTRAIN_LAUNCH_REPORT";

// What made this process stop, once the listening thread has raised its SIGTERM: the launcher
// saw another host master lost (kLoss), or the launcher is gone (kLauncherGone); kNone before.
enum class LauncherStop { kNone = 0, kLoss = 1, kLauncherGone = 2 };
LauncherStop LauncherStopped();

class LaunchChannel {
 public:
  // Connects to `address` (HOST:PORT), within timeout_s. kUsage for an address that is not
  // HOST:PORT, kResource naming the address when it cannot be reached.
  static Status Connect(const std::string& address, double timeout_s,
                        std::unique_ptr<LaunchChannel>* out);
  ~LaunchChannel();
  LaunchChannel(const LaunchChannel&) = delete;
  LaunchChannel& operator=(const LaunchChannel&) = delete;

  // One event (a JSON object, no line break), from any thread; never blocks.
  void Send(const std::string& json);
  // Starts the thread that waits for the launcher's `stop` (above); it ends with the process.
  void ListenForStop();

 private:
  explicit LaunchChannel(int fd) : fd_(fd) {}
  std::mutex mu_;
  int fd_;
  // Set when the channel is destroyed, for a listening thread that outlives it.
  std::shared_ptr<std::atomic<bool>> closing_ = std::make_shared<std::atomic<bool>>(false);
  bool broken_ = false;  // a write failed: the launcher is gone, the rest is dropped
};

}  // namespace shmtrain::master
