// What the run's start (master/run.cc) shares with its data preparation (master/run_data.cc,
// whose entry points are in master/run.h). Internal to the master.
#pragma once

#include "shm/layout.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// The workers' own check of the run configuration (shm::CheckRunConfig) on a header this run
// builds: what they would refuse is kUsage here, naming the flag or the file behind it.
Status CheckConfig(const TrainOptions& o, const shm::Header& h);

}  // namespace shmtrain::master
