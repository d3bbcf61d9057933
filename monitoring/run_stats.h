// What only the master knows of a run, for its metrics endpoint (monitoring/exporter.h).
//
// One owner, RunStats, made beside the run's segment and read by scrapes; one part per unit
// of the run loop, handed to the one unit that writes it:
//   WorkerStats       the supervisor: which workers run, restarts and why, recoveries, torn
//                     updates
//   CheckpointStats   the checkpoint policy: write times, the last success, failures
//   DurationHistogram the cross-host combiner: its time per step (combine())
//   PushStats         async across hosts: this host's pushes to the parts' owners and what it
//                     did as the owner of its own part (master/hosts/param_server.h)
//   ValidationStats   the validation protocol: the latest evaluation (and each one, into
//                     the history)
//   RunHistory        the run's curves (monitoring/run_history.h): the loss log, the
//                     validations, the watch unit's samples/s
//
// Threads: a part is written by its unit, on the run loop's thread, except the combine times
// (the combiner's thread) and PushStats (the parameter server's exchange thread, which also
// reads them back for the run's totals), and read by scrapes on the exporter's threads. Every
// value is an atomic, relaxed: a scrape may see a moment-old value, and only the validation's
// count orders anything (release/acquire: its gauges).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "monitoring/run_history.h"
#include "shm/layout.h"

namespace shmtrain::monitoring {

// Why a worker was replaced. Label values of shmtrain_worker_restarts_total. kPeerHang: it
// timed out at a barrier waiting for a rank that was silent (killed as a hang): a victim,
// not a failure of its own.
enum class RestartReason { kCrash = 0, kHang = 1, kChaos = 2, kPeerHang = 3 };
inline constexpr int kRestartReasons = 4;
const char* ToString(RestartReason r);

// A duration histogram over shm::kDurationBounds.
struct DurationHistogram {
  std::atomic<uint64_t> counts[shm::kDurationBuckets] = {};
  std::atomic<uint64_t> sum_ns{0};
  void Observe(double seconds);
  // The mean duration so far, in microseconds (NaN before the first).
  double MeanUs() const;
};

// The supervisor's.
class WorkerStats {
 public:
  explicit WorkerStats(int workers);
  void SetUp(int rank, bool up) { up_[rank].store(up ? 1 : 0, std::memory_order_relaxed); }
  bool up(int rank) const { return up_[rank].load(std::memory_order_relaxed) != 0; }
  void AddRestart(int rank, RestartReason why);
  uint64_t restarts(int rank, RestartReason why) const;
  void AddTornUpdate() { torn_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t torn_updates() const { return torn_.load(std::memory_order_relaxed); }
  // A recovery: seconds from a death to the run's progress moving on.
  void ObserveRecovery(double seconds) { recovery_.Observe(seconds); }
  const DurationHistogram& recovery() const { return recovery_; }

 private:
  std::vector<std::atomic<int>> up_;
  std::vector<std::atomic<uint64_t>> restarts_;  // rank * kRestartReasons + reason
  std::atomic<uint64_t> torn_{0};
  DurationHistogram recovery_;
};

// The checkpoint policy's.
class CheckpointStats {
 public:
  // A checkpoint written in `seconds`, finished at unix time `unix_time`.
  void ObserveWrite(double seconds, double unix_time) {
    writes_.Observe(seconds);
    last_unix_.store(unix_time, std::memory_order_relaxed);
  }
  // A checkpoint that could not be written (the run goes on; the next one is tried).
  void AddFailure() { failures_.fetch_add(1, std::memory_order_relaxed); }
  const DurationHistogram& writes() const { return writes_; }
  double last_success_unix() const { return last_unix_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  DurationHistogram writes_;
  std::atomic<double> last_unix_{0};
  std::atomic<uint64_t> failures_{0};
};

// The validation protocol's: the latest evaluation.
class ValidationStats {
 public:
  explicit ValidationStats(RunHistory& history) : history_(history) {}
  // The evaluation of the parameters after `step`: loss, and accuracy (xent) or RMSE (mse).
  void Set(int64_t step, double loss, double metric) {
    history_.AddValidation(step, loss, metric);
    loss_.store(loss, std::memory_order_relaxed);
    metric_.store(metric, std::memory_order_relaxed);
    validations_.fetch_add(1, std::memory_order_release);
  }
  uint64_t validations() const { return validations_.load(std::memory_order_acquire); }
  double loss() const { return loss_.load(std::memory_order_relaxed); }
  double metric() const { return metric_.load(std::memory_order_relaxed); }

 private:
  RunHistory& history_;
  std::atomic<uint64_t> validations_{0};
  std::atomic<double> loss_{0};
  std::atomic<double> metric_{0};
};

// Async across hosts (master/hosts/param_server.h): what this host master's exchange thread did, as
// a pusher (its host's updates sent to each part's owner) and as the owner of its own part
// (pushes from every host applied or dropped, with their cross-host staleness).
class PushStats {
 public:
  // This host sent a push of `bytes` bytes (header and payload) to an owner (itself included).
  void AddSent(uint64_t bytes) {
    sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    last_sent_unix_.store(UnixNow(), std::memory_order_relaxed);
  }
  // As the owner: a push applied with cross-host staleness tau, or dropped (--max-staleness).
  void AddApplied(uint64_t tau) {
    applied_.fetch_add(1, std::memory_order_relaxed);
    tau_sum_.fetch_add(tau, std::memory_order_relaxed);
    tau_hist_[shm::StalenessBucket(tau)].fetch_add(1, std::memory_order_relaxed);
  }
  void AddDropped() { dropped_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t applied() const { return applied_.load(std::memory_order_relaxed); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t tau_sum() const { return tau_sum_.load(std::memory_order_relaxed); }
  // Pushes applied with staleness <= shm::kStalenessBounds[k] (k < kStalenessBuckets - 1),
  // and above the last bound (the last bucket); not cumulative.
  uint64_t tau_bucket(int k) const { return tau_hist_[k].load(std::memory_order_relaxed); }
  // Unix time of this host's last push (0: none yet).
  double last_sent_unix() const { return last_sent_unix_.load(std::memory_order_relaxed); }

 private:
  static double UnixNow();
  std::atomic<uint64_t> sent_{0}, bytes_{0}, applied_{0}, dropped_{0}, tau_sum_{0};
  std::atomic<uint64_t> tau_hist_[shm::kStalenessBuckets] = {};
  std::atomic<double> last_sent_unix_{0};
};

// One worker's state as the live page shows it (monitoring/run_page.h).
struct WorkerState {
  int host = 0;
  int worker = 0;
  bool up = false;            // its process runs and has attached
  uint64_t restarts = 0;      // replacements of this rank, for every reason
  int64_t pid = 0;            // its current incarnation's
  double heartbeat_age_s = 0; // seconds since its last heartbeat (0 before it started)
  uint64_t samples = 0;       // samples whose gradient it computed
};

// Under mpirun, on host 0: the other hosts' workers as their host masters last reported them
// (master/hosts/worker_states.h). Written by host 0's exchange thread, read by the page's
// requests: one mutex.
class RemoteWorkers {
 public:
  void Set(int host, std::vector<WorkerState> states) {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_host_.size() <= static_cast<size_t>(host))
      by_host_.resize(static_cast<size_t>(host) + 1);
    by_host_[static_cast<size_t>(host)] = std::move(states);
  }
  // Every reported worker, in host order.
  std::vector<WorkerState> All() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<WorkerState> out;
    for (const auto& h : by_host_) out.insert(out.end(), h.begin(), h.end());
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::vector<WorkerState>> by_host_;
};

// The owner: every part, for the units that write them and for the scrapes that read them all.
class RunStats {
 public:
  explicit RunStats(int workers) : workers_(workers) {}
  RunStats(const RunStats&) = delete;
  RunStats& operator=(const RunStats&) = delete;

  WorkerStats& workers() { return workers_; }
  CheckpointStats& checkpoints() { return checkpoints_; }
  // Several hosts: one cross-host combine of a step's sums (master/hosts/combiner.h).
  DurationHistogram& combine() { return combine_; }
  ValidationStats& validation() { return validation_; }
  // Async across hosts: pushes and the owner's applies (master/hosts/param_server.h).
  PushStats& pushes() { return pushes_; }
  const PushStats& pushes() const { return pushes_; }
  RunHistory& history() { return history_; }
  const RunHistory& history() const { return history_; }
  RemoteWorkers& remote_workers() { return remote_; }
  const RemoteWorkers& remote_workers() const { return remote_; }
  const WorkerStats& workers() const { return workers_; }
  const CheckpointStats& checkpoints() const { return checkpoints_; }
  const DurationHistogram& combine() const { return combine_; }
  const ValidationStats& validation() const { return validation_; }

 private:
  RunHistory history_;  // before validation_, which appends to it
  WorkerStats workers_;
  CheckpointStats checkpoints_;
  DurationHistogram combine_;
  ValidationStats validation_{history_};
  PushStats pushes_;
  RemoteWorkers remote_;
};

}  // namespace shmtrain::monitoring
