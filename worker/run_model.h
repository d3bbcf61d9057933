// The run's model as a worker reads it from its segment: once, before its loop, which is
// handed what was read (worker/worker_kinds.h). The segment's fingerprint (Segment::Attach) says
// that the configuration is the one the master sealed; the model is not checked again after
// this read, and nothing downstream parses its text or resolves its shapes again.
#pragma once

#include <vector>

#include "nn/layer.h"
#include "shm/layout.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::worker {

// The model of the run: its input, layers and loss, and each layer's output shape on that
// input (nn::ResolveShapes').
struct RunModel {
  ModelSpec spec;
  std::vector<Shape> shapes;
};

// Reads c's model into *out (c has passed Segment::Validate: its text ends in its field, its
// input's dimensions are in range): the text parsed (nn::ParseStoredModelText) and its shapes
// resolved, once; a loss this build knows; a row of X (`features`) as many values as the
// model's inputs; param_count and stats_count the layers' counts. Those counts size every
// region a loop reads and writes, and a fingerprint is no signature, so a header written by
// hand with a matching one is bounded here all the same. kData saying what is wrong; the
// worker exits kWorkerBadLayout with it.
Status ReadRunModel(const shm::RunConfig& c, RunModel* out);

}  // namespace shmtrain::worker
