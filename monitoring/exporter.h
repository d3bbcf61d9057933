// The master's HTTP endpoint: Prometheus metrics at /metrics, the live page at / and its data
// at /api/run (monitoring/run_page.h), served by civetweb (Debian's libcivetweb-dev, which
// prometheus-cpp's own server wraps; used directly because that wrapper serves only metrics).
//
// Only the master listens (under mpirun, each host master: its own endpoint, every series
// labelled with its host index). Every value is read from the segment (and from the master's
// few atomics, monitoring/run_stats.h) at scrape time by a custom Collectable: a scrape never
// waits for training, the workers never know about it, and counters stay monotonic when a
// worker is replaced because they live in the rank's block, which outlives its incarnations.
//
// Threads: civetweb serves requests (scrapes, the page, /api/run) on its own threads. They only
// read the segment (relaxed, acquire and, for the sync progress, seq_cst loads through
// shm/layout.h's accessors) and RunStats (atomics; the history and the other hosts' workers
// under their own mutexes). A request holds the run source's mutex while it reads the segment;
// the run loop takes it only in Attach() and Detach(), at the run's start and end, so training
// never waits for a request.
#pragma once

#include <memory>
#include <string>

#include "monitoring/run_page.h"
#include "monitoring/run_stats.h"
#include "monitoring/run_view.h"
#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

class CivetServer;

namespace shmtrain::monitoring {

// The address host master `host_local` (its rank among the host masters on this machine,
// TrainOptions::host_local) listens on, given --metrics-addr "HOST:PORT": "HOST:(PORT +
// host_local)", so that the host masters sharing a machine never fight over a port. Port 0
// stays 0 (each picks any free port). kUsage naming --metrics-addr when the address is
// malformed or the port would pass 65535; kInternal for a negative host_local.
Status HostMetricsAddress(const std::string& addr, int host_local, std::string* out);

class RunCollector;
class RunSource;
class Routes;

class Exporter {
 public:
  ~Exporter();
  // Listens on "HOST:PORT" (port 0: any free port). kUsage, naming the address, when it is
  // malformed or cannot be bound (taken port, foreign address).
  static Status Start(const std::string& addr, std::unique_ptr<Exporter>* out);
  // The HTTP server's serving threads, and how long a client may take to send its request
  // before its connection is dropped (exporter.cc says why these; the tests hold them).
  static constexpr int kServingThreads = 64;
  static constexpr int kRequestTimeoutMs = 500;
  // The address actually bound, e.g. "127.0.0.1:43567".
  const std::string& address() const { return address_; }

  // Serves this run's metrics and page from now on, every series labelled
  // host="<opts.host_index>". seg, kind (what the run's kind decides, monitoring/run_view.h)
  // and stats must outlive the exporter or the next Detach().
  void Attach(const shm::Segment* seg, const RunKindView* kind, const RunStats* stats,
              const TrainOptions& opts, const RunFacts& facts);
  // Stops reading the segment (a request in progress finishes first): later scrapes see no run
  // metrics, and /api/run answers with the run as it ended. Call before the segment is unmapped.
  void Detach();

 private:
  Exporter();
  std::unique_ptr<RunSource> run_;
  std::unique_ptr<Routes> routes_;
  std::unique_ptr<CivetServer> server_;  // last: its threads stop before the routes go
  std::string address_;
};

}  // namespace shmtrain::monitoring
