// One mpirun job of `shmtrain launch` (master/launch/launch.h), watched through what its host
// masters report (master/log/report.h) until mpirun has ended.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "master/launch/placement.h"
#include "shmtrain/status.h"

namespace shmtrain::master::launch {

// What a job is started with.
struct JobSpec {
  std::vector<std::string> argv;  // mpirun's command line, without the report's address
  std::vector<int> rank_slot;     // Placement::rank_slot: where each rank runs
  std::string report_host;        // the address the host masters reach this launcher at
  // Called when rank 0 says it has finished its first step (monotonic ns).
  std::function<void(int64_t)> on_training;
  // Called when a host master says hello: its rank and name ("host 1 (node-b)").
  std::function<void(int, const std::string&)> on_hello;
};

// How a job ended.
struct JobEnd {
  std::vector<RankEnd> ranks;     // by rank
  std::vector<SavedState> saved;  // the stop checkpoints the ranks reported, with their slots
  // Async across hosts: the stop states the ranks reported (master/launch/recover.h).
  std::vector<SavedState> async_states;
  int64_t lost_ns = 0;    // monotonic ns: the first rank gone without a word, or the first
                          // rank's failed exit (0: neither)
  int mpirun_status = 0;  // waitpid's status of mpirun
  bool stopped = false;   // the launcher was stopped by a signal (g_stop_signal)
};

// Runs mpirun and watches the job until mpirun ends. A rank gone without a word makes the
// launcher ask mpirun (SIGTERM) to end the rest of the job if it has not within a few seconds,
// and a stop signal to the launcher asks at once; mpirun is killed if it does not end within
// its bound. kResource when the report socket or mpirun cannot be had.
Status RunJob(const JobSpec& spec, JobEnd* end);

}  // namespace shmtrain::master::launch
