// The master's Prometheus endpoint.
//
// Only the master listens (under mpirun, each host master: its own endpoint, every series
// labelled with its host index). Every value is read from the segment (and from the supervisor's
// few atomics) at scrape time by a custom Collectable: a scrape never waits for training, the
// workers never know about it, and counters stay monotonic when a worker is replaced because
// they live in the rank's block, which outlives its incarnations.
//
// Threads: prometheus-cpp serves scrapes on its own threads (civetweb). They only read the
// segment (relaxed/acquire loads through shm/layout.h's accessors) and SupervisorStats
// (atomics); the run loop never takes a lock a scrape could hold.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace prometheus {
class Exposer;
}

namespace shmtrain::monitoring {

// Why a worker was replaced. Label values of shmtrain_worker_restarts_total. kPeerHang: it
// timed out at a barrier waiting for a rank that was silent (killed as a hang): a victim,
// not a failure of its own.
enum class RestartReason { kCrash = 0, kHang = 1, kChaos = 2, kPeerHang = 3 };
inline constexpr int kRestartReasons = 4;
const char* ToString(RestartReason r);

// What only the master knows: which workers are running, how often each was restarted.
// Written by the run loop, read by scrapes.
class SupervisorStats {
 public:
  explicit SupervisorStats(int workers);
  void SetUp(int rank, bool up) { up_[rank].store(up ? 1 : 0, std::memory_order_relaxed); }
  bool up(int rank) const { return up_[rank].load(std::memory_order_relaxed) != 0; }
  void AddRestart(int rank, RestartReason why);
  uint64_t restarts(int rank, RestartReason why) const;
  void AddTornUpdate() { torn_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t torn_updates() const { return torn_.load(std::memory_order_relaxed); }
  // A recovery: seconds from a death to the run's progress moving on.
  void ObserveRecovery(double seconds) { recovery_.Observe(seconds); }
  // A checkpoint written in `seconds`, finished at unix time `unix_time`.
  void ObserveCheckpoint(double seconds, double unix_time) {
    checkpoint_.Observe(seconds);
    last_checkpoint_unix_.store(unix_time, std::memory_order_relaxed);
  }

  // A duration histogram over shm::kDurationBounds, fed by the run loop, read by scrapes.
  struct Histogram {
    std::atomic<uint64_t> counts[shm::kDurationBuckets] = {};
    std::atomic<uint64_t> sum_ns{0};
    void Observe(double seconds);
  };
  // Several hosts: one cross-host combine of a step's sums (master/combiner.h) took `seconds`.
  void ObserveCombine(double seconds) { combine_.Observe(seconds); }
  const Histogram& combine() const { return combine_; }
  // A checkpoint that could not be written (the run goes on; the next one is tried).
  void AddCheckpointFailure() { checkpoint_failures_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t checkpoint_failures() const {
    return checkpoint_failures_.load(std::memory_order_relaxed);
  }
  const Histogram& recovery() const { return recovery_; }
  const Histogram& checkpoint() const { return checkpoint_; }
  double last_checkpoint_unix() const {
    return last_checkpoint_unix_.load(std::memory_order_relaxed);
  }
  // The latest validation: loss, and accuracy (xent) or RMSE (mse).
  void SetValidation(double loss, double metric) {
    val_loss_.store(loss, std::memory_order_relaxed);
    val_metric_.store(metric, std::memory_order_relaxed);
    validations_.fetch_add(1, std::memory_order_release);
  }
  uint64_t validations() const { return validations_.load(std::memory_order_acquire); }
  double val_loss() const { return val_loss_.load(std::memory_order_relaxed); }
  double val_metric() const { return val_metric_.load(std::memory_order_relaxed); }

 private:
  std::vector<std::atomic<int>> up_;
  std::vector<std::atomic<uint64_t>> restarts_;  // rank * kRestartReasons + reason
  std::atomic<uint64_t> torn_{0};
  Histogram recovery_;
  Histogram checkpoint_;
  Histogram combine_;
  std::atomic<double> last_checkpoint_unix_{0};
  std::atomic<uint64_t> checkpoint_failures_{0};
  std::atomic<uint64_t> validations_{0};
  std::atomic<double> val_loss_{0};
  std::atomic<double> val_metric_{0};
};

// The address host master `host_local` (its rank among the host masters on this machine,
// TrainOptions::host_local) listens on, given --metrics-addr "HOST:PORT": "HOST:(PORT +
// host_local)", so that the host masters sharing a machine never fight over a port. Port 0
// stays 0 (each picks any free port). kUsage naming --metrics-addr when the address is
// malformed or the port would pass 65535; kInternal for a negative host_local.
Status HostMetricsAddress(const std::string& addr, int host_local, std::string* out);

class RunCollector;

class Exporter {
 public:
  ~Exporter();
  // Listens on "HOST:PORT" (port 0: any free port). kUsage, naming the address, when it is
  // malformed or cannot be bound (taken port, foreign address).
  static Status Start(const std::string& addr, std::unique_ptr<Exporter>* out);
  // The address actually bound, e.g. "127.0.0.1:43567".
  const std::string& address() const { return address_; }

  // Serves this run's metrics from now on, every series labelled host="<opts.host_index>".
  // seg and stats must outlive the exporter.
  void Attach(const shm::Segment* seg, const SupervisorStats* stats, const TrainOptions& opts);
  // Stops reading the segment (a scrape in progress finishes first); later scrapes see no
  // run metrics. Call before the segment is unmapped.
  void Detach();

 private:
  Exporter() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<RunCollector> collector_;
  std::string address_;
};

}  // namespace shmtrain::monitoring
