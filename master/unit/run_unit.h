// What every unit of a training run's loop shares (master/run/run_loop.h runs them): the unit's
// interface, what a round and the run's end show it, and the sync point of a checkpoint
// across hosts. Below the run, the kinds of run and the hosts, which each make units.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "master/unit/run_figures.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain {
struct Checkpoint;  // master/files/checkpoint.h
}

namespace shmtrain::master {

// A round's longest sleep when no unit asks for less: a worker's death wakes it anyway.
inline constexpr int kPollMs = 5;

// What every unit sees of one round, the same for all: read-only. A unit that writes a word
// of the segment (an ack, a release, the abort word) does it through the loop's writes().
struct RunView {
  const shm::Segment& seg;
  int64_t progress = 0;  // the kind's Progress(seg), read once after the round's sleep
  int64_t now_ns = 0;    // shm::MonotonicNs() then
};

// What a unit's round says of the run.
struct Verdict {
  bool ends = false;  // the run ends after this round
  Status status;      // when it ends: ok if the workers' part is done, else why it ends

  static Verdict GoOn() { return {}; }
  static Verdict Done() { return {true, Status::Ok()}; }
  // Goes on when s is ok; ends the run for s otherwise.
  static Verdict EndIf(Status s) {
    const bool ends = !s.ok();
    return {ends, std::move(s)};
  }
};

// How the run ended, shown to every unit at each step of the end.
struct RunEnd {
  const shm::Segment& seg;
  Status status{};  // ok: every worker has finished its part; else why the run ends
  // The rest only when the run is ending well, set by the loop after the Stop step:
  int64_t end_step = 0;         // Progress(): total_steps, or earlier after an early stop
  int64_t end_ns = 0;           // shm::MonotonicNs() at the end of the workers' part
  std::vector<float> params{};  // the parameters after end_step, or those a unit keeps instead
  RunSummary summary{};         // the summary line's figures, each from the unit that knows it
};

// One unit of the run loop. Every duty has a default that does nothing.
class RunUnit {
 public:
  virtual ~RunUnit() = default;
  // Before the first round. Not ok: the run ends for that reason (no round runs).
  virtual Status Start() { return Status::Ok(); }
  // How soon this unit wants the next round, in milliseconds.
  virtual int PollMs() const { return kPollMs; }
  // One round.
  virtual Verdict Tick(const RunView& view) {
    (void)view;
    return Verdict::GoOn();
  }
  // The steps of the run's end (above), in this order.
  virtual void Stop(RunEnd& end) { (void)end; }
  virtual void Collect(RunEnd& end) { (void)end; }
  virtual void Save(RunEnd& end) { (void)end; }
  virtual void Report(RunEnd& end) { (void)end; }
};

// Async across hosts (master/hosts/param_server.h): the hosts' sync point before a checkpoint.
class CheckpointCut {
 public:
  virtual ~CheckpointCut() = default;
  // Asked (again each round) once every rank of this host is paused before `step`: true once
  // every host has got there with all its updates at their owners, and this host's W holds
  // the run's parameters.
  virtual bool Cut(int64_t step) = 0;
  // A run that stopped on a failure: the state this host keeps for `shmtrain launch` to merge
  // with the other survivors' (master/hosts/async_state.h), encoded, with `run` (the run's
  // mode, fingerprint and optimizer) as its checkpoint, to which it adds this host's parameters
  // and step. False: none.
  virtual bool StopState(const Checkpoint& /*run*/, std::string* /*bytes*/) { return false; }
};

}  // namespace shmtrain::master
