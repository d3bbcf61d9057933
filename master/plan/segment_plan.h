// The segment a run starts from, planned: its header (what the workers read of the run,
// RunConfig, laid out: shm/layout.h), checked as the workers will check it, and the data
// pipeline's sizing of it. Flags the workers read write their own RunConfig fields
// (FlagDef::to_workers, master/flags/flags.h); what flags resolve to (the model, the optimizer,
// the run's length, the validation steps) and what no flag says (the data's shape, this host,
// spinning) is written here.
#pragma once

#include <cstdint>

#include "data/pipeline.h"
#include "master/kinds/kind.h"
#include "nn/layer.h"
#include "shm/layout.h"
#include "shmtrain/optim_config.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::plan {

using master::HostPlan;
using master::KindPlan;
using master::RunKind;

// The header of a run of `total_steps` updates of `model` (resolved: its text, input and
// counts are written as they are) on rows x features, validating every `eval_every` steps (0:
// never), created by this process. total_size is 0 when the layout does not fit in 64 bits
// (shm::ComputeLayout). The mode word and the workers' validation interval are the run's
// kind's.
shm::Header MakeHeader(const RunKind& kind, const TrainOptions& o, const nn::ResolvedModel& model,
                       const OptimConfig& optim, int64_t rows, int features, int64_t total_steps,
                       int64_t eval_every);

// The steps between validations: 0 without held-out data; --eval-every, else an epoch with a
// batch, else every --log-every steps (50 when that is 0).
int64_t EvalEvery(const TrainOptions& o, int64_t rows);

// The options as this host's workers count them (HostPlan: --checkpoint-every in this host's
// steps or updates).
TrainOptions HostUnits(const TrainOptions& o, const HostPlan& plan);

// The workers' own check of the run configuration (shm::CheckRunConfig, data::CheckRunOptions)
// on a header this run builds: what they would refuse is kUsage here, naming the flag or file.
Status CheckConfig(const TrainOptions& o, const shm::Header& h);

// The rows of one worker's pass at the run's --batch over every host's workers (the kind
// splits it: KindPlan::WorkerBatchRows).
int64_t WorkerBatchRows(const KindPlan& kind, const TrainOptions& o, int64_t rows);

// The data pipeline's sizing of a run of this kind (data/pipeline.h, RunSizing): the rows of a
// worker's pass (WorkerBatchRows) and the segment of `model` on rows x features, its
// configuration checked as the workers will (CheckConfig). kind must outlive it.
data::RunSizing SizingOf(const RunKind& kind);

}  // namespace shmtrain::plan
