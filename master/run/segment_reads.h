// What the master reads of a training while its workers run, beside what the run's kind reads
// (master/kinds/kind.h, SegmentProtocol): shared by the units of the run loop (progress line,
// summary, event file) and the hosts' agreement. Every read is a load through shm/layout.h's
// accessors: nothing here waits for a worker or takes a lock, and a value may be a moment old.
#pragma once

#include <cstdint>

#include "master/kinds/kind.h"
#include "shm/segment.h"

namespace shmtrain::master {

// Samples processed so far by every worker, summed over their blocks.
uint64_t TotalSamples(const shm::Segment& seg);

// The checksum of the state the run starts from (config.first_step): the parameters as the
// run's kind reads them (async: its one buffer, whatever the step) and the optimizer state of
// that step. Before any worker starts (the hosts' agreement, master/run/run.cc).
uint32_t StartStateCrc(const shm::Segment& seg, const SegmentProtocol& protocol);

}  // namespace shmtrain::master
