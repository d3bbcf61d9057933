// What the master reads of a training while its workers run, shared by the units of the run
// loop (checkpoint policy, validation protocol, progress line, summary). Every read is a
// relaxed or acquire load through shm/layout.h's accessors (or nn::SharedAccess): nothing here
// waits for a worker or takes a lock, and a value may be a moment old. Progress() is
// master/supervisor.h's.
#pragma once

#include <cstdint>
#include <vector>

#include "shm/segment.h"

namespace shmtrain::master {

// Samples processed so far by every worker, summed over their blocks.
uint64_t TotalSamples(const shm::Segment& seg);

// Async: a copy of W read while the workers update it (each element is some recent value),
// and in *progress the Progress() read just before it.
std::vector<float> CopyParamsAsync(const shm::Segment& seg, int64_t* progress);

}  // namespace shmtrain::master
