#include "master/hosts/param_server.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "data/batch_plan.h"
#include "master/hosts/async_state.h"
#include "master/hosts/param_server_body.h"
#include "master/unit/stop_flag.h"

namespace shmtrain::master {

// ---- The owner's rule.

OwnedPart::OwnedPart(const float* w0, int64_t len, int hosts, const nn::RuleParams& rule,
                     uint64_t first)
    : len_(len),
      rule_(rule),
      g_(w0, w0 + len),
      bak_(static_cast<size_t>(len * hosts)),
      ms_(rule.rule == AsyncRule::kDcAsgdA ? static_cast<size_t>(len * hosts) : 0, 0.0f),
      grad_(static_cast<size_t>(len)),
      pulled_(static_cast<size_t>(hosts), 0),
      settled_(static_cast<size_t>(hosts), first) {
  for (int h = 0; h < hosts; ++h) std::copy(w0, w0 + len, bak_.begin() + h * len);
}

OwnedPart::Outcome OwnedPart::Apply(int host, const float* delta, int64_t updates, double lr,
                                    int64_t max_staleness, uint64_t at) {
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
  settled_[static_cast<size_t>(host)] = at;
  return out;
}

void OwnedPart::EveryHostPulled() {
  for (size_t h = 0; h < pulled_.size(); ++h) {
    std::copy(g_.begin(), g_.end(), bak_.begin() + static_cast<int64_t>(h) * len_);
    pulled_[h] = version_;
  }
}

// ---- The exchange thread's state (master/hosts/param_server_body.h), made before the thread
// starts; its exchanges are in master/hosts/param_server_exchange.cc.

ParamServer::Body::Body(shm::Segment& seg, std::shared_ptr<Hosts> hosts_in,
                        std::shared_ptr<monitoring::RunStats> stats_in, const Options& o)
    : hosts_share(std::move(hosts_in)),
      stats_share(std::move(stats_in)),
      h(seg.mutable_header()),
      blocks(seg.block(0)),
      w(seg.mutable_params(0)),
      n(static_cast<int64_t>(seg.header()->config.param_count)),
      H(hosts_share->count()),
      me(hosts_share->index()),
      P(static_cast<int>(seg.header()->config.workers)),
      hosts(*hosts_share),
      stats(stats_share->pushes()),
      opts(o),
      timeout_ns(static_cast<int64_t>(o.host_timeout_s * 1e9)),
      workers(hosts, blocks, P, stats_share),
      owned(seg.params(0) + Part(me).begin, Part(me).end - Part(me).begin, H,
            nn::RuleParams{.rule = static_cast<AsyncRule>(seg.header()->config.rule),
                           .lr = 0,
                           .lambda0 = seg.header()->config.lambda,
                           .ms_decay = seg.header()->config.ms_decay,
                           .epsilon = seg.header()->config.epsilon},
            seg.header()->param_version),
      pushers(static_cast<size_t>(H)),
      peers(static_cast<size_t>(H)),
      // Every host starts from the same local version: the run's first update over H.
      known(static_cast<size_t>(H), seg.header()->param_version) {
  const int64_t mine = owned.size();
  for (int j = 0; j < H; ++j) {
    const data::BatchPlan::Range r = Part(j);
    Pusher& p = pushers[static_cast<size_t>(j)];
    p.base.assign(w + r.begin, w + r.end);
    p.snap.resize(static_cast<size_t>(r.end - r.begin));
    p.settled = known;
    p.pushed_at = seg.header()->param_version;  // a resumed run's first push sums its own only
    p.out.Resize(r.end - r.begin);
    p.in.Resize(r.end - r.begin, H);
    Peer& q = peers[static_cast<size_t>(j)];
    q.push_in.Resize(mine);
    q.reply_out.Resize(mine, H);
    q.final_in.Resize(r.end - r.begin);
  }
  final_out.Resize(mine);
}

// ---- The unit.

ParamServer::ParamServer(shm::Segment& seg, std::shared_ptr<Hosts> hosts,
                         std::shared_ptr<monitoring::RunStats> stats, const Options& o)
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

bool ParamServer::StopState(const Checkpoint& run, std::string* bytes) {
  thread_.JoinOrLeave();  // or left inside the transport: its state is frozen below
  Body& b = *body_;
  std::lock_guard<std::mutex> lock(b.state_mu);
  b.frozen = true;
  AsyncStopState s;
  s.hosts = b.H;
  s.host = b.me;
  s.updates = shm::LoadAcquire(b.h->param_version);
  s.known = b.known;
  s.known[static_cast<size_t>(b.me)] = s.updates;
  s.owned.version = b.owned.version();
  s.owned.settled = b.owned.settled();
  s.owned.base.assign(b.owned.values(), b.owned.values() + b.owned.size());
  for (const Body::Pusher& p : b.pushers) {
    AsyncPartState& part = s.parts.emplace_back();
    part.version = p.version;
    part.settled = p.settled;
    part.base = p.base;
    if (p.waiting) {
      part.pending_at = p.pushed_at;
      part.snap = p.snap;
    }
  }
  s.checkpoint = run;
  s.checkpoint.params.resize(static_cast<size_t>(b.n));
  for (int64_t i = 0; i < b.n; ++i) s.checkpoint.params[i] = nn::SharedAccess::Load(b.w + i);
  s.checkpoint.step = static_cast<int64_t>(s.updates);
  *bytes = EncodeAsyncState(s);
  return true;
}

void ParamServer::Collect(RunEnd& end) {
  if (!end.status.ok()) return;
  end.params = std::move(body_->final_params);
  end.summary.cross = std::move(body_->totals);
}

}  // namespace shmtrain::master
