// The parameter server's exchange thread (master/hosts/param_server.h): the messages between host
// masters and the state the thread keeps. Its construction and the unit are in
// master/hosts/param_server.cc, its exchanges in master/hosts/param_server_exchange.cc. Internal to
// them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "data/batch_plan.h"
#include "master/hosts/hosts.h"
#include "master/hosts/param_server.h"
#include "master/hosts/worker_states.h"
#include "master/unit/run_figures.h"
#include "monitoring/run_stats.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// ---- Messages between host masters.

constexpr int kTagPush = 11;   // a pusher's delta of a part, to its owner
constexpr int kTagReply = 12;  // the owner's part after a push, to the pusher
constexpr int kTagBeat = 13;   // liveness, and the sync point a host has flushed for
constexpr int kTagParts = 14;  // at a sync point: an owner's part and its host's counters
// The sync point of the run's end (a checkpoint's is its step).
constexpr int64_t kEnd = INT64_MAX;
constexpr int kTauCounts = 65;  // exact tau counts 0..63, and 64 or more
// A gap this long between two polls means this thread did not run (stopped, starved): not
// the other hosts' fault, so their deadlines move by it (as in MpiHosts::WaitAll).
constexpr int64_t kStalledNs = 500'000'000;
// Idle polling: yield for a while after the last event, then nap, longer the longer idle, but
// never past the moment this host's next push is expected (its workers' pace, measured): a
// push is otherwise late by the nap, and carries more updates than --push-every.
constexpr int kYieldPolls = 200;
constexpr int64_t kNapNs = 20'000;
constexpr int64_t kMinNapNs = 10'000;
constexpr int64_t kMaxNapNs = 500'000;

struct PushHead {
  uint64_t updates;  // local updates the delta sums
  double lr;         // the learning rate of the latest of them
  uint64_t at;       // the pusher's local version when it took the snapshot
};
// Followed by the part's `settled` (H words, master/hosts/async_state.h), then its values.
struct ReplyHead {
  uint64_t version;  // the part's version after this push
  uint64_t tau;
  uint64_t applied;  // 0: dropped
  uint64_t reserved;
};
struct Beat {
  // The latest sync point the sender has flushed for (its workers stopped or paused there,
  // every update pushed and answered); -1: none yet.
  int64_t flushed;
  uint64_t seq;
  uint64_t updates;  // the sender's local version (a lost host's, in the survivors' states)
};
struct FinalHead {
  uint64_t updates, samples, staleness_sum, dropped_local;  // the host's workers
  uint64_t sent, bytes;                                     // its pushes
  uint64_t applied, dropped, tau_sum, tau_max;              // as an owner
  uint64_t version;                                         // its part's
  uint64_t tau_counts[kTauCounts];
};

// A message buffer: a header, `words` 64-bit words, then floats.
template <class Head>
struct Buffer {
  std::vector<std::byte> bytes;
  size_t words_ = 0;
  void Resize(int64_t floats, int words = 0) {
    words_ = static_cast<size_t>(words);
    bytes.assign(sizeof(Head) + words_ * 8 + static_cast<size_t>(floats) * sizeof(float),
                 std::byte{0});
  }
  Head* head() { return reinterpret_cast<Head*>(bytes.data()); }
  uint64_t* words() { return reinterpret_cast<uint64_t*>(bytes.data() + sizeof(Head)); }
  float* floats() { return reinterpret_cast<float*>(bytes.data() + sizeof(Head) + words_ * 8); }
  int64_t size() const { return static_cast<int64_t>(bytes.size()); }
};

// ---- The exchange thread.

struct ParamServer::Body {
  Body(shm::Segment& seg, std::shared_ptr<Hosts> hosts,
       std::shared_ptr<monitoring::RunStats> stats, const Options& o);
  void Run();
  Status Serve();
  Status ServePushes(int64_t now, bool* busy);
  Status TakeReplies(int64_t now, bool* busy);
  Status PushDue(bool* busy);
  Status Beats(int64_t now, bool* busy);
  // The sync point `point` once every host has flushed for it: every owner's part and
  // counters to every host. A checkpoint's: this host's W and bases become the run's model.
  Status SyncPoint(int64_t point);
  Status ExchangeParts();
  void FillOwnParts();
  void TakeParts();
  // Part j pulled: W_j moves by g - the snapshot; base, version and settled become the owner's.
  void Merge(int j, const float* g, uint64_t version, const uint64_t* settled);
  // The sync point this host is at or heading to: the end once its workers have all finished,
  // else the checkpoint the run loop waits for (-1: none).
  int64_t Wanted() const { return local_done.load() ? kEnd : cut_wanted.load(); }
  // Every host, this one included, has flushed for `point` and been told this one has.
  bool Everyone(int64_t point) const {
    bool all = flushed >= point;
    for (int k = 0; k < H; ++k) {
      if (k != me)
        all &= peers[static_cast<size_t>(k)].flushed >= point &&
               peers[static_cast<size_t>(k)].told >= point;
    }
    return all;
  }
  void Record(const OwnedPart::Outcome& o);
  bool Snapshot(int j, uint64_t k, uint64_t v, double lr);
  static Status Frozen() {
    return Status::Interrupted("the exchange between hosts: stopped, its state taken");
  }
  // How soon the next push of a part is due at the workers' pace (ns per local update, a
  // moving average), from the updates the least advanced part still waits for.
  int64_t NextPushNs(int64_t now);
  void Withdraw();
  void Fail(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
  }
  data::BatchPlan::Range Part(int j) const { return data::BatchPlan::ShareOf(n, j, H); }

  // What the thread uses besides the mapping is its own share (a thread left behind outlives
  // the run loop's objects): kept here, and used through the references below.
  const std::shared_ptr<Hosts> hosts_share;
  const std::shared_ptr<monitoring::RunStats> stats_share;
  // The segment, as plain pointers taken once (see Combiner::Body).
  shm::Header* const h;
  const shm::WorkerBlock* const blocks;
  float* const w;
  const int64_t n;
  const int H, me, P;
  Hosts& hosts;
  monitoring::PushStats& stats;
  const Options opts;
  const int64_t timeout_ns;
  WorkerStatesExchange workers;  // this host's workers, to host 0's page
  OwnedPart owned;
  std::vector<uint64_t> tau_counts = std::vector<uint64_t>(kTauCounts, 0);
  uint64_t tau_max = 0;

  struct Pusher {  // this host's side of part j
    std::vector<float> base, snap;
    uint64_t version = 0;           // the owner's version of base
    std::vector<uint64_t> settled;  // base's (master/hosts/async_state.h)
    Buffer<PushHead> out;
    Buffer<ReplyHead> in;
    Message send, recv;
    bool waiting = false;    // a push is out, its reply not yet merged
    uint64_t pushed_at = 0;  // the local version at the last push
  };
  struct Peer {  // another host, as a pusher to this host's part and as a live host
    Buffer<PushHead> push_in;
    Buffer<ReplyHead> reply_out;
    Message push_recv, reply_send, beat_recv, beat_send;
    Beat beat_in{}, beat_out{-1, 0, 0};
    bool repost = false;   // the push receive is posted again once the reply has gone
    int64_t flushed = -1;  // the latest sync point it has flushed for (its beats)
    int64_t told = -1;     // the latest of this host's that a beat has told it
    int64_t last_heard_ns = 0, last_beat_ns = 0;
    Buffer<FinalHead> final_in;
    Message final_recv, final_send;
  };
  std::vector<Pusher> pushers;
  std::vector<Peer> peers;      // [me] unused
  std::vector<uint64_t> known;  // the local version each host last said (beats)
  std::vector<uint64_t> part_versions = std::vector<uint64_t>(static_cast<size_t>(H));  // TakeParts
  Buffer<FinalHead> final_out;
  int64_t flushed = -1;       // the latest sync point this host has flushed for
  uint64_t pace_version = 0;  // NextPushNs: the local version and the time it was seen
  int64_t pace_ns = 0;
  double ns_per_update = static_cast<double>(kMaxNapNs);

  std::atomic<bool> stop{false};
  // What StopState reads (the pushers' and the owner's state, `known`, W) changes only under
  // state_mu, and never once frozen: a thread left behind inside the transport (a peer gone)
  // may come back from it at any time.
  std::mutex state_mu;
  bool frozen = false;
  // Sync points: the run loop asks (its workers have stopped at the end, or paused before a
  // checkpoint's step); the thread says when every host has got there.
  std::atomic<bool> local_done{false};
  std::atomic<int64_t> cut_wanted{-1}, cut_done{-1};
  mutable std::mutex mu;
  Status status;
  // The result, read by Collect once the thread has ended well.
  std::vector<float> final_params;
  CrossHostTotals totals;
};

}  // namespace shmtrain::master
