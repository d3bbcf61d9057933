// The model spec a worker reads from the segment's RunConfig.
#pragma once

#include "shm/layout.h"
#include "shmtrain/model_spec.h"

namespace shmtrain::worker {

inline ModelSpec SpecOf(const shm::RunConfig& c) {
  ModelSpec s;
  s.layers.assign(c.layers, c.layers + c.num_layers);
  s.activation = static_cast<Activation>(c.activation);
  s.loss = static_cast<Loss>(c.loss);
  return s;
}

}  // namespace shmtrain::worker
