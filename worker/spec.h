// What both worker loops share: whether the run crosses hosts, barrier exit codes, the
// augmentation of the training rows. (The model they share is read once: worker/run_model.h.)
#pragma once

#include <cstdint>

#include "data/augment.h"
#include "shm/barrier.h"
#include "shm/layout.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::worker {

// Whether the run is one of several hosts' (each host's sums then cross the hosts: the sync
// combiner, the async parameter server): the one place a worker loop asks.
inline bool AcrossHosts(const shm::RunConfig& c) { return c.hosts > 1; }

// The run's augmentation of its training rows (--augment, data/augment.h), as the segment
// holds it (data::CheckRunOptions, in the worker's read of its model, has checked it against
// the model's input). The epoch of a step (sync) or of a minibatch of the stream (async) is
// its number / steps_per_epoch, the run's BatchPlan's.
class RowAugment {
 public:
  RowAugment(const shm::RunConfig& c, Shape input, int64_t steps_per_epoch)
      : input_(input), seed_(c.seed), steps_per_epoch_(steps_per_epoch) {
    const Status s = data::AugmentSpec::Decode(c.augment, &spec_);
    SHMTRAIN_CHECK(s.ok(), "a validated segment's augmentation: " + s.message());
  }
  // --augment was given: rows are augmented into a buffer, else read in place.
  bool on() const { return !spec_.empty(); }
  // Training row `row` (its values at in) of step or minibatch `step`, augmented into out.
  void Row(int64_t step, int64_t row, const float* in, float* out) const {
    data::AugmentRow(spec_, seed_, step / steps_per_epoch_, row, input_, in, out);
  }

 private:
  data::AugmentSpec spec_;
  Shape input_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
};

// The worker's exit code for a barrier wait that did not complete.
inline int ExitFor(shm::PhaseBarrier::Result r) {
  switch (r) {
    case shm::PhaseBarrier::Result::kOk: return kWorkerOk;
    case shm::PhaseBarrier::Result::kAborted: return kWorkerAborted;
    case shm::PhaseBarrier::Result::kTimeout: return kWorkerBarrierTimeout;
    case shm::PhaseBarrier::Result::kOrphaned: return kWorkerOrphaned;
  }
  return kWorkerInternal;
}

}  // namespace shmtrain::worker
