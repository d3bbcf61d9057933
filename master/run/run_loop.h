// The master's run loop: a list of units, each owning one concern, run in one order.
//
// A training run is the list RunTrain (master/run/run.cc) hands to RunLoop. The loop owns the
// run's segment from the moment the run's start has filled it to the end of the run: units
// read it through a const view (segment(), RunView, RunEnd) and make their few writes through
// writes() (master/run/segment_writes.h, which names each with its unit). The loop:
//  1. starts each unit in list order (the supervisor starts the workers);
//  2. runs rounds. A round sleeps once, in the supervisor's poll() on the workers' pidfds (a
//     worker's end wakes it at once; else it wakes after the shortest wait any unit asks
//     for, PollMs), reads the progress and the clock once, and shows that view to every
//     unit in list order. A unit's round may end the run: a failure (a stop signal, a crash
//     loop, a divergence, a lost host, ...), or Done when the workers' part is over; the
//     units after it do not see that round;
//  3. ends, in a fixed sequence of four steps that the loop owns, each shown to every unit in
//     list order before the next step begins (RunEnd):
//       Stop     what still runs stops: the loop removes the segment's name first (the mapping
//                stays until the loop is destroyed), then the live line is cleared, a
//                cross-host thread ends (on a good end, once it has finished with every
//                host), and on a failure the workers are stopped;
//       Collect  the final state: the loop reads the parameters at the end step (a good end),
//                then units put in what they own instead or besides (the run's model across
//                hosts, the kept model of an early stop, the summary's figures);
//       Save     what the run writes: a checkpoint on a stop signal, the model;
//       Report   what the run prints: the loss lines still due, the summary line.
//     A unit may turn a good end into a failure at any step (a lost host, parameters that are
//     not finite, a model that cannot be written): the units and the steps after it see that.
//     So nothing is saved before every process and thread that could change the state has
//     stopped, and no step depends on where a unit of another concern stands in the list.
// Within a round or a step, the list is the order: where a unit stands says what it sees
// before and after it.
//
// The master never blocks on anything a worker can hold: the only sleep is the bounded
// poll(), and a unit's round reads published words or does bounded work of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "master/run/removed_on_death.h"
#include "master/run/run_summary.h"
#include "master/run/segment_writes.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// A round's longest sleep when no unit asks for less: a worker's death wakes it anyway.
inline constexpr int kPollMs = 5;

// What every unit sees of one round, the same for all: read-only. A unit that writes a word
// of the segment (an ack, a release, the abort word) does it through the loop's writes().
struct RunView {
  const shm::Segment& seg;
  int64_t progress = 0;  // Progress(seg), read once after the round's sleep
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

class RunLoop {
 public:
  // Takes the run's segment, filled and not yet seen by a worker, and the registration of its
  // name for main's last-resort handlers (master/run/signals.h), which the end's Stop step drops
  // with the name. The mapping goes when the loop is destroyed: declare the units after it.
  RunLoop(shm::Segment seg, RemovedOnDeath name);
  RunLoop(const RunLoop&) = delete;
  RunLoop& operator=(const RunLoop&) = delete;

  const shm::Segment& segment() const { return seg_; }
  SegmentWrites& writes() { return writes_; }

  // sleep(ms): a round's one sleep, at most ms milliseconds (Supervisor::Wait). units: the
  // run's units in their order; a null entry (a unit this run does not have) is left out.
  // Starts, runs rounds until a unit ends the run, and ends it. Ok when the workers' part is
  // done and no step of the end failed; else the reason the run ended.
  Status Run(std::function<void(int)> sleep, std::vector<RunUnit*> units);

 private:
  Status Rounds(const std::function<void(int)>& sleep, const std::vector<RunUnit*>& units);
  Status End(Status status, const std::vector<RunUnit*>& units);

  shm::Segment seg_;
  RemovedOnDeath name_;
  SegmentWrites writes_{seg_};
};

}  // namespace shmtrain::master
