// `shmtrain launch --hosts a,b,c [--min-hosts N] [--max-relaunches K] -- train ...`: a small
// supervisor of Open MPI, in the spirit of torchrun's agent. It runs the training job under
// mpirun (one host master per entry of --hosts), learns from the job itself which host
// masters ended and which were lost (master/log/report.h: each host master reports to it over
// TCP; a connection that closes without an exit is a loss), and when a host is lost relaunches
// the same job, the same H host masters, on the slots left (master/launch/placement.h),
// resuming from the newest stop checkpoint a survivor wrote: a sync run loses no completed
// step and ends with the bits of a run that lost no host. It gives up, exit 7, below
// --min-hosts or after --max-relaunches relaunches.
//
// mpirun is its child, in a process group of its own, with SIGUSR1 when the launcher dies
// (PR_SET_PDEATHSIG; mpirun passes it on to every host master, which stops as on any stop
// signal): the job never goes on headless. A stop signal to the launcher stops every host
// master (each checkpoints where it stopped), and no relaunch follows.
// Open MPI's own settings pass through from the environment (OMPI_MCA_*); every SHMTRAIN_*
// variable reaches the host masters (-x).
#pragma once

#include "master/flags/command.h"
#include "master/log/log.h"

namespace shmtrain::master::launch {

// The exit code of the whole launch: the job's (host 0's) when it ended by itself, 7 when the
// launcher gave up, 128 + n on a stop signal n, else the code of what failed.
int RunLaunch(const Command& cmd, Logger& log);

}  // namespace shmtrain::master::launch
