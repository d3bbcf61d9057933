// The parameter server's exchanges (master/hosts/param_server.h): the thread's loop, as an owner
// and as a pusher, the beats, and the sync points.
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>

#include "data/batch_plan.h"
#include "master/hosts/param_server_body.h"
#include "nn/schedule.h"
#include "nn/update.h"
#include "shm/futex.h"

namespace shmtrain::master {

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
  workers.Withdraw();
}

Status ParamServer::Body::Serve() {
  const int64_t start = shm::MonotonicNs();
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
    const int64_t now = shm::MonotonicNs();
    if (now - last > kStalledNs) {
      for (Peer& q : peers) q.last_heard_ns += now - last;
    }
    last = now;
    bool busy = false;
    if (Status s = ServePushes(now, &busy); !s.ok()) return s;
    if (Status s = TakeReplies(now, &busy); !s.ok()) return s;
    if (Status s = PushDue(&busy); !s.ok()) return s;
    if (Status s = Beats(now, &busy); !s.ok()) return s;
    if (Status s = workers.Pump(now); !s.ok()) return s;
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
    {
      std::lock_guard<std::mutex> lock(state_mu);
      if (frozen) return Frozen();
      const OwnedPart::Outcome o =
          owned.Apply(k, q.push_in.floats(), static_cast<int64_t>(head.updates), head.lr,
                      opts.max_staleness, head.at);
      Record(o);
      *q.reply_out.head() = ReplyHead{owned.version(), o.tau, o.applied ? 1u : 0u, 0};
      std::copy(owned.settled().begin(), owned.settled().end(), q.reply_out.words());
      std::copy(owned.values(), owned.values() + owned.size(), q.reply_out.floats());
    }
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
void ParamServer::Body::Merge(int j, const float* g, uint64_t version, const uint64_t* settled) {
  Pusher& p = pushers[static_cast<size_t>(j)];
  p.version = version;
  std::copy(settled, settled + H, p.settled.begin());
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
    std::lock_guard<std::mutex> lock(state_mu);
    if (frozen) return Frozen();
    Merge(j, p.in.floats(), p.in.head()->version, p.in.words());
    p.waiting = false;
  }
  return Status::Ok();
}

// Part j's snapshot and the push of its k updates up to local version v, taken: this host's own
// part applied at once, another's marked out (before it is sent: a push that may have reached
// its owner is one out, for StopState). False once the state is frozen.
bool ParamServer::Body::Snapshot(int j, uint64_t k, uint64_t v, double lr) {
  std::lock_guard<std::mutex> lock(state_mu);
  if (frozen) return false;
  Pusher& p = pushers[static_cast<size_t>(j)];
  const data::BatchPlan::Range r = Part(j);
  float* delta = p.out.floats();
  for (int64_t i = 0; i < r.end - r.begin; ++i) {
    p.snap[i] = nn::SharedAccess::Load(w + r.begin + i);
    delta[i] = p.snap[i] - p.base[i];
  }
  *p.out.head() = PushHead{k, lr, v};
  p.pushed_at = v;
  if (j != me) {
    p.waiting = true;
    return true;
  }
  stats.AddSent(0);
  Record(owned.Apply(me, delta, static_cast<int64_t>(k), lr, opts.max_staleness, v));
  Merge(me, owned.values(), owned.version(), owned.settled().data());
  return true;
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
    if (!Snapshot(j, k, v, lr)) return Frozen();
    if (j == me) continue;  // applied at once
    if (Status s = hosts.Receive(j, kTagReply, p.in.bytes.data(), p.in.size(), &p.recv); !s.ok()) {
      return s;
    }
    if (Status s = hosts.Send(j, kTagPush, p.out.bytes.data(), p.out.size(), &p.send); !s.ok()) {
      return s;
    }
    stats.AddSent(static_cast<uint64_t>(p.out.size()));
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
      std::lock_guard<std::mutex> lock(state_mu);
      known[static_cast<size_t>(k)] = std::max(known[static_cast<size_t>(k)], q.beat_in.updates);
      if (Status s = hosts.Receive(k, kTagBeat, &q.beat_in, sizeof q.beat_in, &q.beat_recv);
          !s.ok()) {
        return s;
      }
    }
    if (Status s = hosts.Test(&q.beat_send, &done); !s.ok()) return s;
    const bool tell = flushed > q.told;
    if (!done || (!tell && now - q.last_beat_ns < kBeatMs * 1'000'000LL)) continue;
    q.beat_out = Beat{flushed, q.beat_out.seq + 1, shm::LoadAcquire(h->param_version)};
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
  std::lock_guard<std::mutex> lock(state_mu);
  if (frozen) return Frozen();
  // This host's W is the run's model: its bases are what it pulled, every owner's backups
  // what every host pulled.
  for (int64_t i = 0; i < n; ++i)
    nn::SharedAccess::Store(w + i, final_params[static_cast<size_t>(i)]);
  // Every host's updates are at every owner: each part's settled is every host's version.
  known = totals.host_updates;
  for (int j = 0; j < H; ++j) {
    const data::BatchPlan::Range r = Part(j);
    Pusher& p = pushers[static_cast<size_t>(j)];
    std::copy(final_params.begin() + r.begin, final_params.begin() + r.end, p.base.begin());
    p.version = part_versions[static_cast<size_t>(j)];
    p.settled = known;
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
  f.version = owned.version();
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
    part_versions[static_cast<size_t>(k)] = g.version;
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
  const int64_t deadline = shm::MonotonicNs() + timeout_ns;
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
    if (shm::MonotonicNs() > deadline) {
      return Status::HostLost("async exchange, a sync point: nothing arrived from " +
                              hosts.Describe(k) + " by the deadline (--host-timeout " +
                              std::to_string(timeout_ns / 1'000'000) + " ms)");
    }
    sched_yield();
  }
  TakeParts();
  return Status::Ok();
}

}  // namespace shmtrain::master
