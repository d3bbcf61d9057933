// What both worker loops share: the model spec from the segment, barrier exit codes.
#pragma once

#include "shm/barrier.h"
#include "shm/layout.h"
#include "shmtrain/status.h"
#include "shmtrain/model_spec.h"

namespace shmtrain::worker {

inline ModelSpec SpecOf(const shm::RunConfig& c) {
  ModelSpec s;
  s.layers.assign(c.layers, c.layers + c.num_layers);
  s.activation = static_cast<Activation>(c.activation);
  s.loss = static_cast<Loss>(c.loss);
  return s;
}

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
