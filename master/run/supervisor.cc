#include "master/run/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>

#include "core/signal_name.h"
#include "master/kinds/kind.h"
#include "master/run/segment_reads.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

SupervisorOptions SupervisorOptions::For(const TrainOptions& o, const DivergenceCause& divergence) {
  SupervisorOptions so;
  so.heartbeat_timeout_ns = static_cast<int64_t>(o.heartbeat_timeout_s * 1e9);
  so.max_restarts = o.max_restarts;
  so.restart_window_ns = static_cast<int64_t>(o.restart_window_s * 1e9);
  so.chaos_every_ns = static_cast<int64_t>(o.chaos_every_s * 1e9);
  so.chaos_seed = o.chaos_seed;
  so.divergence = divergence;
  return so;
}
namespace {

constexpr int64_t kLeaveNs = 1'000'000'000;  // time workers get to leave after an abort
// A worker refreshes its heartbeat every step and every barrier wait slice (at most 100 ms,
// shm/barrier.h): one older than this many wait slices is not waiting at a barrier.
constexpr int64_t kSilentFloorNs = 250'000'000;

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return "was killed by " + SignalText(WTERMSIG(status));
  }
  const int code = WEXITSTATUS(status);
  return "exited with code " + std::to_string(code) + " (" + WorkerExitName(code) + ")";
}

}  // namespace

Supervisor::Supervisor(const RunKind& kind, const shm::Segment& seg, SegmentWrites& writes,
                       Launcher& launcher, Logger& log, monitoring::WorkerStats& stats,
                       const SupervisorOptions& opts)
    : protocol_(kind),
      seg_(seg),
      writes_(writes),
      launcher_(launcher),
      log_(log),
      stats_(stats),
      opts_(opts),
      deaths_(kind.MakeDeathRules(seg, writes, stats)),
      kids_(seg.header()->config.workers),
      chaos_rng_(nn::MixSeed(opts.chaos_seed, 0x43484153ull)) {  // "CHAS"
  if (opts_.chaos_every_ns > 0) {
    next_chaos_ns_ = shm::MonotonicNs() +
                     static_cast<int64_t>((0.5 + chaos_rng_.Uniform()) * opts_.chaos_every_ns);
  }
}

Supervisor::~Supervisor() { KillAll(); }

Status Supervisor::Start() {
  for (int r = 0; r < static_cast<int>(kids_.size()); ++r) {
    if (Status s = StartRank(r, 0); !s.ok()) return s;
  }
  return Status::Ok();
}

Status Supervisor::StartRank(int rank, uint32_t incarnation) {
  writes_.PrepareRank(rank, incarnation);
  pid_t pid = -1;
  if (Status s = launcher_.Spawn(seg_.name(), rank, incarnation, &pid); !s.ok()) return s;
  Child& c = kids_[rank];
  c = Child{};
  c.pid = pid;
  c.running = true;
  c.incarnation = incarnation;
  c.started_ns = shm::MonotonicNs();
  c.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (c.pidfd < 0) {
    const int e = errno;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    c.running = false;
    return Status::Resource("cannot watch worker " + std::to_string(rank) +
                            ": pidfd_open: " + std::strerror(e));
  }
  stats_.SetUp(rank, true);
  log_.JsonOnly(JsonLine("worker_started")
                    .Int("rank", rank)
                    .Int("pid", pid)
                    .Int("incarnation", incarnation));
  return Status::Ok();
}

bool Supervisor::Reap(int r) {
  Child& c = kids_[r];
  int st = 0;
  if (waitpid(c.pid, &st, WNOHANG) != c.pid) return false;
  c.status = st;
  c.running = false;
  stats_.SetUp(r, false);
  close(c.pidfd);
  c.pidfd = -1;
  return true;
}

std::vector<int> Supervisor::PollExited(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int> ranks, exited;
  for (int r = 0; r < static_cast<int>(kids_.size()); ++r) {
    if (kids_[r].running) {
      fds.push_back({kids_[r].pidfd, POLLIN, 0});
      ranks.push_back(r);
    }
  }
  if (!fds.empty() && poll(fds.data(), fds.size(), timeout_ms) > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0 && Reap(ranks[i])) exited.push_back(ranks[i]);
    }
  }
  return exited;
}

void Supervisor::Wait(int timeout_ms) {
  for (const int r : PollExited(timeout_ms)) exited_.push_back(r);
}

Verdict Supervisor::Tick(const RunView& view) {
  std::vector<int> exited;
  exited.swap(exited_);
  for (const int r : exited) {
    if (Status s = OnExit(r); !s.ok()) return Verdict::EndIf(std::move(s));
  }
  const int64_t now = view.now_ns;
  const int64_t progress = view.progress;
  // Recovered: the replacement has attached and the run has moved on since the death (a peer
  // that was one phase behind can move the counter once without the replacement).
  auto moved = std::remove_if(pending_.begin(), pending_.end(), [&](const PendingRecovery& p) {
    if (progress <= p.progress || !kids_[p.rank].running ||
        shm::LoadAcquire(seg_.block(p.rank)->attached) == 0) {
      return false;
    }
    const double s = (now - p.died_ns) * 1e-9;
    recoveries_.push_back(s);
    stats_.ObserveRecovery(s);
    return true;
  });
  pending_.erase(moved, pending_.end());
  CheckHangs(now);
  MaybeChaos(now, progress);
  return AllFinished() ? WorkDone() : Verdict::GoOn();
}

// No worker runs: the kind's rules settle what deaths left (async: the interrupted updates)
// and say which ranks still owe work.
Verdict Supervisor::WorkDone() {
  std::vector<int> owed;
  if (Status s = deaths_->AllFinished(&owed); !s.ok()) return Verdict::EndIf(std::move(s));
  if (owed.empty()) return Verdict::Done();
  for (int r : owed) {
    if (Status s = StartRank(r, kids_[r].incarnation + 1); !s.ok()) return Verdict::EndIf(s);
  }
  return Verdict::GoOn();
}

void Supervisor::Stop(RunEnd& end) {
  if (!end.status.ok()) AbortAll();
}

void Supervisor::Collect(RunEnd& end) {
  if (!end.status.ok()) return;
  end.summary.restarts = restarts_;
  end.summary.torn_updates = deaths_->torn();
  end.summary.recoveries = recoveries_;
}

// A clean exit at the end of the rank's part, as the kind's rules say: a sync worker leaves
// only after its last step, or at the eval step an early stop named; an async one once the
// update budget is claimed or a stop is asked for.
bool Supervisor::FinishedItsPart(int r) const {
  const Child& c = kids_[r];
  if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) return false;
  return deaths_->FinishedItsPart(r);
}

Status Supervisor::OnExit(int r) {
  Child& c = kids_[r];
  if (FinishedItsPart(r)) {
    c.finished = true;
    return Status::Ok();
  }
  const int code = WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1;
  if (code == kWorkerDiverged) {
    // Not a fault of the process: a replacement would compute the same non-finite numbers.
    int64_t at = shm::LoadRelaxed(seg_.header()->diverged_step);
    if (at == shm::kNoStop) at = protocol_.Progress(seg_);
    return Status::Diverged("training diverged at step " + std::to_string(at) +
                            ": the loss or gradient is not finite (NaN or infinite); " +
                            opts_.divergence.At(at));
  }
  const int64_t now = shm::MonotonicNs();
  const int64_t progress = protocol_.Progress(seg_);
  const Death d = WhyDied(r, code, now, progress);
  deaths_->Settle(r);
  if (!d.chaos && !d.victim) {
    if (Status s =
            CountFailure({now, r, d.hang ? "hang" : DescribeExit(c.status)}, d.what, progress);
        !s.ok()) {
      return s;
    }
  }
  const monitoring::RestartReason reason = d.chaos    ? monitoring::RestartReason::kChaos
                                           : d.hang   ? monitoring::RestartReason::kHang
                                           : d.victim ? monitoring::RestartReason::kPeerHang
                                                      : monitoring::RestartReason::kCrash;
  return RestartRank(r, reason, d.what, progress, now);
}

Supervisor::Death Supervisor::WhyDied(int r, int code, int64_t now, int64_t progress) {
  const Child& c = kids_[r];
  const auto& cfg = seg_.header()->config;
  Death d;
  d.chaos = c.kill_reason != nullptr && std::strcmp(c.kill_reason, "chaos") == 0;
  d.hang = c.kill_reason != nullptr && std::strcmp(c.kill_reason, "hang") == 0;
  // A barrier timeout is most often a victim's: the rank it waited for is silent (stopped,
  // or stuck where it refreshes nothing). That rank is killed as hung; the waiter is restarted
  // without counting against the crash-loop budget. A peer that timed out waiting for a rank
  // killed as hung a moment ago (within one barrier timeout) is a victim too.
  std::string silent;
  if (code == kWorkerBarrierTimeout) {
    silent = KillSilent(now);
    d.victim = !silent.empty() ||
               now - last_hang_kill_ns_ <=
                   static_cast<int64_t>(cfg.barrier_timeout_s * 1e9) + kLeaveNs;
  }
  d.what = "worker " + std::to_string(r) + " (pid " + std::to_string(c.pid) + ") " +
           (d.hang ? "stopped sending heartbeats and was killed" : DescribeExit(c.status)) +
           " at step " + std::to_string(progress) + " of " + std::to_string(cfg.total_steps);
  if (d.victim) {
    d.what += silent.empty() ? ", waiting for a worker killed for sending no heartbeats"
                             : ", waiting for " + silent +
                                   ", which sent no heartbeats and was killed";
  }
  return d;
}

Status Supervisor::RestartRank(int r, monitoring::RestartReason reason, const std::string& what,
                               int64_t progress, int64_t now) {
  Child& c = kids_[r];
  ++restarts_;
  stats_.AddRestart(r, reason);
  log_.Info("restarting " + what,
            JsonLine("worker_restart")
                .Int("rank", r)
                .Str("reason", monitoring::ToString(reason))
                .Int("step", progress)
                .Int("incarnation", c.incarnation + 1));
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const PendingRecovery& p) { return p.rank == r; }),
                 pending_.end());
  pending_.push_back({now, progress, r});
  return StartRank(r, c.incarnation + 1);
}

// The crash-loop budget: more than max_restarts failures within the window, or in a row with
// no progress between them (failures slower than the window still form a loop then).
Status Supervisor::CountFailure(const Restart& failure, const std::string& what,
                                int64_t progress) {
  const int64_t now = failure.at_ns;
  window_.push_back(failure);
  while (!window_.empty() && window_.front().at_ns < now - opts_.restart_window_ns) {
    window_.pop_front();
  }
  if (static_cast<int>(window_.size()) > opts_.max_restarts) {
    return Status::WorkerFailed(
        what + ". " + std::to_string(window_.size()) + " failures within " +
        std::to_string(opts_.restart_window_ns / 1'000'000'000) +
        " s is more than --max-restarts " + std::to_string(opts_.max_restarts) + " (" +
        Who(window_) + "); the run was abandoned");
  }
  // Failures slower than the window still form a loop when nothing moves between them.
  if (progress != stall_progress_) {
    stall_progress_ = progress;
    stalled_.clear();
  }
  stalled_.push_back(failure);
  if (static_cast<int>(stalled_.size()) > opts_.max_restarts) {
    return Status::WorkerFailed(
        what + ". " + std::to_string(stalled_.size()) +
        " failures in a row without progress (the run stayed at step " +
        std::to_string(progress) + ") is more than --max-restarts " +
        std::to_string(opts_.max_restarts) + " (" + Who(stalled_) +
        "); the run was abandoned");
  }
  return Status::Ok();
}

void Supervisor::CheckHangs(int64_t now) {
  for (Child& c : kids_) {
    if (!c.running || c.kill_reason != nullptr) continue;
    const int64_t hb =
        shm::LoadRelaxed(seg_.block(static_cast<int>(&c - kids_.data()))->heartbeat_ns);
    if (now - std::max(hb, c.started_ns) > opts_.heartbeat_timeout_ns) {
      c.kill_reason = "hang";
      last_hang_kill_ns_ = now;
      kill(c.pid, SIGKILL);  // reaped and replaced on the next Tick
    }
  }
}

std::string Supervisor::KillSilent(int64_t now) {
  const auto& cfg = seg_.header()->config;
  // Half the barrier timeout: a rank that stopped before its peer began to wait is silent for
  // at least the whole timeout when the peer gives up, minus at most one step of computing.
  const int64_t limit =
      std::max(kSilentFloorNs, static_cast<int64_t>(cfg.barrier_timeout_s * 1e9 / 2));
  std::string who;
  for (int r = 0; r < static_cast<int>(kids_.size()); ++r) {
    Child& c = kids_[r];
    if (!c.running || c.kill_reason != nullptr) continue;
    const int64_t hb = shm::LoadRelaxed(seg_.block(r)->heartbeat_ns);
    if (now - std::max(hb, c.started_ns) <= limit) continue;
    c.kill_reason = "hang";
    last_hang_kill_ns_ = now;
    kill(c.pid, SIGKILL);  // reaped and replaced on the next Tick
    who += (who.empty() ? "worker " : ", worker ") + std::to_string(r);
  }
  return who;
}

std::string Supervisor::Who(const std::deque<Restart>& failures) {
  std::map<int, std::map<std::string, int>> by_rank;
  for (const Restart& x : failures) ++by_rank[x.rank][x.why];
  std::string who;
  for (const auto& [rank, whys] : by_rank) {
    for (const auto& [why, n] : whys) {
      who += (who.empty() ? "" : "; ") + std::string("worker ") + std::to_string(rank) + " " +
             why + (n > 1 ? " (" + std::to_string(n) + " times)" : "");
    }
  }
  return who;
}

void Supervisor::MaybeChaos(int64_t now, int64_t progress) {
  // A kill also waits for the run to move past where the previous one found it: kills never
  // come faster than the run recovers from them, so on a loaded machine chaos slows a run
  // down but never stalls it (a replacement still starting would be killed again and again).
  if (opts_.chaos_every_ns <= 0 || now < next_chaos_ns_ || progress <= chaos_progress_) return;
  next_chaos_ns_ =
      now + static_cast<int64_t>((0.5 + chaos_rng_.Uniform()) * opts_.chaos_every_ns);
  std::vector<int> live;
  for (int r = 0; r < static_cast<int>(kids_.size()); ++r) {
    if (kids_[r].running && !kids_[r].finished && kids_[r].kill_reason == nullptr) {
      live.push_back(r);
    }
  }
  if (live.empty()) return;
  Child& c = kids_[live[chaos_rng_.Below(live.size())]];
  c.kill_reason = "chaos";
  kill(c.pid, SIGKILL);
  chaos_progress_ = progress;
}

bool Supervisor::AllFinished() const {
  return std::all_of(kids_.begin(), kids_.end(), [](const Child& c) { return c.finished; });
}

void Supervisor::AbortAll() {
  writes_.RaiseAbort();
  const int64_t deadline = shm::MonotonicNs() + kLeaveNs;
  for (;;) {
    const bool any =
        std::any_of(kids_.begin(), kids_.end(), [](const Child& c) { return c.running; });
    const int64_t left_ms = (deadline - shm::MonotonicNs()) / 1'000'000;
    if (!any || left_ms <= 0) break;
    PollExited(static_cast<int>(std::min<int64_t>(left_ms, 50)));
  }
  KillAll();
}

void Supervisor::KillAll() {
  for (int r = 0; r < static_cast<int>(kids_.size()); ++r) {
    Child& c = kids_[r];
    if (!c.running) continue;
    kill(c.pid, SIGKILL);
    // Bounded: a SIGKILLed process is reaped by the kernel without its cooperation.
    waitpid(c.pid, &c.status, 0);
    c.running = false;
    stats_.SetUp(r, false);
    close(c.pidfd);
    c.pidfd = -1;
  }
}

}  // namespace shmtrain::master
