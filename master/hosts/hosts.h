// The transport between host masters: the one seam through which several hosts talk.
//
// A run under mpirun is H host masters, one MPI rank each; every host master owns its segment
// and its workers exactly as a single-host run does, and the workers never touch MPI (a worker
// death stays a local event). The host masters exchange three things, all through this
// interface:
//   - at start, the --resume checkpoint (host 0 reads it and sends its bytes to the others),
//     then an identity (the run's fingerprint and its starting state) that must agree, so
//     that every host computes the same steps from the same bits;
//   - every sync step, the host sums of the gradient (master/hosts/combiner.h) and the step's
//     totals, combined in host order so that every host gets the same bits; with batch norm,
//     before them, each crossing's host sums of the statistics, likewise;
//   - async (master/hosts/param_server.h): pushes of a host's update of a part to the part's owner,
//     the owner's replies, liveness beats and the final parts, as non-blocking messages that
//     the exchange thread polls (Send/Receive/Test), so that it never waits on one host while
//     others need serving;
//   - at a failure, the end of the whole job (Open MPI 4.1 cannot shrink a communicator
//     after a rank dies, so a lost host master ends the job; docs/hosts.md).
// Without mpirun, or built without MPI, there is one host and nothing is exchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shmtrain/status.h"

namespace shmtrain::monitoring {
class Exporter;
}

namespace shmtrain::master {

// A non-blocking message in flight (Hosts::Send/Receive): pending until Test says it is done.
struct Message {
  uintptr_t handle = 0;  // the transport's request; 0 = none in flight
  bool pending() const { return handle != 0; }
};

// What a host contributes to a step besides its gradient sum.
struct StepTotals {
  int64_t step = 0;
  int64_t samples = 0;
  double loss_sum = 0;
};

class Hosts {
 public:
  virtual ~Hosts() = default;
  virtual int count() const = 0;
  virtual int index() const = 0;
  // This host master's rank among those on the same machine, and their number.
  virtual int local() const = 0;
  virtual int local_count() const = 0;
  // "host 1 (node-b)": how messages name a host.
  virtual std::string Describe(int host) const = 0;

  // The start of the run, on every host at once. `here` is this host's start (its checks, its
  // data, its segment): every host brings it, failed or not, so that one host's failed start
  // ends every host's start. Returns `here` when it failed; else, when another host's start
  // failed, a status of that host's exit code naming it (its own message says why); else
  // kUsage naming the first host whose identity differs from host 0's. Waits at most
  // timeout_s for the others (kHostLost naming one that did not answer), kInterrupted when
  // stop() turns true. After a failed start every host knows: failed_together() is true.
  virtual Status Agree(const Status& here, uint64_t identity, double timeout_s,
                       const std::function<bool()>& stop) = 0;
  // A file that host 0 alone reads, given to every host (--resume: no shared disk needed). On
  // host 0, *bytes holds what it read and `read` says how the read went; it sends both to
  // every other host, and returns `read` once they are sent. On the others *bytes becomes host
  // 0's bytes; when host 0's read failed, they get a status of its exit code naming it ("host 0
  // (node-a) could not read <what> (its message says why)"), so that none waits for bytes that
  // will not come. `what` names the file in messages. Every host calls it at the same point of
  // its start, before anything there can fail. Each wait (the header, then each chunk of the
  // bytes) lasts at most timeout_s: kHostLost naming a host that did not answer; kInterrupted
  // when stop() turns true.
  virtual Status ShareFromFirst(const std::string& what, std::string* bytes, const Status& read,
                                double timeout_s, const std::function<bool()>& stop) = 0;
  // Every host learned from Agree that the start failed: each leaves the job by itself
  // (Finish, then its exit code), with no abort to race its clean-up.
  virtual bool failed_together() const = 0;
  // One step's combine. in: this host's sum of n floats; out: the sum of every host's, added in
  // host order (the same bits on every host); totals: this host's in, every host's summed in
  // host order out. Ends early, kHostLost naming the host, when a host's part has not arrived
  // by deadline_ns (CLOCK_MONOTONIC), or kInterrupted when stop() turns true.
  virtual Status Combine(const float* in, float* out, int64_t n, StepTotals* totals,
                         int64_t deadline_ns, const std::function<bool()>& stop) = 0;
  // One batch norm crossing's combine (sync): in, this host's sums of n doubles; out, every
  // host's added in host order (the same bits on every host). `seq` numbers the crossing
  // (WorkerBlock.stats_seq), the same on every host: a host that sends another one's sums ends
  // it kInternal. `what` names the crossing in messages ("step 5, batch norm crossing 2").
  // Deadline and stop as Combine's.
  virtual Status CombineStats(const double* in, double* out, int64_t n, uint64_t seq,
                              const std::string& what, int64_t deadline_ns,
                              const std::function<bool()>& stop) = 0;
  // Async across hosts: starts sending `bytes` bytes at `data` to host `to` on channel `tag`
  // (the buffer must stay untouched until the message is done), or starts receiving at most
  // `bytes` bytes from host `from` on `tag` into `data`. Messages between two hosts on one
  // tag arrive in the order they were sent. Test polls one: *done turns true (and m is reset)
  // once it has completed; a failure names the host. Cancel withdraws a pending receive (at
  // the end of the exchange, before Finish). Only one thread calls these, and only between
  // Agree and Finish/AbortJob.
  virtual Status Send(int to, int tag, const void* data, int64_t bytes, Message* m) = 0;
  virtual Status Receive(int from, int tag, void* data, int64_t bytes, Message* m) = 0;
  virtual Status Test(Message* m, bool* done) = 0;
  virtual void Cancel(Message* m) = 0;
  // The run ended well on this host: leave the job (MPI_Finalize).
  virtual void Finish() = 0;
  // Ends the job on every host with `code`; call after this host has cleaned up.
  [[noreturn]] virtual void AbortJob(int code) = 0;
};

// Starts this host master's metrics endpoint on --metrics-addr `given` with its port raised by
// host_local, the master's rank among the host masters of its machine (port 0 stays 0;
// monitoring::HostMetricsAddress). When that port cannot be taken and is not the given one,
// the message says where it comes from: "--metrics-addr 127.0.0.1:9464: host master 1 of
// this machine listens on port 9464 + 1 = 9465 (...), and cannot listen there: ...".
Status StartHostMetrics(const std::string& given, int host_local,
                        std::unique_ptr<monitoring::Exporter>* out);

// The hosts of this process: MPI's when started by mpirun with more than one rank (a build
// without MPI refuses that with kUsage), else the single host. Call once, before any thread.
Status JoinHosts(int* argc, char*** argv, std::unique_ptr<Hosts>* out);

}  // namespace shmtrain::master
