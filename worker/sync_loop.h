// The sync-mode loop of one worker.
//
// Step t, for rank r of P (phase numbers are what r publishes in its WorkerBlock):
//   1. gradient: the gradient of r's share of step t's batch at parameters W[t%2], summed
//      over the share, goes into slot r; publish 2t+1; wait until every rank is at 2t+1.
//   2. update: r owns a slice of the parameter vector (64-byte aligned bounds). For each
//      element of its slice it sums the P slots in rank order (in float, one rounding per
//      term: the fixed order gives the same bits every run), scales the sum by 1 / the step's
//      sample count, and writes the updated parameters (and the optimizer's state vectors) into
//      W[(t+1)%2]; publish 2t+2; wait for every rank.
// Each phase reads only buffers nobody writes during it, so any phase can be redone: a rank
// resumes from the phase in its block.
#pragma once

#include <cstdint>

#include "shm/segment.h"
#include "worker/run_model.h"

namespace shmtrain::worker {

// Runs the loop to the end of the run; returns a WorkerExit code.
int RunSync(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation);

}  // namespace shmtrain::worker
