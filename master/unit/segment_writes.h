// What the master writes into a running training's segment: one method per word, each named
// with the unit that writes it. The run loop (master/run/run_loop.h) runs on the segment the
// run's start holds (master/run/start.h); its units read it through a const view (a
// `const shm::Segment&`, whose accessors give pointers to
// const: a store through it does not compile) and write through this, so the words the master
// writes while the workers run are listed here and nowhere else, but for the regions and words
// of the cross-host exchange threads, which ForExchange hands them.
//
// Every write while workers run is one of shm/barrier.h's or shm/layout.h's, with the memory
// order the protocol of that word gives (shm/layout.h names each word's writers and readers);
// SetFirstEvalAck's, before any worker starts, is plain.
#pragma once

#include <cstdint>

#include "shm/segment.h"

namespace shmtrain::master {

class SegmentWrites {
 public:
  explicit SegmentWrites(shm::Segment& seg) : seg_(seg) {}
  SegmentWrites(const SegmentWrites&) = delete;
  SegmentWrites& operator=(const SegmentWrites&) = delete;

  // The supervisor (master/run/supervisor.h): rank r's block before its next incarnation starts
  // (the old one is reaped, so nobody else writes these words then), and the abort word.
  void PrepareRank(int r, uint32_t incarnation);
  void RaiseAbort();

  // The async death rules (master/kinds/async.cc), for a rank that is not running: its commit
  // word (an interrupted update settled) and its ticket (cleared, or an owed update's).
  void SetCommit(int r, uint64_t commit);
  void SetTicket(int r, int64_t ticket);

  // The validation protocol (master/run/validation.h): the first ack (before any worker starts),
  // the acks of the snapshots taken, and the early stop's word.
  void SetFirstEvalAck(int64_t k);
  void AckEval(int64_t k);
  void RequestStop(int64_t stop_eval);

  // The checkpoint policy (master/run/checkpoint_policy.h): the ranks paused before `step` go on.
  void ReleaseCheckpoint(int64_t step);

  // The cross-host units (master/hosts/combiner.h, master/hosts/param_server.h): the regions and
  // words their exchange threads own, by the protocols their headers give.
  shm::Segment& ForExchange() { return seg_; }

 private:
  shm::Segment& seg_;
};

}  // namespace shmtrain::master
