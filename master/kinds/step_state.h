// A step's state (the parameters and the optimizer's K state vectors, nn/optimizer.h) copied
// between a checkpoint (master/files/checkpoint.h) and the segment, whatever the optimizer:
// what the kinds' checkpoints and resumes are made of.
#pragma once

#include <cstdint>

#include "master/files/checkpoint.h"
#include "shm/segment.h"

namespace shmtrain::master {

// Into the buffers that step `step` reads (sync), or the single parameter buffer (async,
// step 0's: async runs keep no optimizer state).
void RestoreStepState(const Checkpoint& c, int64_t step, shm::Segment* seg);

// Sync: params and optimizer state of step `step` (buffers step % 2), as a checkpoint of that
// step. Only while no rank can write those buffers (all paused before step, or none running).
Checkpoint CopyStepState(const shm::Segment& seg, int64_t step);

}  // namespace shmtrain::master
