// The checkpoint policy of a training run: when a checkpoint is taken, what is copied out of
// the segment for it, how it is written, what a failed one costs, and how a run resumes from
// one. The file format itself is master/files/checkpoint.h's.
//
// Contract (docs/failures.md, "Checkpoints"):
//  - Schedule. --checkpoint-every N: one checkpoint at every multiple t of N above the step the
//    run started from and below its last step, none skipped. Sync ranks pause before step t
//    (worker/sync_loop.cc), async ranks before computing ticket t or any later one
//    (worker/async_loop.cc), until the master has copied the state and released them
//    (shm::ReleaseCheckpoint). After each attempt, written or not, the next one is the next
//    multiple of N: a failure never makes the policy retry at once.
//  - Copy. Sync: W[t%2] and the optimizer state of step t, which no rank can overwrite while
//    every rank is paused before step t. Async: W once every rank is paused at or past t (or
//    has no ticket left): the updates of every ticket below t and of none above, nothing in
//    flight; its step is the version then, t unless a death tore or lost a ticket below t
//    (made up past the end by the async DeathRules, master/kinds/async.cc). Params only (async
//    rules keep no optimizer state). The file is written after the release, so the ranks wait for
//    the copy and the master's next look, not for the disk, unless the next multiple comes before
//    the write of this one ends: then they wait for it (with small N the run goes at the pace of
//    the writes, about 15 ms each with fsync here).
//  - Write. Durable (master/files/output_write.h; the first into the room reserved when the run
//    started, CheckpointConfig::reservation), interruptible by a stop signal. --checkpoint is
//    a regular file (master/files/output_path.h, OutputKinds). Non-finite state is never written,
//    so the last finite checkpoint stays usable. A checkpoint that cannot be written does not end
//    the run: it is logged (`warning: ...`, JSON `checkpoint_failed`) and counted
//    (CheckpointStats::AddFailure); a written one is timed and logged (JSON
//    `checkpoint`).
//  - Stop. On a stop signal, once every worker is gone, the state at Progress() is written.
//  - Resume. A checkpoint resumes only the run that wrote it (optimizer settings, fingerprint,
//    mode, and a state
//    that fits the segment's layout), and only before that run's last step; it goes into a
//    fresh segment with the protocol words a run at its step would have.
//
// The optimizer state (its K vectors per buffer, nn/optimizer.h; Checkpoint::states in the file)
// is touched by no other part of the run loop, and only by four functions, none of which knows
// which optimizer runs: the kinds' CopyStepState and RestoreStepState
// (master/kinds/step_state.h), and StateFitsLayout and StateFinite in checkpoint_policy.cc.
//
// A unit of the run loop (master/run/run_loop.h): each round takes the checkpoint due; a run ended
// by a stop signal, or by another host lost, writes one at its end's Save step, once the workers
// are stopped.
//
// Threads: the run loop's only. The segment is read without locks: copies happen while every
// rank is paused (async ones through relaxed atomic loads, as the ranks write W).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "master/files/checkpoint.h"
#include "master/files/output_write.h"
#include "master/kinds/kind.h"
#include "master/log/log.h"
#include "master/plan/resolve.h"
#include "master/unit/run_unit.h"
#include "master/unit/segment_writes.h"
#include "monitoring/run_stats.h"
#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// When periodic checkpoints are due. Pure: no I/O, no segment.
class CheckpointSchedule {
 public:
  // every: --checkpoint-every, 0 = no periodic checkpoints. first_step: the step the run
  // starts from (0, or the resumed checkpoint's). total_steps: the run's last step.
  CheckpointSchedule(int64_t every, const SegmentProtocol& kind, int64_t first_step,
                     int64_t total_steps);
  // Whether the checkpoint at next() is due at this Progress(), as the kind says
  // (SegmentProtocol::CheckpointDue; the policy then waits for the ranks' pause). Never when
  // next() is at or after total_steps.
  bool Due(int64_t progress) const;
  // The attempt at `step` (>= next()) is made, written or failed: next() moves to the first
  // multiple of every above step.
  void Advance(int64_t step);
  // The step of the next periodic checkpoint; INT64_MAX when there are none.
  int64_t next() const { return next_; }

 private:
  int64_t every_;
  const SegmentProtocol& kind_;
  int64_t total_steps_;
  int64_t next_;
};

struct CheckpointConfig {
  std::string path;               // --checkpoint; "" = none (not even on a stop signal)
  int64_t every = 0;              // --checkpoint-every; 0 = on a stop signal only
  const RunKind* kind = nullptr;  // the run's (master/kinds/kind.h); not null
  int64_t first_step = 0;
  int64_t total_steps = 0;
  uint64_t fingerprint = 0;  // RunFingerprint() of the run, stored in every checkpoint
  std::string optimizer;     // nn::Describe of the run's OptimConfig, stored in every checkpoint
  // Async across hosts: every host pauses at every checkpoint's step (counted in its own
  // updates, `every` too) for the sync point, host 0 alone writes (path empty elsewhere), and
  // the file counts every host's updates (RunKind::RunStep). Null where the kind needs none.
  CheckpointCut* cut = nullptr;
  int hosts = 1;  // the run's count of hosts
  // Where the cut's state goes when the run stops on a failure (TrainOptions::stop_state_path);
  // "" for none.
  std::string stop_state_path;
  // The room taken for the first file when the run started (master/files/output_write.h); null:
  // none.
  OutputReservation* reservation = nullptr;

  // The run's, as its start resolved it (master/plan/resolve.h: this host's share, the
  // fingerprint, the optimizer), from first_step; cut and reservation as above.
  static CheckpointConfig For(const TrainOptions& o, const plan::Resolved& run, const RunKind& kind,
                              int64_t first_step, CheckpointCut* cut,
                              OutputReservation* reservation);
};

class CheckpointPolicy final : public RunUnit {
 public:
  // The checkpoints of seg's run (the policy writes released_step). seg, log and stats (the
  // checkpoints' part of the run's metrics) must outlive the policy.
  CheckpointPolicy(const CheckpointConfig& config, const shm::Segment& seg, SegmentWrites& writes,
                   Logger& log, monitoring::CheckpointStats& stats);
  CheckpointPolicy(const CheckpointPolicy&) = delete;
  CheckpointPolicy& operator=(const CheckpointPolicy&) = delete;

  // Takes the periodic checkpoint when it is due at view.progress and every rank is paused
  // before it, releases the ranks, then writes it. A failed write is logged and counted,
  // never ends the run.
  Verdict Tick(const RunView& view) override;
  // A run ended by a stop signal (kInterrupted): WriteOnStop().
  void Save(RunEnd& end) override;
  // On a stop signal, once no worker runs (the state is frozen; sync: W[t%2] at the lowest
  // completed step t is intact). Writes the state at Progress() and logs where it went;
  // Ok without writing when there is no --checkpoint.
  Status WriteOnStop();
  // Writes `state` (params, optimizer state and step filled in) as this run's checkpoint.
  // Not ok, logged and counted when the state is not finite or the file cannot be written.
  Status Write(Checkpoint state);
  // Async across hosts, a stop on a failure: the cut's state to stop_state_path (none when
  // there is no such path or the cut has none); a failure is logged and counted.
  Status WriteStopState();

  const CheckpointSchedule& schedule() const { return schedule_; }
  // The step of the last checkpoint written (first_step before any).
  int64_t last_written() const { return last_written_; }

 private:
  void Stamp(Checkpoint* c) const;  // the run's mode, fingerprint and optimizer
  CheckpointConfig config_;
  const shm::Segment& seg_;
  SegmentWrites& writes_;
  CheckpointSchedule schedule_;
  Logger& log_;
  monitoring::CheckpointStats& stats_;
  int64_t last_written_;
};

// --resume: loads the checkpoint at `path` and checks that it belongs to this run (the same
// optimizer settings, described by `optimizer` as nn::Describe does; its fingerprint and
// mode; a state that fits the segment laid out in `layout`) and is before total_steps. kData
// naming the file when it is damaged, kUsage when it is another run's (naming both optimizer
// settings when those differ, and what `other_run` says of the checkpoint's fingerprint, e.g.
// that it was written with another count of hosts or workers, when it says anything) or past
// the end.
Status LoadResume(const std::string& path, Mode mode, uint64_t fingerprint,
                  const std::string& optimizer, const shm::Header& layout, int64_t total_steps,
                  const std::function<std::string(uint64_t)>& other_run, Checkpoint* out);
// The same from the file's bytes, wherever they were read (under mpirun host 0 reads the file
// and sends them to the others); `path` only names the file in messages.
Status DecodeResume(const std::string& bytes, const std::string& path, Mode mode,
                    uint64_t fingerprint, const std::string& optimizer, const shm::Header& layout,
                    int64_t total_steps, const std::function<std::string(uint64_t)>& other_run,
                    Checkpoint* out);

}  // namespace shmtrain::master
