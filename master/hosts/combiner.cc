#include "master/hosts/combiner.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "shm/barrier.h"
#include "shm/futex.h"

namespace shmtrain::master {
namespace {

// The longest single sleep of the wait for the ranks: how soon a Stop() is seen.
constexpr int64_t kSliceNs = 20'000'000;

}  // namespace

// The thread's view of the segment is plain pointers into the mapping, taken once: the Segment
// object is the run loop's and goes when the run does, the mapping of a thread left behind
// never (Segment::LeaveMapped).
struct Combiner::Body {
  Body(const shm::Segment& seg, std::shared_ptr<Hosts> hosts_in,
       std::shared_ptr<monitoring::DurationHistogram> times_in, int64_t timeout_ns)
      : hosts_share(std::move(hosts_in)),
        times_share(std::move(times_in)),
        h(seg.header()),
        blocks(seg.block(0)),
        host_sum(seg.host_sum()),
        global_sum(seg.global_sum()),
        hosts(*hosts_share),
        times(*times_share),
        timeout_ns(timeout_ns) {
    for (uint32_t q = 0; q < h->config.workers; ++q) slots.push_back(seg.slot(static_cast<int>(q)));
  }
  void Loop();
  // Waits until every rank has published its slice of HS for step t; false when stopped.
  bool WaitHostSums(int64_t t);
  void Fail(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
  }

  // What the thread uses besides the mapping is its own share (a thread left behind outlives
  // the run loop's objects): kept here, and used through the references below.
  const std::shared_ptr<Hosts> hosts_share;
  const std::shared_ptr<monitoring::DurationHistogram> times_share;
  shm::Header* const h;
  const shm::WorkerBlock* const blocks;
  const float* const host_sum;
  float* const global_sum;
  std::vector<const shm::SlotHeader*> slots;
  Hosts& hosts;
  monitoring::DurationHistogram& times;
  const int64_t timeout_ns;
  std::atomic<bool> stop{false};
  mutable std::mutex mu;
  Status status;
};

Combiner::Combiner(shm::Segment& seg, std::shared_ptr<Hosts> hosts,
                   std::shared_ptr<monitoring::DurationHistogram> times, double host_timeout_s)
    : body_(std::make_shared<Body>(seg, std::move(hosts), std::move(times),
                                   static_cast<int64_t>(host_timeout_s * 1e9))),
      thread_(seg, [body = body_] { body->Loop(); }) {}

Combiner::~Combiner() { Stop(); }

void Combiner::Stop() {
  body_->stop.store(true);
  thread_.JoinOrLeave();
}

Status Combiner::status() const {
  std::lock_guard<std::mutex> lock(body_->mu);
  return body_->status;
}

double Combiner::MeanUs() const { return body_->times.MeanUs(); }

// A rank's barrier wait's protocol (shm::SleepOnWakeSeq), in slices that see a Stop(): ranks
// that complete HS move the futex word.
bool Combiner::Body::WaitHostSums(int64_t t) {
  const int P = static_cast<int>(h->config.workers);
  bool done = false;
  shm::SleepOnWakeSeq(
      h,
      [&]() -> int64_t {
        done = shm::HostSumsComplete(blocks, P, t);
        return done || stop.load() ? shm::kWakeDone : shm::MonotonicNs() + kSliceNs;
      },
      [&] { return stop.load(); });
  return done;
}

void Combiner::Body::Loop() {
  const shm::RunConfig& c = h->config;
  const int64_t n = static_cast<int64_t>(c.param_count);
  auto stopped = [this] { return stop.load(); };
  for (int64_t t = c.first_step; t < c.total_steps; ++t) {
    if (!WaitHostSums(t)) return;
    // The slots hold step t until every rank has applied it, which waits for this combine.
    StepTotals totals{t, 0, 0};
    for (const shm::SlotHeader* slot : slots) {
      totals.samples += slot->samples;
      totals.loss_sum += slot->loss_sum;
    }
    const int64_t t0 = shm::MonotonicNs();
    Status s = hosts.Combine(host_sum, global_sum, n, &totals, t0 + timeout_ns, stopped);
    // Stopped (the run is over): nothing else may be touched, the times may be gone.
    if (stopped()) return;
    if (!s.ok()) {
      Fail(s.code() == Status::Code::kHostLost
               ? Status::HostLost(s.message() + " (--host-timeout " +
                                  std::to_string(timeout_ns / 1'000'000) + " ms)")
               : s);
      return;
    }
    times.Observe(static_cast<double>(shm::MonotonicNs() - t0) * 1e-9);
    shm::PublishCombined(h, t, totals.samples, totals.loss_sum);
  }
}

}  // namespace shmtrain::master
