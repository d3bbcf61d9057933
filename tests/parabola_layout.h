// A laid-out segment header for the parabola's 1-5-1 network on its 50 rows, 10 steps: where
// the tests that need a real segment, but no real run, start from (tests/layout_test.cc,
// tests/run_units_test.cc). The creator is this process.
#pragma once

#include <unistd.h>

#include <cstdint>

#include <cstdio>

#include "shm/layout.h"
#include "shm/segment.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/options.h"

namespace shmtrain::test {

inline shm::Header ParabolaLayout(Mode mode, int workers, uint32_t states,
                                  int64_t eval_every = 0) {
  shm::Header h{};
  shm::RunConfig& c = h.config;
  c.mode = static_cast<uint32_t>(mode);
  c.input_shape[0] = c.input_shape[1] = c.input_shape[2] = 1;
  std::snprintf(c.model, sizeof c.model, "%s", "linear(5),tanh,linear(1)");
  c.workers = static_cast<uint32_t>(workers);
  c.hosts = 1;
  c.param_count = ModelSpec::Mlp({1, 5, 1}, Activation::kTanh, Loss::kMse).ParamCount();
  c.rows = 50;
  c.features = 1;
  c.total_steps = 10;
  c.optim.lr = 0.01;
  c.optim.num_states = states;
  c.barrier_timeout_s = 5;
  c.master_pid = getpid();
  c.fault_rank = -1;
  c.fault_step = -1;
  c.fault_incarnations = 0;
  c.eval_every = eval_every;
  c.snapshots = 2;
  h.stop_eval = shm::kNoStop;
  h.creator_pid = getpid();
  h.creator_start_time = shm::ProcessStartTime(getpid());
  shm::ComputeLayout(&h);
  return h;
}

}  // namespace shmtrain::test
