#include "master/combiner.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>

#include "shm/barrier.h"
#include "shm/futex.h"

namespace shmtrain::master {
namespace {

// The longest single sleep of the wait for the ranks: how soon a Stop() is seen.
constexpr int64_t kSliceNs = 20'000'000;

}  // namespace

Combiner::Combiner(const shm::Segment& seg, Hosts& hosts, monitoring::SupervisorStats& stats,
                   double host_timeout_s)
    : seg_(seg),
      hosts_(hosts),
      stats_(stats),
      timeout_ns_(static_cast<int64_t>(host_timeout_s * 1e9)),
      thread_([this] {
        Loop();
        ended_.set_value();
      }) {}

Combiner::~Combiner() { Stop(); }

void Combiner::Stop() {
  stop_.store(true);
  if (!thread_.joinable()) return;
  if (ended_future_.wait_for(std::chrono::milliseconds(kStopGraceMs)) == std::future_status::ready) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

Status Combiner::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

double Combiner::MeanUs() const {
  const auto& h = stats_.combine();
  uint64_t count = 0;
  for (const auto& c : h.counts) count += c.load(std::memory_order_relaxed);
  return count == 0 ? NAN : static_cast<double>(h.sum_ns.load(std::memory_order_relaxed)) * 1e-3 / count;
}

// The same protocol as a rank's barrier wait (shm/barrier.h): count as a waiter, read the
// futex word, check, sleep only while the word is unchanged. Ranks that complete HS bump it.
bool Combiner::WaitHostSums(int64_t t) {
  shm::Header* h = seg_.header();
  const int P = static_cast<int>(h->config.workers);
  std::atomic_ref<uint32_t> waiters(h->waiters), wake(h->wake_seq);
  for (;;) {
    waiters.fetch_add(1);
    const uint32_t seq = wake.load();
    const bool done = shm::HostSumsComplete(seg_.block(0), P, t);
    if (!done && !stop_.load()) {
      shm::FutexWaitUntil(&h->wake_seq, seq, shm::MonotonicNs() + kSliceNs);
    }
    waiters.fetch_sub(1);
    if (done) return true;
    if (stop_.load()) return false;
  }
}

void Combiner::Loop() {
  shm::Header* h = seg_.header();
  const shm::RunConfig& c = h->config;
  const int P = static_cast<int>(c.workers);
  const int64_t n = static_cast<int64_t>(c.param_count);
  auto stop = [this] { return stop_.load(); };
  for (int64_t t = c.first_step; t < c.total_steps; ++t) {
    if (!WaitHostSums(t)) return;
    // The slots hold step t until every rank has applied it, which waits for this combine.
    StepTotals totals{t, 0, 0};
    for (int q = 0; q < P; ++q) {
      totals.samples += seg_.slot(q)->samples;
      totals.loss_sum += seg_.slot(q)->loss_sum;
    }
    const int64_t t0 = shm::MonotonicNs();
    Status s = hosts_.Combine(seg_.host_sum(), seg_.global_sum(), n, &totals, t0 + timeout_ns_, stop);
    if (s.code() == Status::Code::kInterrupted) return;
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = s.code() == Status::Code::kHostLost
                    ? Status::HostLost(s.message() + " (--host-timeout " +
                                       std::to_string(timeout_ns_ / 1'000'000) + " ms)")
                    : s;
      return;
    }
    stats_.ObserveCombine(static_cast<double>(shm::MonotonicNs() - t0) * 1e-9);
    shm::PublishCombined(h, t, totals.samples, totals.loss_sum);
  }
}

}  // namespace shmtrain::master
