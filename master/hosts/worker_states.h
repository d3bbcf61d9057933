// Every host's workers on host 0's live page, under mpirun.
//
// Each host master's exchange thread — the sync combiner's or the async parameter server's,
// the threads that own the transport during a run (MPI is MPI_THREAD_SERIALIZED) — calls
// Pump() as it goes. A host other than 0 sends its workers' states (monitoring::WorkerState,
// read from its segment and supervisor as its own page reads them) to host 0 about once a
// second, a new message only once the last has gone; host 0 keeps a receive posted from every
// other host and files what arrives in RunStats::remote_workers(), which /api/run lists after
// its own workers. Nothing waits: Pump() only starts and tests messages. Withdraw() cancels
// the receives in flight at the run's end, so that the transport can end; a host's last state
// message is small enough to leave at once (the transport's eager size).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "master/hosts/hosts.h"
#include "monitoring/run_stats.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// The tag of these messages. The others: 1-4 the sync combine (master/hosts/mpi_hosts.cc),
// 11-14 the async exchange (master/hosts/param_server_body.h).
inline constexpr int kTagWorkers = 21;
// A host reports at most this many workers (--workers' limit).
inline constexpr int kMaxReportedWorkers = 256;

class WorkerStatesExchange {
 public:
  // stats: this host master's (its workers, and on host 0 where the others' go); shared with
  // the exchange thread that owns this, which may outlive the run loop.
  // blocks: the P worker blocks of this host's segment (a plain pointer into the mapping, which
  // outlives a thread left behind).
  WorkerStatesExchange(Hosts& hosts, const shm::WorkerBlock* blocks, int P,
                       std::shared_ptr<monitoring::RunStats> stats);
  // Starts and tests this round's messages; a transport failure is the exchange's to report.
  Status Pump(int64_t now_ns);
  // The run's end: the receives still posted are cancelled.
  void Withdraw();

 private:
  struct Wire {  // one worker, as sent
    int64_t pid;
    uint64_t samples;
    uint64_t restarts;
    double heartbeat_age_s;
    uint32_t up;
    uint32_t worker;
  };
  struct Report {  // a host's message
    int32_t host;
    int32_t count;
    std::array<Wire, kMaxReportedWorkers> workers;
  };
  Status Send(int64_t now_ns);
  Status Take();

  Hosts& hosts_;
  const shm::WorkerBlock* blocks_;
  int P_;
  std::shared_ptr<monitoring::RunStats> stats_;
  int me_, H_;
  int64_t next_send_ns_ = 0;
  Report out_{};
  Message send_;
  std::vector<Report> in_;        // host 0: one buffer a host
  std::vector<Message> receives_;  // host 0: the receive posted from each host
  bool started_ = false;
};

}  // namespace shmtrain::master
