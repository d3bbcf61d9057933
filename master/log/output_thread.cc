#include "master/log/output_thread.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <memory>

namespace shmtrain::master {

OutputThread::OutputThread(int out_fd, int err_fd, size_t max_queued)
    : out_fd_(out_fd), err_fd_(err_fd), max_queued_(max_queued), thread_([this] { Run(); }) {}

OutputThread::~OutputThread() {
  Drain([] { return false; });
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OutputThread::Put(Stream to, std::string s) {
  if (s.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (to == Stream::kOut && !stdout_.ok()) return;
    if (queued_bytes_ + s.size() > max_queued_) {
      ++dropped_;
      return;
    }
    queued_bytes_ += s.size();
    queue_.emplace_back(to, std::move(s));
  }
  cv_.notify_all();
}

Status OutputThread::stdout_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stdout_;
}

bool OutputThread::Drain(bool (*stopping)()) {
  using Clock = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen = written_;
  Clock::time_point moved = Clock::now();
  while (!queue_.empty() || writing_) {
    cv_.wait_for(lock, std::chrono::milliseconds{100});
    if (written_ != seen) {
      seen = written_;
      moved = Clock::now();
    } else if (stopping() && Clock::now() - moved >= kStoppingStall) {
      GiveUp(lock);
      return false;
    }
  }
  return true;
}

void OutputThread::GiveUp(std::unique_lock<std::mutex>& lock) {
  // What waits for stderr (the error that names the stop, above all) may still get through
  // when only stdout's reader stopped: it is written from a thread of its own, waited for a
  // second (stderr may be the same stopped pipe).
  std::string err;
  for (const auto& [to, s] : queue_) {
    if (to == Stream::kErr) err += s;
  }
  queue_.clear();
  queued_bytes_ = 0;
  lock.unlock();
  if (err.empty()) return;
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> written = done->get_future();
  std::thread([fd = err_fd_, err, done] {
    int e = 0;
    WriteAll(fd, err, &e);
    done->set_value();
  }).detach();
  written.wait_for(std::chrono::seconds{1});
}

bool OutputThread::WriteAll(int fd, const std::string& s, int* err) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = write(fd, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *err = w < 0 ? errno : EIO;
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return true;
}

void OutputThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit_, and nothing left
    auto [to, s] = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= s.size();
    const bool to_stdout = to == Stream::kOut;
    if (to_stdout && !stdout_.ok()) {  // stdout failed: its lines go unwritten
      cv_.notify_all();
      continue;
    }
    writing_ = true;
    lock.unlock();
    int err = 0;
    const bool ok = WriteAll(to_stdout ? out_fd_ : err_fd_, s, &err);
    lock.lock();
    writing_ = false;
    ++written_;
    if (!ok && to_stdout) {
      stdout_ = Status::Resource(std::string("cannot write standard output: ") +
                                 std::strerror(err));
    }
    if (queue_.empty() && dropped_ > 0) {
      const std::string note = "shmtrain: warning: " + std::to_string(dropped_) +
                               " lines of output were dropped: more than " +
                               std::to_string(max_queued_) + " bytes waited for their reader\n";
      dropped_ = 0;
      queued_bytes_ += note.size();
      queue_.emplace_back(Stream::kErr, note);
    }
    cv_.notify_all();
  }
}

}  // namespace shmtrain::master
