// The segment header a run starts from: what the workers read of the run (RunConfig), laid out
// (shm/layout.h). Flags the workers read write their own RunConfig fields (FlagDef::to_workers,
// master/flags/flags.h); what flags resolve to (the model, the optimizer, the run's length, the
// validation steps) and what no flag says (the data's shape, this host, spinning) is written
// here.
#pragma once

#include <cstdint>

#include "master/kinds/kind.h"
#include "shm/layout.h"
#include "shmtrain/optim_config.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// The header of a run of `total_steps` updates on rows x features, validating every
// `eval_every` steps (0: never), created by this process. total_size is 0 when the layout does
// not fit in 64 bits (shm::ComputeLayout).
// The mode word and the workers' validation interval are the run's kind's.
shm::Header MakeHeader(const RunKind& kind, const TrainOptions& o, const OptimConfig& optim,
                       int64_t rows, int features, int64_t total_steps, int64_t eval_every);

// The steps between validations: 0 without held-out data; --eval-every, else an epoch with a
// batch, else every --log-every steps (50 when that is 0).
int64_t EvalEvery(const TrainOptions& o, int64_t rows);

// The workers' own check of the run configuration (shm::CheckRunConfig, data::CheckRunOptions)
// on a header this run builds: what they would refuse is kUsage here, naming the flag or file.
Status CheckConfig(const TrainOptions& o, const shm::Header& h);

// The segment of a run of o on rows x features, before the data is read (the data pipeline's
// RunSizing::segment_bytes, data/pipeline.h): its configuration checked as the workers will
// (CheckConfig), and its size in *bytes.
Status SegmentBytes(const RunKind& kind, const TrainOptions& o, int64_t rows, int features,
                    uint64_t* bytes);

}  // namespace shmtrain::master
