#include "master/param_server.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>

#include "data/batch_plan.h"
#include "master/run.h"
#include "nn/schedule.h"
#include "shm/futex.h"

namespace shmtrain::master {

// ---- The owner's rule.

OwnedPart::OwnedPart(const float* w0, int64_t len, int hosts, const nn::RuleParams& rule)
    : len_(len),
      rule_(rule),
      g_(w0, w0 + len),
      bak_(static_cast<size_t>(len * hosts)),
      ms_(rule.rule == AsyncRule::kDcAsgdA ? static_cast<size_t>(len * hosts) : 0, 0.0f),
      grad_(static_cast<size_t>(len)),
      pulled_(static_cast<size_t>(hosts), 0) {
  for (int h = 0; h < hosts; ++h) std::copy(w0, w0 + len, bak_.begin() + h * len);
}

OwnedPart::Outcome OwnedPart::Apply(int host, const float* delta, int64_t updates, double lr,
                                    int64_t max_staleness) {
  Outcome out;
  out.tau = version_ - pulled_[static_cast<size_t>(host)];
  out.applied = max_staleness < 0 || out.tau <= static_cast<uint64_t>(max_staleness);
  float* bak = bak_.data() + host * len_;
  if (out.applied) {
    // k updates of the mean gradient g = -delta / (lr * k), applied as one at rate lr * k.
    const int64_t k = std::max<int64_t>(updates, 1);
    nn::RuleParams rp = rule_;
    rp.lr = lr * static_cast<double>(k);
    const auto to_grad = static_cast<float>(-1.0 / rp.lr);
    for (int64_t i = 0; i < len_; ++i) grad_[i] = to_grad * delta[i];
    float* ms = ms_.empty() ? nullptr : ms_.data() + host * len_;
    nn::ApplyRule<nn::PlainAccess>(rp, len_, g_.data(), bak, grad_.data(), ms);
    ++version_;
  }
  std::copy(g_.begin(), g_.end(), bak);  // what `host` pulls next
  pulled_[static_cast<size_t>(host)] = version_;
  return out;
}

void OwnedPart::EveryHostPulled() {
  for (size_t h = 0; h < pulled_.size(); ++h) {
    std::copy(g_.begin(), g_.end(), bak_.begin() + static_cast<int64_t>(h) * len_);
    pulled_[h] = version_;
  }
}

// ---- Messages between host masters.

namespace {

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
};
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
};
struct FinalHead {
  uint64_t updates, samples, staleness_sum, dropped_local;  // the host's workers
  uint64_t sent, bytes;                                     // its pushes
  uint64_t applied, dropped, tau_sum, tau_max;              // as an owner
  uint64_t tau_counts[kTauCounts];
};

// A message buffer: a header, then floats.
template <class Head>
struct Buffer {
  std::vector<std::byte> bytes;
  void Resize(int64_t floats) {
    bytes.assign(sizeof(Head) + static_cast<size_t>(floats) * sizeof(float), std::byte{0});
  }
  Head* head() { return reinterpret_cast<Head*>(bytes.data()); }
  float* floats() { return reinterpret_cast<float*>(bytes.data() + sizeof(Head)); }
  int64_t size() const { return static_cast<int64_t>(bytes.size()); }
};

int64_t NowNs() {
  return shm::MonotonicNs();
}

}  // namespace

uint64_t CrossHostTotals::TauQuantile(double q) const {
  uint64_t total = 0;
  for (uint64_t c : tau_counts) total += c;
  if (total == 0) return 0;
  uint64_t seen = 0;
  for (size_t t = 0; t < tau_counts.size(); ++t) {
    seen += tau_counts[t];
    if (static_cast<double>(seen) >= q * static_cast<double>(total)) return t;
  }
  return tau_counts.size() - 1;
}

// ---- The exchange thread.

struct ParamServer::Body {
  Body(const shm::Segment& seg, std::shared_ptr<Hosts> hosts,
       std::shared_ptr<monitoring::PushStats> stats, const Options& o);
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
  void Merge(int j, const float* g);
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
  const std::shared_ptr<monitoring::PushStats> stats_share;
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
  OwnedPart owned;
  std::vector<uint64_t> tau_counts = std::vector<uint64_t>(kTauCounts, 0);
  uint64_t tau_max = 0;

  struct Pusher {  // this host's side of part j
    std::vector<float> base, snap;
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
    Beat beat_in{}, beat_out{-1, 0};
    bool repost = false;   // the push receive is posted again once the reply has gone
    int64_t flushed = -1;  // the latest sync point it has flushed for (its beats)
    int64_t told = -1;     // the latest of this host's that a beat has told it
    int64_t last_heard_ns = 0, last_beat_ns = 0;
    Buffer<FinalHead> final_in;
    Message final_recv, final_send;
  };
  std::vector<Pusher> pushers;
  std::vector<Peer> peers;  // [me] unused
  Buffer<FinalHead> final_out;
  int64_t flushed = -1;       // the latest sync point this host has flushed for
  uint64_t pace_version = 0;  // NextPushNs: the local version and the time it was seen
  int64_t pace_ns = 0;
  double ns_per_update = static_cast<double>(kMaxNapNs);

  std::atomic<bool> stop{false};
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

ParamServer::Body::Body(const shm::Segment& seg, std::shared_ptr<Hosts> hosts_in,
                        std::shared_ptr<monitoring::PushStats> stats_in, const Options& o)
    : hosts_share(std::move(hosts_in)),
      stats_share(std::move(stats_in)),
      h(seg.header()),
      blocks(seg.block(0)),
      w(seg.params(0)),
      n(static_cast<int64_t>(seg.header()->config.param_count)),
      H(hosts_share->count()),
      me(hosts_share->index()),
      P(static_cast<int>(seg.header()->config.workers)),
      hosts(*hosts_share),
      stats(*stats_share),
      opts(o),
      timeout_ns(static_cast<int64_t>(o.host_timeout_s * 1e9)),
      owned(seg.params(0) + Part(me).begin, Part(me).end - Part(me).begin, H,
            nn::RuleParams{.rule = static_cast<AsyncRule>(seg.header()->config.rule),
                           .lr = 0,
                           .lambda0 = seg.header()->config.lambda,
                           .ms_decay = seg.header()->config.ms_decay,
                           .epsilon = seg.header()->config.epsilon}),
      pushers(static_cast<size_t>(H)),
      peers(static_cast<size_t>(H)) {
  const int64_t mine = owned.size();
  for (int j = 0; j < H; ++j) {
    const data::BatchPlan::Range r = Part(j);
    Pusher& p = pushers[static_cast<size_t>(j)];
    p.base.assign(w + r.begin, w + r.end);
    p.snap.resize(static_cast<size_t>(r.end - r.begin));
    p.out.Resize(r.end - r.begin);
    p.in.Resize(r.end - r.begin);
    Peer& q = peers[static_cast<size_t>(j)];
    q.push_in.Resize(mine);
    q.reply_out.Resize(mine);
    q.final_in.Resize(r.end - r.begin);
  }
  final_out.Resize(mine);
}

void ParamServer::Body::Run() {
  Status s = Serve();
  Withdraw();
  if (!s.ok() && !stop.load()) Fail(std::move(s));
}

// Every pending receive withdrawn, so that the transport can end (MPI_Finalize).
void ParamServer::Body::Withdraw() {
  for (int k = 0; k < H; ++k) {
    if (k == me) continue;
    Peer& q = peers[static_cast<size_t>(k)];
    hosts.Cancel(&q.push_recv);
    hosts.Cancel(&q.beat_recv);
    hosts.Cancel(&q.final_recv);
    hosts.Cancel(&pushers[static_cast<size_t>(k)].recv);
  }
}

Status ParamServer::Body::Serve() {
  const int64_t start = NowNs();
  for (int k = 0; k < H; ++k) {
    if (k == me) continue;
    Peer& q = peers[static_cast<size_t>(k)];
    q.last_heard_ns = start;
    if (Status s =
            hosts.Receive(k, kTagPush, q.push_in.bytes.data(), q.push_in.size(), &q.push_recv);
        !s.ok()) {
      return s;
    }
    if (Status s = hosts.Receive(k, kTagBeat, &q.beat_in, sizeof q.beat_in, &q.beat_recv);
        !s.ok()) {
      return s;
    }
  }
  int64_t last = start;
  int idle = 0;
  for (;;) {
    if (stop.load()) return Status::Interrupted("the exchange between hosts: stopped");
    const int64_t now = NowNs();
    if (now - last > kStalledNs) {
      for (Peer& q : peers) q.last_heard_ns += now - last;
    }
    last = now;
    bool busy = false;
    if (Status s = ServePushes(now, &busy); !s.ok()) return s;
    if (Status s = TakeReplies(now, &busy); !s.ok()) return s;
    if (Status s = PushDue(&busy); !s.ok()) return s;
    if (Status s = Beats(now, &busy); !s.ok()) return s;
    for (int k = 0; k < H; ++k) {
      if (k != me && now - peers[static_cast<size_t>(k)].last_heard_ns > timeout_ns) {
        return Status::HostLost("async exchange: nothing arrived from " + hosts.Describe(k) +
                                " by the deadline (--host-timeout " +
                                std::to_string(timeout_ns / 1'000'000) + " ms)");
      }
    }
    if (const int64_t point = Wanted(); point > cut_done.load() && Everyone(point)) {
      if (Status s = SyncPoint(point); !s.ok() || point == kEnd) return s;
    }
    idle = busy ? 0 : idle + 1;
    if (idle > kYieldPolls) {
      const int64_t cap = std::clamp(NextPushNs(now), kMinNapNs, kMaxNapNs);
      const timespec nap{0, std::min(cap, kNapNs * (idle - kYieldPolls))};
      nanosleep(&nap, nullptr);
    } else if (idle > 0) {
      sched_yield();
    }
  }
}

// As the owner: pushes from the other hosts, applied and answered.
Status ParamServer::Body::ServePushes(int64_t now, bool* busy) {
  for (int k = 0; k < H; ++k) {
    if (k == me) continue;
    Peer& q = peers[static_cast<size_t>(k)];
    bool done = false;
    if (Status s = hosts.Test(&q.reply_send, &done); !s.ok()) return s;
    if (!done) continue;
    if (q.repost) {
      q.repost = false;
      if (Status s =
              hosts.Receive(k, kTagPush, q.push_in.bytes.data(), q.push_in.size(), &q.push_recv);
          !s.ok()) {
        return s;
      }
    }
    if (Status s = hosts.Test(&q.push_recv, &done); !s.ok()) return s;
    if (!done) continue;
    *busy = true;
    q.last_heard_ns = now;
    const PushHead head = *q.push_in.head();
    const OwnedPart::Outcome o = owned.Apply(
        k, q.push_in.floats(), static_cast<int64_t>(head.updates), head.lr, opts.max_staleness);
    Record(o);
    *q.reply_out.head() = ReplyHead{owned.version(), o.tau, o.applied ? 1u : 0u, 0};
    std::copy(owned.values(), owned.values() + owned.size(), q.reply_out.floats());
    if (Status s =
            hosts.Send(k, kTagReply, q.reply_out.bytes.data(), q.reply_out.size(), &q.reply_send);
        !s.ok()) {
      return s;
    }
    q.repost = true;
  }
  return Status::Ok();
}

int64_t ParamServer::Body::NextPushNs(int64_t now) {
  const uint64_t v = shm::LoadAcquire(h->param_version);
  if (v > pace_version && pace_ns > 0) {
    const double per = static_cast<double>(now - pace_ns) / static_cast<double>(v - pace_version);
    ns_per_update = 0.8 * ns_per_update + 0.2 * per;
  }
  if (v != pace_version || pace_ns == 0) {
    pace_version = v;
    pace_ns = now;
  }
  int64_t owed = opts.push_every;  // updates until the first part is due
  for (const Pusher& p : pushers) {
    if (!p.waiting) {
      owed = std::min(owed, opts.push_every - static_cast<int64_t>(v - p.pushed_at));
    }
  }
  return static_cast<int64_t>(static_cast<double>(std::max<int64_t>(owed, 1)) * ns_per_update);
}

// As the owner: a push's outcome, in the metrics and in the run's totals.
void ParamServer::Body::Record(const OwnedPart::Outcome& o) {
  if (!o.applied) {
    stats.AddDropped();
    return;
  }
  stats.AddApplied(o.tau);
  ++tau_counts[std::min<uint64_t>(o.tau, kTauCounts - 1)];
  tau_max = std::max(tau_max, o.tau);
}

// W_j moves by what the other hosts added since the snapshot; the part pulled is the new base.
void ParamServer::Body::Merge(int j, const float* g) {
  Pusher& p = pushers[static_cast<size_t>(j)];
  const data::BatchPlan::Range r = Part(j);
  float* wj = w + r.begin;
  const int64_t len = r.end - r.begin;
  for (int64_t i = 0; i < len; ++i) {
    nn::SharedAccess::Store(wj + i, nn::SharedAccess::Load(wj + i) + (g[i] - p.snap[i]));
  }
  std::copy(g, g + len, p.base.begin());
}

// As a pusher: the owners' replies.
Status ParamServer::Body::TakeReplies(int64_t now, bool* busy) {
  for (int j = 0; j < H; ++j) {
    Pusher& p = pushers[static_cast<size_t>(j)];
    if (j == me || !p.waiting) continue;
    bool sent = false, back = false;
    if (Status s = hosts.Test(&p.send, &sent); !s.ok()) return s;
    if (Status s = hosts.Test(&p.recv, &back); !s.ok()) return s;
    if (!sent || !back) continue;
    *busy = true;
    peers[static_cast<size_t>(j)].last_heard_ns = now;
    Merge(j, p.in.floats());
    p.waiting = false;
  }
  return Status::Ok();
}

// As a pusher: a push of every part whose K local updates are in (at a sync point: of every
// part with any), to its owner; this host's own part is applied at once.
Status ParamServer::Body::PushDue(bool* busy) {
  const int64_t point = Wanted();
  const bool flush = point > flushed;
  const uint64_t v = shm::LoadAcquire(h->param_version);
  const int64_t latest = std::max<int64_t>(static_cast<int64_t>(v), 1) - 1;
  const double lr = nn::LearningRate(h->config.optim, shm::AsyncMinibatch(h->config, latest));
  bool settled = flush;
  for (int j = 0; j < H; ++j) {
    Pusher& p = pushers[static_cast<size_t>(j)];
    const uint64_t k = v - p.pushed_at;
    if (p.waiting) {
      settled = false;
      continue;
    }
    if (k == 0 || (k < static_cast<uint64_t>(opts.push_every) && !flush)) continue;
    *busy = true;
    const data::BatchPlan::Range r = Part(j);
    const int64_t len = r.end - r.begin;
    float* delta = p.out.floats();
    for (int64_t i = 0; i < len; ++i) {
      p.snap[i] = nn::SharedAccess::Load(w + r.begin + i);
      delta[i] = p.snap[i] - p.base[i];
    }
    *p.out.head() = PushHead{k, lr};
    p.pushed_at = v;
    if (j == me) {
      stats.AddSent(0);
      Record(owned.Apply(me, delta, static_cast<int64_t>(k), lr, opts.max_staleness));
      Merge(me, owned.values());
      continue;
    }
    if (Status s = hosts.Receive(j, kTagReply, p.in.bytes.data(), p.in.size(), &p.recv); !s.ok()) {
      return s;
    }
    if (Status s = hosts.Send(j, kTagPush, p.out.bytes.data(), p.out.size(), &p.send); !s.ok()) {
      return s;
    }
    stats.AddSent(static_cast<uint64_t>(p.out.size()));
    p.waiting = true;
    settled = false;
  }
  if (settled) {
    flushed = point;  // every update of this host is at its owner
    *busy = true;
  }
  return Status::Ok();
}

// Liveness both ways, and the sync point this host has flushed for.
Status ParamServer::Body::Beats(int64_t now, bool* busy) {
  for (int k = 0; k < H; ++k) {
    if (k == me) continue;
    Peer& q = peers[static_cast<size_t>(k)];
    bool done = false;
    if (Status s = hosts.Test(&q.beat_recv, &done); !s.ok()) return s;
    if (done) {
      q.last_heard_ns = now;
      q.flushed = q.beat_in.flushed;
      if (Status s = hosts.Receive(k, kTagBeat, &q.beat_in, sizeof q.beat_in, &q.beat_recv);
          !s.ok()) {
        return s;
      }
    }
    if (Status s = hosts.Test(&q.beat_send, &done); !s.ok()) return s;
    const bool tell = flushed > q.told;
    if (!done || (!tell && now - q.last_beat_ns < kBeatMs * 1'000'000LL)) continue;
    q.beat_out = Beat{flushed, q.beat_out.seq + 1};
    if (Status s = hosts.Send(k, kTagBeat, &q.beat_out, sizeof q.beat_out, &q.beat_send); !s.ok()) {
      return s;
    }
    q.last_beat_ns = now;
    q.told = flushed;
    *busy |= tell;
  }
  return Status::Ok();
}

// Every host has flushed for the point: no push is in flight anywhere, and no host's workers
// write W until the point is passed.
Status ParamServer::Body::SyncPoint(int64_t point) {
  if (Status s = ExchangeParts(); !s.ok()) return s;
  // This host's W is the run's model: its bases are what it pulled, every owner's backups
  // what every host pulled.
  for (int64_t i = 0; i < n; ++i)
    nn::SharedAccess::Store(w + i, final_params[static_cast<size_t>(i)]);
  for (int j = 0; j < H; ++j) {
    const data::BatchPlan::Range r = Part(j);
    std::copy(final_params.begin() + r.begin, final_params.begin() + r.end,
              pushers[static_cast<size_t>(j)].base.begin());
  }
  owned.EveryHostPulled();
  cut_done.store(point);
  return Status::Ok();
}

// Every owner's part, with its host's counters, to every host: into final_params and totals.
// This host's message at a sync point: its workers' and its exchange's counters, its part.
void ParamServer::Body::FillOwnParts() {
  FinalHead& f = *final_out.head();
  f = FinalHead{};
  f.updates = shm::LoadAcquire(h->param_version);
  for (int r = 0; r < P; ++r) {
    f.samples += shm::LoadRelaxed(blocks[r].samples_total);
    f.staleness_sum += shm::LoadRelaxed(blocks[r].staleness_sum);
    f.dropped_local += shm::LoadRelaxed(blocks[r].dropped_total);
  }
  f.sent = stats.sent();
  f.bytes = stats.bytes();
  f.applied = stats.applied();
  f.dropped = stats.dropped();
  f.tau_sum = stats.tau_sum();
  f.tau_max = tau_max;
  std::copy(tau_counts.begin(), tau_counts.end(), f.tau_counts);
  std::copy(owned.values(), owned.values() + owned.size(), final_out.floats());
}

// Every host's message (this one's in final_out): the run's parameters and totals.
void ParamServer::Body::TakeParts() {
  final_params.resize(static_cast<size_t>(n));
  totals = CrossHostTotals{};
  totals.tau_counts.assign(kTauCounts, 0);
  for (int k = 0; k < H; ++k) {
    const data::BatchPlan::Range r = Part(k);
    Buffer<FinalHead>& src = k == me ? final_out : peers[static_cast<size_t>(k)].final_in;
    const FinalHead& g = *src.head();
    std::copy(src.floats(), src.floats() + (r.end - r.begin), final_params.begin() + r.begin);
    totals.host_updates.push_back(g.updates);
    totals.samples += g.samples;
    totals.staleness_sum += g.staleness_sum;
    totals.dropped_local += g.dropped_local;
    totals.sent += g.sent;
    totals.bytes += g.bytes;
    totals.applied += g.applied;
    totals.dropped += g.dropped;
    totals.tau_sum += g.tau_sum;
    totals.tau_max = std::max(totals.tau_max, g.tau_max);
    for (int t = 0; t < kTauCounts; ++t)
      totals.tau_counts[static_cast<size_t>(t)] += g.tau_counts[t];
  }
}

Status ParamServer::Body::ExchangeParts() {
  FillOwnParts();
  for (int k = 0; k < H; ++k) {
    if (k == me) continue;
    Peer& q = peers[static_cast<size_t>(k)];
    if (Status s =
            hosts.Receive(k, kTagParts, q.final_in.bytes.data(), q.final_in.size(), &q.final_recv);
        !s.ok()) {
      return s;
    }
    if (Status s =
            hosts.Send(k, kTagParts, final_out.bytes.data(), final_out.size(), &q.final_send);
        !s.ok()) {
      return s;
    }
  }
  const int64_t deadline = NowNs() + timeout_ns;
  for (int k = 0; k < H;) {
    if (stop.load()) return Status::Interrupted("the exchange between hosts: stopped");
    Peer& q = peers[static_cast<size_t>(k)];
    bool a = true, b = true;
    if (k != me) {
      if (Status s = hosts.Test(&q.final_recv, &a); !s.ok()) return s;
      if (Status s = hosts.Test(&q.final_send, &b); !s.ok()) return s;
    }
    if (a && b) {
      ++k;
      continue;
    }
    if (NowNs() > deadline) {
      return Status::HostLost("async exchange, a sync point: nothing arrived from " +
                              hosts.Describe(k) + " by the deadline (--host-timeout " +
                              std::to_string(timeout_ns / 1'000'000) + " ms)");
    }
    sched_yield();
  }
  TakeParts();
  return Status::Ok();
}

// ---- The unit.

ParamServer::ParamServer(shm::Segment& seg, std::shared_ptr<Hosts> hosts,
                         std::shared_ptr<monitoring::PushStats> stats, const Options& o)
    : body_(std::make_shared<Body>(seg, std::move(hosts), std::move(stats), o)),
      thread_(seg, [body = body_] { body->Run(); }) {}

ParamServer::~ParamServer() {
  Stop();
}

void ParamServer::Stop() {
  body_->stop.store(true);
  thread_.JoinOrLeave();
}

bool ParamServer::Cut(int64_t step) {
  if (body_->cut_done.load() >= step) return true;
  body_->cut_wanted.store(step);
  return false;
}

Status ParamServer::status() const {
  std::lock_guard<std::mutex> lock(body_->mu);
  return body_->status;
}

void ParamServer::Stop(RunEnd& end) {
  if (!end.status.ok()) {
    Stop();
    return;
  }
  body_->local_done.store(true);
  // Waits for the other hosts to finish: each is watched by the thread (--host-timeout).
  while (!thread_.Ended(kPollMs)) {
    if (g_stop_signal.load() != 0) {
      Stop();
      end.status = Status::Interrupted("stopped while the other hosts were finishing");
      return;
    }
  }
  thread_.JoinOrLeave();  // it has ended: joins
  if (Status s = status(); !s.ok()) end.status = std::move(s);
}

void ParamServer::Collect(RunEnd& end) {
  if (!end.status.ok()) return;
  end.params = std::move(body_->final_params);
  end.summary.cross = std::move(body_->totals);
}

}  // namespace shmtrain::master
