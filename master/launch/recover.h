// `shmtrain launch`, async across hosts: the survivors' stop states of one job
// (master/hosts/async_state.h) merged into the job's --checkpoint, the state its relaunch
// resumes. The launcher reads the states where the host masters wrote them: on its own machine
// (or a disk it shares with them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "master/launch/placement.h"
#include "master/log/log.h"

namespace shmtrain::master::launch {

struct Recovered {
  int64_t step = -1;  // the run's update the merged state resumes at; -1: nothing merged
  int64_t lost = 0;   // the lost hosts' updates it lacks (at least)
};

// Merges `states` (the paths each survivor reported) into `checkpoint`, written whole or not
// at all, and removes the state files whatever happens to the merge. A state that cannot be
// read or merged is said and left out (its host's updates past its pushes count as lost).
// Logs what was merged ("async_recovered") or why nothing was.
Recovered RecoverAsync(const std::vector<SavedState>& states, const std::string& checkpoint,
                       Logger& log);

}  // namespace shmtrain::master::launch
