// The supervisor: the master's view of its worker processes, and what it does when one ends.
//
// Failure model (docs/failures.md, "Failure model"):
//  - A death is seen at once: the supervisor sleeps only in poll() on the workers' pidfds.
//  - A dead or hung worker is replaced in place: the same rank, incarnation + 1. Sync: the
//    replacement resumes from the phase in its block and redoes only that phase; its peers
//    simply keep waiting at the barrier (deadline-bounded), since nothing they did depends on
//    the dead rank's unfinished phase. Async: the others never stop; the replacement takes
//    over the update ticket its predecessor held; a worker killed while applying (its
//    `applying` flag still up) is settled as applied or torn, and its ticket is cleared so
//    it is not redone. What differs between the kinds of run is their DeathRules
//    (master/kinds/kind.h; master/kinds/sync.cc, master/kinds/async.cc).
//  - A hung worker (no heartbeat for heartbeat_timeout) is SIGKILLed and replaced (reason hang).
//  - More than max_restarts restarts within restart_window (chaos kills excepted), or more
//    than max_restarts in a row while the kind's Progress() (master/kinds/kind.h) stays put,
//    is a crash loop: the run ends with a message naming the ranks and reasons.
//  - A worker that exits on a barrier timeout is usually a victim: the rank it waited for
//    sent no heartbeat for about the barrier timeout. That rank is killed as hung and
//    replaced; the victim is restarted without counting against the crash-loop budget.
//  - A worker that exits kWorkerDiverged ends the run at once (Status::Diverged).
//  - Chaos (chaos_every > 0): the supervisor itself SIGKILLs a random worker at random
//    moments (uniform in [0.5, 1.5] x chaos_every apart, and never twice at one value of
//    Progress(): the run always moves between two kills), for demos and soak tests.
//  - The workers' part is done when every worker has ended it cleanly; async, once the
//    interrupted updates are settled and none is owed (or an early stop was asked for).
// The supervisor never blocks on anything a worker holds: every wait is a bounded poll(), and
// waitpid() only after the child has exited or been SIGKILLed.
//
// A unit of the run loop (master/run/run_loop.h), and its clock: each round sleeps in Wait().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "master/log/log.h"
#include "master/kinds/kind.h"
#include "master/run/divergence.h"
#include "master/run/launcher.h"
#include "master/run/run_loop.h"
#include "master/unit/segment_writes.h"
#include "monitoring/run_stats.h"
#include "nn/rng.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

struct SupervisorOptions {
  int64_t heartbeat_timeout_ns = 30'000'000'000;
  int max_restarts = 10;
  int64_t restart_window_ns = 60'000'000'000;
  int64_t chaos_every_ns = 0;  // 0 = no chaos
  uint64_t chaos_seed = 1;
  // What a divergence is blamed on: the flag it most likely comes from, or the resumed state.
  DivergenceCause divergence;

  // The options' (--heartbeat-timeout, --max-restarts, --restart-window, --chaos-*).
  static SupervisorOptions For(const TrainOptions& o, const DivergenceCause& divergence);
};

class Supervisor final : public RunUnit {
 public:
  // stats: the workers' part of the run's metrics (monitoring/run_stats.h), written here only.
  // kind: the run's (its progress and its rules for deaths); must outlive the supervisor.
  Supervisor(const RunKind& kind, const shm::Segment& seg, SegmentWrites& writes,
             Launcher& launcher, Logger& log, monitoring::WorkerStats& stats,
             const SupervisorOptions& opts);
  ~Supervisor() override;  // SIGKILLs and reaps whatever still runs
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts every worker.
  Status Start() override;
  // The round's sleep: waits up to timeout_ms for a worker to end, and reaps those that did.
  void Wait(int timeout_ms);
  // Replaces the workers that ended (or hung), fires chaos. Ends the run when it must (a crash
  // loop, a divergence, a worker that cannot start), and Done when the workers' part is.
  Verdict Tick(const RunView& view) override;
  // A failure: abort word up, a bounded wait for the workers to leave, SIGKILL for the rest.
  // A good end: the restarts, torn updates and recoveries into the summary.
  void Stop(RunEnd& end) override;     // a failure: every worker stopped
  void Collect(RunEnd& end) override;  // a good end: restarts, torn updates, recoveries

  int64_t restarts() const { return restarts_; }
  int64_t torn_updates() const { return deaths_->torn(); }
  // Seconds from each death to the run's progress moving on, in order.
  const std::vector<double>& recoveries() const { return recoveries_; }

 private:
  struct Child {
    pid_t pid = -1;
    int pidfd = -1;
    bool running = false;
    bool finished = false;
    int status = 0;
    uint32_t incarnation = 0;
    int64_t started_ns = 0;
    const char* kill_reason = nullptr;  // "hang" or "chaos" when the supervisor killed it
  };
  struct Restart {
    int64_t at_ns;
    int rank;
    std::string why;
  };
  static std::string Who(const std::deque<Restart>& failures);
  // Records a failure against the crash-loop budget; not ok when the budget is spent.
  Status CountFailure(const Restart& failure, const std::string& what, int64_t progress);
  struct PendingRecovery {
    int64_t died_ns;
    int64_t progress;
    int rank;
  };

  Status StartRank(int rank, uint32_t incarnation);
  bool Reap(int rank);
  // Waits up to timeout_ms for running workers to end; reaps them and returns their ranks.
  std::vector<int> PollExited(int timeout_ms);
  // A clean exit at the end of the rank's part (its last step, or the early stop's).
  bool FinishedItsPart(int rank) const;
  Status OnExit(int rank);
  // Why a worker that did not finish its part ended (its exit code, -1 if killed): killed by
  // chaos, or as hung, or (a barrier timeout) a victim of a silent peer, which is killed now;
  // `what` says so for the log and the messages.
  struct Death {
    bool chaos = false, hang = false, victim = false;
    std::string what;
  };
  Death WhyDied(int rank, int code, int64_t now, int64_t progress);
  // Starts the next incarnation of a rank that died, counted as a restart for `reason`, with
  // its recovery pending from `now` at `progress`.
  Status RestartRank(int rank, monitoring::RestartReason reason, const std::string& what,
                     int64_t progress, int64_t now);
  void CheckHangs(int64_t now);
  // Barrier timeout: SIGKILLs (as "hang") every running rank whose heartbeat is older than
  // about the barrier timeout; returns them as "worker a, worker b" ("" if none).
  std::string KillSilent(int64_t now);
  void MaybeChaos(int64_t now, int64_t progress);
  // Every worker has ended its part cleanly.
  bool AllFinished() const;
  // Once AllFinished(): Done, unless the kind's rules find work still owed (async: updates
  // torn by deaths), which the ranks they name are started again to do.
  Verdict WorkDone();
  // Abort word up, a bounded wait for the workers to leave, SIGKILL for the rest.
  void AbortAll();
  void KillAll();

  const SegmentProtocol& protocol_;
  const shm::Segment& seg_;
  SegmentWrites& writes_;
  Launcher& launcher_;
  Logger& log_;
  monitoring::WorkerStats& stats_;
  SupervisorOptions opts_;
  // The kind's rules for deaths (master/kinds/kind.h): a rank's part done, what a death leaves
  // half done, work still owed.
  std::unique_ptr<DeathRules> deaths_;
  std::vector<Child> kids_;
  std::vector<int> exited_;     // ranks reaped by Wait(), for the next Tick()
  std::deque<Restart> window_;  // restarts (chaos excepted) within restart_window
  // Consecutive counted restarts at one value of Progress(): more than max_restarts of them
  // is a crash loop too, however slowly they come.
  std::deque<Restart> stalled_;
  int64_t stall_progress_ = -1;
  int64_t last_hang_kill_ns_ = INT64_MIN / 2;  // when the last rank was killed as hung
  std::vector<PendingRecovery> pending_;
  std::vector<double> recoveries_;
  int64_t restarts_ = 0;
  nn::Rng chaos_rng_;
  int64_t next_chaos_ns_ = 0;
  int64_t chaos_progress_ = -1;  // Progress() at the last chaos kill
};

}  // namespace shmtrain::master
