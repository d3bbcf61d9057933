// What both worker loops share: the model spec from the segment, barrier exit codes.
#pragma once

#include "nn/layer.h"
#include "shm/barrier.h"
#include "shm/layout.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::worker {

// The segment's model; Segment::Validate has checked that its text parses and resolves.
inline ModelSpec SpecOf(const shm::RunConfig& c) {
  ModelSpec s;
  s.input = {c.input_shape[0], c.input_shape[1], c.input_shape[2]};
  const Status parsed = nn::ParseModelText(c.model, &s.layers);
  SHMTRAIN_CHECK(parsed.ok(), "a validated segment's model text: " + parsed.message());
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
