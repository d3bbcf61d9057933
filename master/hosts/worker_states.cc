#include "master/hosts/worker_states.h"

#include <algorithm>
#include <utility>

#include "monitoring/run_page.h"

namespace shmtrain::master {
namespace {

constexpr int64_t kReportNs = 1'000'000'000;  // a host's report a second

}  // namespace

WorkerStatesExchange::WorkerStatesExchange(Hosts& hosts, const shm::WorkerBlock* blocks, int P,
                                           std::shared_ptr<monitoring::RunStats> stats)
    : hosts_(hosts),
      blocks_(blocks),
      P_(P),
      stats_(std::move(stats)),
      me_(hosts.index()),
      H_(hosts.count()) {
  if (me_ == 0) {
    in_.resize(static_cast<size_t>(H_));
    receives_.resize(static_cast<size_t>(H_));
  }
}

Status WorkerStatesExchange::Pump(int64_t now_ns) {
  if (H_ < 2) return Status::Ok();
  if (me_ == 0) return Take();
  return Send(now_ns);
}

Status WorkerStatesExchange::Send(int64_t now_ns) {
  if (now_ns < next_send_ns_) return Status::Ok();
  bool gone = true;
  if (Status s = hosts_.Test(&send_, &gone); !s.ok()) return s;
  if (!gone) return Status::Ok();  // the buffer is the transport's until the last has gone
  const std::vector<monitoring::WorkerState> states =
      monitoring::LocalWorkerStates(blocks_, P_, *stats_, me_);
  out_.host = me_;
  out_.count = static_cast<int32_t>(std::min<size_t>(states.size(), kMaxReportedWorkers));
  for (int32_t k = 0; k < out_.count; ++k) {
    const monitoring::WorkerState& w = states[static_cast<size_t>(k)];
    out_.workers[static_cast<size_t>(k)] = {w.pid, w.samples, w.restarts, w.heartbeat_age_s,
                                            w.up ? 1u : 0u, static_cast<uint32_t>(w.worker)};
  }
  next_send_ns_ = now_ns + kReportNs;
  return hosts_.Send(0, kTagWorkers, &out_, sizeof out_, &send_);
}

// Host 0: what arrived, filed; a receive posted again from each host.
Status WorkerStatesExchange::Take() {
  for (int k = 1; k < H_; ++k) {
    Message& m = receives_[static_cast<size_t>(k)];
    Report& r = in_[static_cast<size_t>(k)];
    if (started_) {
      bool done = false;
      if (Status s = hosts_.Test(&m, &done); !s.ok()) return s;
      if (!done) continue;
      std::vector<monitoring::WorkerState> states;
      for (int32_t j = 0; j < std::clamp(r.count, 0, kMaxReportedWorkers); ++j) {
        const Wire& w = r.workers[static_cast<size_t>(j)];
        states.push_back({k, static_cast<int>(w.worker), w.up != 0, w.restarts, w.pid,
                          w.heartbeat_age_s, w.samples});
      }
      stats_->remote_workers().Set(k, std::move(states));
    }
    if (Status s = hosts_.Receive(k, kTagWorkers, &r, sizeof r, &m); !s.ok()) return s;
  }
  started_ = true;
  return Status::Ok();
}

void WorkerStatesExchange::Withdraw() {
  for (Message& m : receives_) hosts_.Cancel(&m);
}

}  // namespace shmtrain::master
