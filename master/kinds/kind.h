// The kinds of run, one object each: sync, sync across hosts, async, async across hosts.
//
// A kind owns every rule of the master that differs between them, in a few roles, each unit
// of the master taking the one it needs: its checks (KindChecks: the options it refuses), its
// plan (KindPlan: this host's share of the run, what its workers and files count, the unit
// that combines the hosts), the segment protocol (SegmentProtocol: progress, the final
// parameters, a checkpoint's pause, copy and resume), validation (EvalRules: what it takes
// and how an early stop ends the workers), deaths (KindDeaths: the supervisor's rules) and
// the report (KindReport: the summary line, the metrics' rule label, staleness). The rest of
// the master asks the run's kind, never the mode.
//
// KindOf (master/kinds/kind.cc) is the one place that picks the kind from --mode and the
// count of hosts: RunTrain (master/run/run.h) asks it once and hands the kind on. Each kind is
// one file beside it (sync.cc, sync_hosts.cc, async.cc, async_hosts.cc). The workers' side of
// a kind is its loop (worker/sync_loop.h, worker/async_loop.h), picked from the segment
// header's mode word by the workers' table (worker/worker_kinds.h). So a new kind of run is
// one file and one line on each side: its class and its line in kind.cc's table, its loop and its
// line in the workers' table; a kind that --mode can name also appends its value and name to
// Mode (include/shmtrain/options.h), and its own flags are flags (master/flags/flags.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "master/log/log.h"
#include "master/files/checkpoint.h"
#include "master/unit/run_figures.h"
#include "master/unit/run_unit.h"
#include "master/unit/segment_writes.h"
#include "monitoring/run_stats.h"
#include "shm/segment.h"
#include "shmtrain/optim_config.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

class Hosts;

// This host's share of a run (the whole run on one host), counted as its workers count.
struct HostPlan {
  int64_t steps = 0;             // the steps (or updates) this host's workers run
  int64_t eval_every = 0;        // validation every this many of them; 0 = none
  int64_t checkpoint_every = 0;  // a checkpoint every this many of them; 0 = none
};

// The unit that combines the hosts of a run (null on one host), and the sync point a
// checkpoint waits for across hosts (null when a checkpoint needs none).
struct CrossHostUnit {
  std::unique_ptr<RunUnit> unit;
  CheckpointCut* cut = nullptr;
};

// The parameters one validation evaluates, taken from the segment.
struct EvalSnapshot {
  int64_t step = 0;  // the step (or update) they are the parameters after
  std::vector<float> params;
};

// How an early stop decided at evaluation k ends the workers.
struct EarlyStopEnd {
  int64_t stop_eval = 0;  // the word the master writes (shm::RequestStop)
  std::string until;      // when training stops, for the log line
};

// What the supervisor does about the workers' ends that depends on the kind
// (master/run/supervisor.h). One per run; the supervisor's thread only.
class DeathRules {
 public:
  virtual ~DeathRules() = default;
  // Whether rank r, whose process exited cleanly (code 0), had finished its part of the run.
  virtual bool FinishedItsPart(int r) const = 0;
  // Rank r died before finishing its part: what it left half done is settled before its
  // replacement starts.
  virtual void Settle(int r) { (void)r; }
  // Every rank has finished its part and none runs: ok with *owed empty when the workers'
  // part is done; else the ranks to start again (each with the work it is owed written into
  // its block), or why the run cannot end well.
  virtual Status AllFinished(std::vector<int>* owed) = 0;
  // Updates lost to deaths mid-update (async), for the summary.
  virtual int64_t torn() const { return 0; }
};

// ---- The roles of a kind. Each unit of the master takes the one it needs.

// What the command line and the joined hosts decide: the flags only this kind's mode takes,
// and what it cannot run.
class KindChecks {
 public:
  virtual ~KindChecks() = default;
  // The flags only this kind's mode takes (refused in the others by CheckModeFlags).
  virtual std::span<const char* const> OwnFlags() const { return {}; }
  // What this kind's mode cannot run, checked once the command line is parsed (the count of
  // hosts is not known yet): kUsage naming the flag.
  virtual Status CheckOptions(const TrainOptions& o) const {
    (void)o;
    return Status::Ok();
  }
  // What this kind cannot run over o.host_count hosts, checked once they are joined.
  virtual Status CheckHosts(const TrainOptions& o) const {
    (void)o;
    return Status::Ok();
  }
};

// This host's share of the run: its steps, what its workers and files count, and the unit
// that combines the hosts.
class KindPlan {
 public:
  virtual ~KindPlan() = default;
  // This host's share of a run of `total` steps validated every `eval_every` (0: never), or
  // kUsage when the options leave a host nothing to do. May log a warning.
  virtual Status Plan(const TrainOptions& o, int64_t total, int64_t eval_every, Logger& log,
                      HostPlan* plan) const = 0;
  // The rows of one worker's minibatch at a global --batch of `batch` over `world` workers.
  virtual int64_t WorkerBatchRows(int64_t batch, int world) const = 0;
  // The optimizer state vectors a checkpoint of this kind holds.
  virtual int CheckpointStates(const OptimConfig& optim) const = 0;
  // Whether hosts other than 0 pause their workers for checkpoints (only host 0 writes).
  virtual bool EveryHostPausesForCheckpoints() const { return false; }
  // A checkpoint's step (the run's) as this host of `hosts` counts it, and back.
  virtual int64_t HostStep(int64_t run_step, int hosts) const {
    (void)hosts;
    return run_step;
  }
  virtual int64_t RunStep(int64_t host_step, int hosts) const {
    (void)hosts;
    return host_step;
  }
  // The unit combining the hosts; {} on one host.
  virtual CrossHostUnit StartCrossHost(const TrainOptions& o, SegmentWrites& seg,
                                       const std::shared_ptr<Hosts>& hosts,
                                       const std::shared_ptr<monitoring::RunStats>& stats) const {
    (void)o, (void)seg, (void)hosts, (void)stats;
    return {};
  }
};

// How the master reads the segment's state, and pauses the ranks for a checkpoint.
class SegmentProtocol {
 public:
  virtual ~SegmentProtocol() = default;
  // Updates applied so far: steps every rank completed, or the version counter.
  virtual int64_t Progress(const shm::Segment& seg) const = 0;
  // The parameters after `step` once no worker and no exchange thread runs.
  virtual std::vector<float> ParamsAfter(const shm::Segment& seg, int64_t step) const = 0;
  // Puts a resumed checkpoint into a fresh segment, with the protocol words of its step.
  virtual void ResumeInto(const Checkpoint& c, shm::Segment* seg) const = 0;
  // Whether the checkpoint at step `next` is due at this progress (then the policy waits for
  // AllPausedBefore).
  virtual bool CheckpointDue(int64_t progress, int64_t next) const = 0;
  // Every rank has arrived at its pause before `step`.
  virtual bool AllPausedBefore(const shm::Segment& seg, int64_t step) const = 0;
  // The state of a checkpoint at `step` while every rank is paused there, or (a stop) once
  // none runs; its step filled in.
  virtual Checkpoint CopyState(const shm::Segment& seg, int64_t step) const = 0;
  // Whether a stop signal writes a checkpoint (else the last periodic one stands).
  virtual bool CheckpointsOnStop() const { return true; }
};

// What validation takes from the workers, and how an early stop ends them.
class EvalRules {
 public:
  virtual ~EvalRules() = default;
  // The validation interval the workers see in the header (0: they take no snapshots).
  virtual int64_t WorkersEvalEvery(int64_t eval_every) const = 0;
  // Whether the ranks snapshot the parameters at each evaluation and wait for the master's
  // acks (shm::AckEval) to reuse the snapshot's room.
  virtual bool RanksWaitForEvals() const = 0;
  // The parameters of evaluation `index` (after step index x every) if they can be taken
  // now; false: not yet.
  virtual bool TakeSnapshot(const shm::Segment& seg, int64_t index, int64_t every,
                            EvalSnapshot* out) const = 0;
  // How an early stop decided at evaluation k ends the workers.
  virtual EarlyStopEnd StopAfter(int64_t k, int64_t every, int64_t total) const = 0;
};

// The supervisor's rules for this run's deaths (DeathRules above).
class KindDeaths {
 public:
  virtual ~KindDeaths() = default;
  virtual std::unique_ptr<DeathRules> MakeDeathRules(const shm::Segment& seg,
                                                     SegmentWrites& writes,
                                                     monitoring::WorkerStats& stats) const = 0;
};

// What the summary line, the metrics and the event file say that differs between the kinds.
class KindReport {
 public:
  virtual ~KindReport() = default;
  // The label of the async rule in the metrics and on the live page ("" when the kind has no
  // rule).
  virtual const char* RuleLabel(const TrainOptions& o) const = 0;
  // Whether the workers record the staleness of their updates (its histogram, mean and the
  // dropped updates are then reported).
  virtual bool ReportsStaleness() const { return false; }
  // The figures only this kind knows, put in at the run's end (several hosts: the totals
  // every host's work makes). batch: the global minibatch's rows.
  virtual void AddTotals(RunSummary* s, int64_t batch) const { (void)s, (void)batch; }
  // "steps" or "updates".
  virtual const char* StepsWord() const = 0;
  // Microseconds per step (or update).
  virtual double UsPerStep(const RunSummary& s) const = 0;
  // Where a step's time went, per worker (NaN where the kind does not measure it).
  virtual StepSplit SplitPerStep(const RunSummary& s) const {
    (void)s;
    return {};
  }
  // The kind's part of the summary line, and of its JSON event.
  virtual void AddText(const RunSummary& s, std::string* text) const { (void)s, (void)text; }
  virtual void AddJson(const RunSummary& s, JsonLine* j) const { (void)s, (void)j; }
};

// A kind of run: its roles, and what it is called.
class RunKind : public KindChecks,
                public KindPlan,
                public SegmentProtocol,
                public EvalRules,
                public KindDeaths,
                public KindReport {
 public:
  // What the workers run (the segment header's mode word, a checkpoint's).
  virtual Mode mode() const = 0;
  // "sync", "sync across hosts", ...: for messages.
  virtual const char* name() const = 0;
};

// The kind of a run of `mode` over `hosts` hosts: the one place that picks it.
const RunKind& KindOf(Mode mode, int hosts);
// The kind of the run whose segment has this configuration.
const RunKind& KindOf(const shm::RunConfig& c);

// The flags that only some modes take, refused in the others ("--rule: applies to async mode
// only"), in the order they are checked.
Status CheckModeFlags(const TrainOptions& o);

// What the command line alone decides of o's kind (before the hosts are joined): the flags of
// the other modes (CheckModeFlags), then what o.mode cannot run on any count of hosts.
Status CheckModeOptions(const TrainOptions& o);

// What the kind of o.mode over o.host_count hosts cannot run, once the hosts are joined.
Status CheckKindOnHosts(const TrainOptions& o);

}  // namespace shmtrain::master
