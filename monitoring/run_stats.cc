#include "monitoring/run_stats.h"

#include <chrono>
#include <cmath>

namespace shmtrain::monitoring {

const char* ToString(RestartReason r) {
  switch (r) {
    case RestartReason::kCrash: return "crash";
    case RestartReason::kHang: return "hang";
    case RestartReason::kChaos: return "chaos";
    case RestartReason::kPeerHang: return "peer_hang";
  }
  return "unknown";
}

void DurationHistogram::Observe(double seconds) {
  const auto ns = static_cast<int64_t>(seconds * 1e9);
  counts[shm::DurationBucket(ns)].fetch_add(1, std::memory_order_relaxed);
  sum_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

double DurationHistogram::MeanUs() const {
  uint64_t count = 0;
  for (const auto& c : counts) count += c.load(std::memory_order_relaxed);
  return count == 0 ? NAN
                    : static_cast<double>(sum_ns.load(std::memory_order_relaxed)) * 1e-3 / count;
}

WorkerStats::WorkerStats(int workers)
    : up_(static_cast<size_t>(workers)),
      restarts_(static_cast<size_t>(workers) * kRestartReasons) {}

void WorkerStats::AddRestart(int rank, RestartReason why) {
  restarts_[rank * kRestartReasons + static_cast<int>(why)].fetch_add(1,
                                                                      std::memory_order_relaxed);
}

uint64_t WorkerStats::restarts(int rank, RestartReason why) const {
  return restarts_[rank * kRestartReasons + static_cast<int>(why)].load(std::memory_order_relaxed);
}

}  // namespace shmtrain::monitoring

namespace shmtrain::monitoring {

double PushStats::UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace shmtrain::monitoring
