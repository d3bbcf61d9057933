// What the master reads of a training while its workers run, shared by the units of the run
// loop (supervisor, checkpoint policy, validation protocol, progress line, summary) and by the
// metrics endpoint. Every read is a load through shm/layout.h's accessors (relaxed, acquire,
// or seq_cst for the sync phases) or nn::SharedAccess (relaxed): nothing here waits for a
// worker or takes a lock, and a value may be a moment old.
#pragma once

#include <cstdint>
#include <vector>

#include "shm/segment.h"

namespace shmtrain::master {

// Updates applied so far, as the run's kind reads them (RunKind::Progress): sync steps every
// rank completed, or async param_version.
int64_t Progress(const shm::Segment& seg);

// Samples processed so far by every worker, summed over their blocks.
uint64_t TotalSamples(const shm::Segment& seg);

// The parameters after `step` once no worker and no exchange thread runs (the run's end reads
// them after its Stop step): sync W[step % 2], async the one buffer, read with relaxed atomic
// loads as CopyParamsAsync reads it, as every read of a buffer that threads of this process
// have written with atomics (the parameter server's merges, master/hosts/param_server.h).
std::vector<float> ParamsAfter(const shm::Segment& seg, int64_t step);

// The checksum of the state the run starts from (config.first_step): the parameters as the
// run's kind reads them (async: its one buffer, whatever the step) and the optimizer state of
// that step. Before any worker starts (the hosts' agreement, master/run/run.cc).
uint32_t StartStateCrc(const shm::Segment& seg);

// Async: a copy of W read while the workers update it (each element is some recent value),
// and in *progress the Progress() read just before it.
std::vector<float> CopyParamsAsync(const shm::Segment& seg, int64_t* progress);

}  // namespace shmtrain::master
