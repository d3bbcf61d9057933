// The async-mode loop of one worker (DC-ASGD; equations in nn/update.h and docs/async.md).
//
// Repeat until the run's update budget is claimed:
//   hold an update ticket u (a predecessor's, else claimed from Header.claimed); its
//     minibatch is minibatch u of the run's one seeded stream (the sync loop's BatchPlan);
//   read v_read = param_version (acquire), then snapshot W element by element (relaxed):
//     the snapshot is w_bak, the paper's backup of what this worker pulled;
//   compute the mean gradient g of minibatch u at w_bak (non-finite: exit kWorkerDiverged);
//   if param_version - v_read > max_staleness (when set): drop g, count it, recompute u;
//   raise `applying`, apply the rule to W element by element with relaxed atomic loads and
//     stores (other workers do the same at the same time: Hogwild-style, no lock), advance
//     param_version (release), release the ticket, lower `applying`;
//     tau = the version this update got - v_read.
// The ticket protocol and what a death at each point costs: worker/async_loop.cc.
// Each rank keeps its own MeanSquare (dc-asgd-a) in its gradient slot, which async mode does
// not otherwise use, so a replacement worker continues with it.
#pragma once

#include <cstdint>

#include "shm/segment.h"
#include "worker/run_model.h"

namespace shmtrain::worker {

// Runs until the update budget is claimed; returns a WorkerExit code.
int RunAsync(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation);

}  // namespace shmtrain::worker
