// The master's Prometheus endpoint.
//
// Only the master listens (under mpirun, each host master: its own endpoint, every series
// labelled with its host index). Every value is read from the segment (and from the master's
// few atomics, monitoring/run_stats.h) at scrape time by a custom Collectable: a scrape never
// waits for training, the workers never know about it, and counters stay monotonic when a
// worker is replaced because they live in the rank's block, which outlives its incarnations.
//
// Threads: prometheus-cpp serves scrapes on its own threads (civetweb). They only read the
// segment (relaxed, acquire and, for the sync progress, seq_cst loads through shm/layout.h's
// accessors) and RunStats (atomics). A scrape holds the collector's mutex while it reads the
// segment; the run loop takes it only in Detach(), at the run's end, so training never waits
// for a scrape.
#pragma once

#include <memory>
#include <string>

#include "monitoring/run_stats.h"
#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace prometheus {
class Exposer;
}

namespace shmtrain::monitoring {

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
  void Attach(const shm::Segment* seg, const RunStats* stats, const TrainOptions& opts);
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
