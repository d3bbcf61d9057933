// The training master's standard output and error, written by a thread of their own.
//
// Why: a write to a pipe or terminal blocks while its reader does not read (a paused pager, a
// pipe nobody drains, mpirun's forwarding when its own output is full, a terminal held by
// Ctrl-S). Written by the run loop, such a write stalls the run loop: no worker is supervised,
// no checkpoint or event file is written, and a stop signal cannot end the run, since the
// write resumes after its handler. Here the run loop only queues its lines; this thread does
// the writes, in the order they were queued (stdout and stderr in one queue, so a terminal
// sees the live line cleared before the log line that follows it).
//
// Bounds: at most kMaxQueued bytes wait (16 MiB); a line that would go past them is dropped and
// counted, and once the queue has emptied, stderr says how many were. The first failed write
// to stdout (EPIPE, ENOSPC) is kept as the stdout status and nothing more is written there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "shmtrain/status.h"

namespace shmtrain::master {

class OutputThread {
 public:
  static constexpr size_t kMaxQueued = 16u << 20;
  // How long Drain waits for a write to move once the run was asked to stop.
  static constexpr std::chrono::milliseconds kStoppingStall{2'000};
  enum class Stream { kOut, kErr };

  // Writes to out_fd and err_fd (the process's stdout and stderr; others in tests).
  explicit OutputThread(int out_fd = 1, int err_fd = 2, size_t max_queued = kMaxQueued);
  ~OutputThread();  // drains (as Drain with a stop never asked) and joins the thread
  OutputThread(const OutputThread&) = delete;
  OutputThread& operator=(const OutputThread&) = delete;

  // Queues s for the stream; never blocks on the writes.
  void Put(Stream to, std::string s);
  // Ok, or the first write to stdout that failed.
  Status stdout_status() const;
  // Waits until everything queued is written. Once stopping() is true, it gives up when no
  // byte has been written for kStoppingStall: the rest is dropped (a reader that stopped
  // reading must not keep a stopped run from ending; the stderr lines among it are tried on
  // their own for a second). False when it gave up.
  bool Drain(bool (*stopping)());

 private:
  void Run();
  // Drain's end once it gave up: the queue dropped, the stderr lines in it tried once more.
  void GiveUp(std::unique_lock<std::mutex>& lock);
  // One queued write, whole (EINTR retried); false when it failed.
  static bool WriteAll(int fd, const std::string& s, int* err);

  const int out_fd_, err_fd_;
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // work queued, a write done, quit
  std::deque<std::pair<Stream, std::string>> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;    // the thread holds a write outside the lock
  uint64_t written_ = 0;    // writes done, for Drain's stall
  int64_t dropped_ = 0;     // lines dropped since the last notice
  Status stdout_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace shmtrain::master
