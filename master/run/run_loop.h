// The master's run loop: a list of units, each owning one concern, run in one order.
//
// A training run is the list RunTrain (master/run/run.cc) hands to RunLoop. The loop runs on
// the run's segment, which the run's start made and filled and holds to the end of the run
// (master/run/start.h): units read it through a const view (segment(), RunView, RunEnd) and make
// their few writes through writes() (master/unit/segment_writes.h, which names each with its unit).
// The loop:
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
//                stays until the start that holds it is destroyed, after the loop and every
//                unit), then the live line is cleared, a
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

#include "master/kinds/kind.h"
#include "master/unit/removed_on_death.h"
#include "master/unit/run_unit.h"
#include "master/unit/segment_writes.h"
#include "shm/segment.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

class RunLoop {
 public:
  // On the run's segment, filled and not yet seen by a worker, and the registration of its
  // name for main's last-resort handlers (master/run/signals.h), which the end's Stop step drops
  // with the name. Both must outlive the loop and its units (the start holds them, declared
  // before both: the mapping goes after every unit). protocol: the run's kind's reads of its
  // progress and final parameters (must outlive it).
  RunLoop(shm::Segment& seg, RemovedOnDeath& name, const SegmentProtocol& protocol)
      : seg_(seg), name_(name), protocol_(protocol) {}
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

  shm::Segment& seg_;
  RemovedOnDeath& name_;
  const SegmentProtocol& protocol_;
  SegmentWrites writes_{seg_};
};

}  // namespace shmtrain::master
