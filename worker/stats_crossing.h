// Batch norm's statistics across the ranks of a sync run (nn::StatsCrossing): each crossing
// writes this rank's sums into its slot's statistics, publishes their sequence number and
// waits, within the barrier's deadline, for every rank's; then adds all ranks' in rank order,
// so every rank gets the same bits (the protocol: shm/layout.h, Slot's statistics). Several
// hosts: the wait is for the master's combiner instead, which adds this host's ranks' sums in
// rank order, every host's in host order, and puts them in GStats (master/hosts/combiner.h).
#pragma once

#include <cstdint>

#include "nn/layer.h"
#include "shm/barrier.h"
#include "shm/segment.h"

namespace shmtrain::worker {

class SlotCrossing final : public nn::StatsCrossing {
 public:
  SlotCrossing(shm::Segment& seg, int rank, uint32_t incarnation, shm::PhaseBarrier& barrier,
               int64_t timeout_ns);
  // The crossings that follow are step t's, numbered from 1.
  void BeginStep(int64_t t);
  void Sum(int64_t offset, double* sums, int64_t count) override;
  // kOk, or how a crossing's wait ended (the pass's results are then meaningless: the rank
  // exits with it). A failed crossing makes the step's later ones return at once.
  shm::PhaseBarrier::Result result() const { return result_; }
  // The sums every crossing of the current step gave, read again in the update phase into out
  // (stats_count doubles): every rank's statistics added up in rank order, or, several hosts,
  // GStats (whole once the step's combine is published: combined_step).
  static void AddUp(const shm::Segment& seg, double* out);

 private:
  shm::Segment& seg_;
  const int rank_;
  const uint32_t incarnation_;
  const int P_;
  shm::PhaseBarrier& barrier_;
  const int64_t timeout_ns_;
  const uint64_t per_step_;
  const double* const global_;  // GStats (several hosts), else null
  int64_t step_ = 0;
  uint64_t next_ = 0;
  shm::PhaseBarrier::Result result_ = shm::PhaseBarrier::Result::kOk;
};

}  // namespace shmtrain::worker
