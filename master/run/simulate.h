// `shmtrain simulate`: a deterministic, single-process model of M asynchronous workers.
//
// M workers in round robin, in the steady state of an async system: update u is applied by
// worker u mod M with the gradient it computed on the parameters it read M-1 updates
// earlier (w_bak = w_{u-M+1}; the first M-1 updates read w_0), on minibatch u of one seeded
// stream over the training rows. Each worker keeps its own MeanSquare (dc-asgd-a), as real
// workers do. M = 1 is plain sequential SGD whatever the rule (w = w_bak: no correction). The
// same seed gives the same bits, so the rules can be compared exactly as in the paper's
// tables.
#pragma once

#include <vector>

#include "master/log/log.h"
#include "master/run/run.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

struct SimResult {
  double train_loss = 0;  // mean loss over the training rows after the last update
  double val_loss = 0;
  double val_error = 0;  // xent: 1 - accuracy; mse: RMSE
};

// One simulated run of `updates` updates with M workers and the rule of `opts`, from
// `init_from` (ReadInitFrom's parameters) when opts has --init-from, else from --init's.
SimResult Simulate(const TrainOptions& opts, const RunData& data, int workers, AsyncRule rule,
                   const std::vector<float>& init_from);

// The command: --workers M[,M...]; --compare runs every rule and sequential SGD and prints one
// table (rules by M); otherwise one line per M for --rule.
Status RunSimulate(const TrainOptions& opts, const std::vector<int>& workers, bool compare,
                   Logger& log);

}  // namespace shmtrain::master
