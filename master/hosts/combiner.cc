#include "master/hosts/combiner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
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
  Body(shm::Segment& seg, std::shared_ptr<Hosts> hosts_in,
       std::shared_ptr<monitoring::RunStats> stats_in, int64_t timeout_ns,
       std::vector<nn::Crossing> crossings_in)
      : hosts_share(std::move(hosts_in)),
        stats_share(std::move(stats_in)),
        h(seg.mutable_header()),
        blocks(seg.block(0)),
        P(static_cast<int>(h->config.workers)),
        host_sum(seg.host_sum()),
        global_sum(seg.mutable_global_sum()),
        crossings(std::move(crossings_in)),
        global_stats(seg.mutable_global_stats()),
        hosts(*hosts_share),
        times(stats_share->combine()),
        timeout_ns(timeout_ns),
        workers(hosts, blocks, P, stats_share) {
    for (int q = 0; q < P; ++q) {
      slots.push_back(seg.slot(q));
      rank_stats.push_back(seg.stats(q));
    }
    int64_t most = 0;
    for (const nn::Crossing& x : crossings) most = std::max(most, x.count);
    host_stats.resize(static_cast<size_t>(most));
  }
  void Loop();
  void Report(int64_t now);
  bool reporting = true;
  // Waits, in slices that see a Stop(), until done() (ranks that make it true move the futex
  // word); false when stopped.
  template <class Done>
  bool WaitFor(Done done);
  // Step t's batch norm crossings, each once every rank has published it: false when stopped
  // or failed.
  bool CombineCrossings(int64_t t);
  bool CombineCrossing(int64_t t, size_t k, uint64_t seq);
  // Step t's gradient and totals, once every rank has published its slice of HS.
  bool CombineStep(int64_t t);
  // Whether the thread goes on after an exchange that returned s: false when stopped (the
  // exchange may have ended early, kInterrupted, with GS or GStats part written: nothing of it
  // is published or timed, and the stop is no failure) or when s failed (status() says why).
  bool GoesOn(const Status& s);
  void Fail(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
  }

  // What the thread uses besides the mapping is its own share (a thread left behind outlives
  // the run loop's objects): kept here, and used through the references below.
  const std::shared_ptr<Hosts> hosts_share;
  const std::shared_ptr<monitoring::RunStats> stats_share;
  shm::Header* const h;
  const shm::WorkerBlock* const blocks;
  const int P;
  const float* const host_sum;
  float* const global_sum;
  std::vector<const shm::SlotHeader*> slots;
  // Batch norm: a step's crossings in the order the ranks make them, each rank's statistics,
  // GStats, and the sums of this host's ranks at one crossing.
  const std::vector<nn::Crossing> crossings;
  std::vector<const double*> rank_stats;
  double* const global_stats;
  std::vector<double> host_stats;
  Hosts& hosts;
  monitoring::DurationHistogram& times;
  const int64_t timeout_ns;
  WorkerStatesExchange workers;  // this host's workers, to host 0's page
  std::atomic<bool> stop{false};
  // The crossings combined and their time: the mean for the summary.
  std::atomic<int64_t> crossings_done{0}, crossings_ns{0};
  mutable std::mutex mu;
  Status status;
};

Combiner::Combiner(shm::Segment& seg, std::shared_ptr<Hosts> hosts,
                   std::shared_ptr<monitoring::RunStats> stats, double host_timeout_s,
                   std::vector<nn::Crossing> crossings)
    : body_(std::make_shared<Body>(seg, std::move(hosts), std::move(stats),
                                   static_cast<int64_t>(host_timeout_s * 1e9),
                                   std::move(crossings))),
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

double Combiner::MeanCrossingUs() const {
  const int64_t n = body_->crossings_done.load();
  return n == 0 ? NAN
                : static_cast<double>(body_->crossings_ns.load()) / 1e3 / static_cast<double>(n);
}

// A rank's barrier wait's protocol (shm::SleepOnWakeSeq), in slices that see a Stop().
template <class Done>
bool Combiner::Body::WaitFor(Done done_now) {
  bool done = false;
  shm::SleepOnWakeSeq(
      h,
      [&]() -> int64_t {
        done = done_now();
        const int64_t now = shm::MonotonicNs();
        if (!done && !stop.load()) Report(now);
        return done || stop.load() ? shm::kWakeDone : now + kSliceNs;
      },
      [&] { return stop.load(); });
  return done;
}

bool Combiner::Body::GoesOn(const Status& s) {
  if (stop.load()) return false;
  if (s.ok()) return true;
  Fail(s.code() == Status::Code::kHostLost
           ? Status::HostLost(s.message() + " (--host-timeout " +
                              std::to_string(timeout_ns / 1'000'000) + " ms)")
           : s);
  return false;
}

void Combiner::Body::Loop() {
  const shm::RunConfig& c = h->config;
  for (int64_t t = c.first_step; t < c.total_steps; ++t) {
    Report(shm::MonotonicNs());
    if (!CombineCrossings(t) || !WaitFor([&] { return shm::HostSumsComplete(blocks, P, t); }) ||
        !CombineStep(t)) {
      break;
    }
  }
  workers.Withdraw();
}

// The workers' states to host 0's page; a failure of the transport there is the next
// exchange's to find (it says which host), so it is not this thread's end.
void Combiner::Body::Report(int64_t now) {
  if (!reporting) return;
  if (Status s = workers.Pump(now); !s.ok()) reporting = false;
}

// Crossing k + 1 of step t is number t * (stats_count + 1) + k + 1 (shm/layout.h). A rank
// publishes it only once this thread has published the one before, so when every rank's
// number has reached it, each holds it, or (a replacement redoing the step) a lower one,
// which this waits for: the slot's values are then the crossing's, the same bits whoever
// wrote them.
bool Combiner::Body::CombineCrossings(int64_t t) {
  const uint64_t first = static_cast<uint64_t>(t) * (h->config.stats_count + 1) + 1;
  for (size_t k = 0; k < crossings.size(); ++k) {
    const uint64_t seq = first + k;
    if (!WaitFor([&] { return shm::StatsComplete(blocks, P, seq); })) return false;
    if (!CombineCrossing(t, k, seq)) return false;
  }
  return true;
}

bool Combiner::Body::CombineCrossing(int64_t t, size_t k, uint64_t seq) {
  const nn::Crossing& x = crossings[k];
  // This host's ranks in rank order, as one host adds them (worker/stats_crossing.cc).
  for (int64_t j = 0; j < x.count; ++j)
    host_stats[j] = shm::LoadRelaxed(rank_stats[0][x.offset + j]);
  for (int q = 1; q < P; ++q) {
    for (int64_t j = 0; j < x.count; ++j)
      host_stats[j] += shm::LoadRelaxed(rank_stats[q][x.offset + j]);
  }
  const int64_t t0 = shm::MonotonicNs();
  const std::string what =
      "step " + std::to_string(t) + ", batch norm crossing " + std::to_string(k + 1);
  const Status s = hosts.CombineStats(host_stats.data(), global_stats + x.offset, x.count, seq,
                                      what, t0 + timeout_ns, [this] { return stop.load(); });
  if (!GoesOn(s)) return false;
  crossings_ns += shm::MonotonicNs() - t0;
  crossings_done += 1;
  shm::PublishStatsCombined(h, seq);
  return true;
}

// The slots hold step t until every rank has applied it, which waits for this combine.
bool Combiner::Body::CombineStep(int64_t t) {
  StepTotals totals{t, 0, 0};
  for (const shm::SlotHeader* slot : slots) {
    totals.samples += slot->samples;
    totals.loss_sum += slot->loss_sum;
  }
  const int64_t t0 = shm::MonotonicNs();
  const Status s = hosts.Combine(host_sum, global_sum, static_cast<int64_t>(h->config.param_count),
                                 &totals, t0 + timeout_ns, [this] { return stop.load(); });
  if (!GoesOn(s)) return false;
  times.Observe(static_cast<double>(shm::MonotonicNs() - t0) * 1e-9);
  shm::PublishCombined(h, t, totals.samples, totals.loss_sum);
  return true;
}

}  // namespace shmtrain::master
