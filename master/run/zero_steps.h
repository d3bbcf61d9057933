// `shmtrain train --init-from W.npz --steps 0 --save M.bin`: a run of no step. It reads the
// data as any run does (its classes, its input shape, --normalize fitted on its training rows),
// reads the weights as --init-from does (master/files/init_from.h) and saves them with them as
// a model file that eval, predict and export read: PyTorch's weights into a model, or an export
// read back, without an update. No segment is made and no worker starts; the line said at the
// end gives the model's loss on the training rows, as a run's "done:" line does.
#pragma once

#include "master/kinds/kind.h"
#include "master/log/log.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// Whether opts ask for a run of no step (--steps 0).
bool IsZeroStepRun(const TrainOptions& o);

// The run above. kUsage on one host of several (each host would write its own model), kData
// for weights that do not fit the model (as --init-from), kDiverged when they give outputs that
// are not finite on the training rows (nothing is saved then), kResource when --save cannot be
// written.
Status RunZeroSteps(const TrainOptions& opts, const RunKind& kind, Logger& log);

}  // namespace shmtrain::master
