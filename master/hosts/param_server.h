// Async across hosts: a DC-ASGD parameter server sharded over the host masters.
//
// Each host runs the single-host async protocol on its own segment (worker/async_loop.cc):
// its P workers apply their updates lock-free to the host's W. Across hosts, the parameters
// are cut into H parts (data::BatchPlan::ShareOf(n, j, H)); host j owns part j: it keeps the
// server's copy G_j, and for every host h the backup Bak_j[h] (the value of the part host h
// last pulled: the paper's w_bak(m), one per worker of the server, Algorithm 2), the version
// of the part then, and with dc-asgd-a the MeanSquare MS_j[h] of h's pushes. Memory: G, the
// backups and MeanSquares are 1/H, 1 and 1 copies of the parameters per host.
//
// Pusher (every host, for every part j, itself included): the host's W moved from the base
// B_j (what it last pulled of part j) by its own workers' updates since. When K local updates
// (--push-every) have been applied since its last push of j, and no push of j is in flight,
// the exchange thread snapshots S = W_j, sends delta = S - B_j with the number k of local
// updates it sums and the learning rate of the latest of them to the owner, and goes on. When
// the reply G_j comes back it moves W_j by G_j - S (keeping the local updates applied since
// the snapshot) and sets B_j = G_j. Parts are independent: a slow owner delays only its part.
//
// Owner (host j, for a push of delta from host h): the cross-host staleness is
// tau = version_j - the version h last pulled (pushes of other hosts applied since). Beyond
// --max-staleness the push is dropped and counted; else it is applied as k updates of the
// mean gradient g = -delta / (lr * k), with the async rule at learning rate lr * k, against
// h's backup (nn::ApplyRule):
//   asgd       G += delta
//   dc-asgd-c  G += delta - lr*k * lambda * g*g * (G - Bak[h])
//   dc-asgd-a  MS[h] = m*MS[h] + (1-m)*g*g; the same with lambda_i = lambda0 / sqrt(MS[h]_i + eps)
// (k updates of g compensated at once: their squares sum to k*g*g). The owner then sets
// Bak[h] = G, remembers the version, and replies G (applied or not, so h resynchronises).
//
// Liveness: every host sends every other a beat every kBeatMs; a host heard from by no
// message within --host-timeout is lost (exit 6 through the run loop, as in sync). A gap in
// this thread's own polling (it was stopped or starved) moves the deadlines by the gap.
//
// Sync points: the end, and with --checkpoint-every each checkpoint's step. Once this host's
// workers have all finished (the Stop step of the run's end), or are all paused before the
// checkpoint's step (the checkpoint policy asks through Cut), the thread pushes what is left of
// every part, waits for the replies, and says in its beats that it has flushed for that point;
// it keeps serving until every host has. Then no push is in flight anywhere and no worker
// writes W, and every owner sends its G and its counters to every host: every host holds the
// same parameters (the run's model), its bases and the owners' backups are exactly them. At
// the end host 0 reports the run's totals (updates, samples, pushes sent = applied +
// dropped); at a checkpoint host 0 writes them, and resuming from it restores that state
// exactly but for the owners' MeanSquares (dc-asgd-a), which start again as on one host.
//
// Races: the thread's move of W_j (load, add, store per element, relaxed) can interleave with
// a worker's update of the same element, and either write may then be lost, as two workers'
// updates can be on one host (Hogwild). A lost move is pushed back in the next delta and
// undone at the owner: a lost update, bounded by the drift between hosts.
//
// Threads: one thread does every exchange (MPI_THREAD_SERIALIZED), and it alone writes the
// pushers', peers' and owner's state. The run loop's thread asks for sync points and learns
// they are reached through atomics (Cut: cut_wanted, cut_done; Stop(RunEnd&): local_done),
// reads status() under a mutex, and takes the result (Collect) only after joining the thread.
// StopState reads the state the stop keeps (async_state.h) from the run loop's thread, even
// with the exchange thread left behind inside the transport: the exchange thread changes that
// state (the pushers' bases and snapshots, the owner's part, `known`, its moves of W) only
// under Body::state_mu, and never once StopState has set `frozen` under it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "master/hosts/exchange_thread.h"
#include "master/hosts/hosts.h"
#include "master/unit/run_unit.h"
#include "monitoring/run_stats.h"
#include "nn/update.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// The owner's half for one part: pure, so that the rule is tested without hosts.
class OwnedPart {
 public:
  // The part's first values (every host starts from them), its length, the hosts that push,
  // the rule (its lr is given per push), and the local version every host starts from.
  OwnedPart(const float* w0, int64_t len, int hosts, const nn::RuleParams& rule,
            uint64_t first = 0);
  struct Outcome {
    bool applied = false;
    uint64_t tau = 0;  // pushes of other hosts applied since host `host` last pulled
  };
  // Host `host`'s push: delta, the sum of `updates` local updates at learning rate lr. Dropped
  // (not applied) when tau > max_staleness >= 0. Either way `host` pulls G next: its backup
  // and version become the current ones, and its updates up to `at` (its local version at the
  // push) are settled here.
  Outcome Apply(int host, const float* delta, int64_t updates, double lr, int64_t max_staleness,
                uint64_t at);
  // A sync point: every host has just pulled G (its backup is G, its version the current).
  void EveryHostPulled();
  const float* values() const { return g_.data(); }
  int64_t size() const { return len_; }
  uint64_t version() const { return version_; }
  // Per host: the local version its pushes applied or dropped here reach
  // (master/hosts/async_state.h).
  const std::vector<uint64_t>& settled() const { return settled_; }

 private:
  int64_t len_;
  nn::RuleParams rule_;
  std::vector<float> g_, bak_, ms_, grad_;  // bak_, ms_: host h's at h * len_
  std::vector<uint64_t> pulled_;            // the version each host last pulled
  std::vector<uint64_t> settled_;
  uint64_t version_ = 0;
};

class ParamServer final : public RunUnit, public CheckpointCut {
 public:
  struct Options {
    int64_t push_every = 4;      // local updates between two pushes of a part
    double host_timeout_s = 60;  // a host heard from by no message for this long is lost
    int64_t max_staleness = -1;  // pushes staler than this are dropped (-1: never)
  };
  // Starts the exchange thread at once; seg's workers may start after. The thread keeps its
  // share of hosts and stats: one left behind stuck in the transport outlives the run.
  // stats: the run's (its pushes' counters; under mpirun, the workers' states that go to host
  // 0's page, master/hosts/worker_states.h).
  ParamServer(shm::Segment& seg, std::shared_ptr<Hosts> hosts,
              std::shared_ptr<monitoring::RunStats> stats, const Options& o);
  ~ParamServer() override;  // Stop()
  ParamServer(const ParamServer&) = delete;
  ParamServer& operator=(const ParamServer&) = delete;

  // Ends the thread and joins it, or leaves a stuck one behind (ExchangeThread::JoinOrLeave).
  void Stop();
  Status status() const;
  Verdict Tick(const RunView& /*view*/) override { return Verdict::EndIf(status()); }
  // A checkpoint's sync point (below): asked for once this host's workers are all paused
  // before `step`; true once every host has flushed for it and this host's W is the run's.
  bool Cut(int64_t step) override;
  // The run's end. Stop: on a good end this host's workers are done, and the exchange finishes
  // with every host (above), which may fail (a lost host) or be stopped by a signal; on a
  // failure the thread stops. Collect: the run's model and totals replace this host's.
  void Stop(RunEnd& end) override;
  void Collect(RunEnd& end) override;
  // Once the run has stopped on a failure (another host lost, a stop) and no worker writes W:
  // this host's state (master/hosts/async_state.h), encoded, with `run` as its checkpoint and
  // W, read once the state is frozen, as its parameters. The thread's state is frozen first,
  // even when the thread was left behind inside the transport (Body::state_mu).
  bool StopState(const Checkpoint& run, std::string* bytes) override;
  static constexpr int kBeatMs = 100;

 private:
  struct Body;
  std::shared_ptr<Body> body_;
  ExchangeThread thread_;
};

}  // namespace shmtrain::master
