// The thread of a cross-host exchange (the sync combiner's, the async parameter server's):
// one that can get stuck inside the transport for good (Open MPI's TCP transport can block
// once a peer has died), so its owner must be able to leave it behind.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include "shm/segment.h"

namespace shmtrain::master {

class ExchangeThread {
 public:
  // Runs body() on a thread of its own, at once. What body uses must outlive a detached thread:
  // keep it in state the body's closure owns (shared_ptrs, the transport and the metrics it
  // writes included, never references to the run loop's objects), and its view of seg in
  // plain pointers into the mapping, which a detach leaves mapped.
  ExchangeThread(shm::Segment& seg, std::function<void()> body)
      : seg_(seg), thread_([body = std::move(body), done = std::move(done_)]() mutable {
          body();
          done.set_value();
        }) {}
  ~ExchangeThread() { JoinOrLeave(); }
  ExchangeThread(const ExchangeThread&) = delete;
  ExchangeThread& operator=(const ExchangeThread&) = delete;

  // Whether the body has returned, waiting at most ms.
  bool Ended(int ms) {
    return !thread_.joinable() ||
           ended_.wait_for(std::chrono::milliseconds(ms)) == std::future_status::ready;
  }
  // Once the body has been asked to stop: joins it, or, when it has not returned within
  // kStopGraceMs, detaches it with the segment's mapping left in place until the process
  // exits, which follows at once (the run is over and its segment's name already removed).
  // The Segment stays valid for the rest of the run's end (Segment::LeaveMapped).
  void JoinOrLeave() {
    if (!thread_.joinable()) return;
    if (Ended(kStopGraceMs)) {
      thread_.join();
    } else {
      seg_.LeaveMapped();
      thread_.detach();
      left_ = true;
    }
  }
  // Whether JoinOrLeave left the body running: its state is not to be read.
  bool left() const { return left_; }
  static constexpr int kStopGraceMs = 250;

 private:
  shm::Segment& seg_;
  std::promise<void> done_;
  std::future<void> ended_ = done_.get_future();
  std::thread thread_;
  bool left_ = false;
};

}  // namespace shmtrain::master
