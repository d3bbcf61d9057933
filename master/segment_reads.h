// What the master reads of a training while its workers run, shared by the units of the run
// loop (supervisor, checkpoint policy, validation protocol, progress line, summary) and by the
// metrics endpoint. Every read is a relaxed or acquire load through shm/layout.h's accessors
// (or nn::SharedAccess): nothing here waits for a worker or takes a lock, and a value may be a
// moment old.
#pragma once

#include <cstdint>
#include <vector>

#include "shm/segment.h"

namespace shmtrain::master {

// Updates applied so far: sync steps every rank completed, or async param_version.
int64_t Progress(const shm::Segment& seg);

// Samples processed so far by every worker, summed over their blocks.
uint64_t TotalSamples(const shm::Segment& seg);

// The parameters after `step` once no worker runs: sync W[step % 2], async the one buffer, read
// as CopyParamsAsync reads it: across hosts the parameter server's thread still merges pulled
// parts into W after the workers have finished, until its Finish (master/param_server.h).
std::vector<float> ParamsAfter(const shm::Segment& seg, int64_t step);

// Async: a copy of W read while the workers update it (each element is some recent value),
// and in *progress the Progress() read just before it.
std::vector<float> CopyParamsAsync(const shm::Segment& seg, int64_t* progress);

}  // namespace shmtrain::master
