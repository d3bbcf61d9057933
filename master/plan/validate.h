// The options of a run checked once, in one place: the model they name, built from --layers or
// --model's text, then every rule between the fields (what is required, what excludes what, the
// model's sizes and shapes where the command line tells its input, --augment, the optimizer's
// flags, the data-format flags, the held-out data, the deadlines). Each flag's own limits are
// the flag table's, checked as the command line is read (master/flags/flags.h); the checks that
// need the data (its width, classes, rows) are the data pipeline's, made as it reads it
// (data/pipeline.h).
#pragma once

#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::plan {

// o->model from --layers (mlp_layers, activation) or --model (model_text, input_shape); the
// loss stays. kUsage when both or a bad model text are given. Called before Validate.
Status BuildModel(TrainOptions* o);

// The fields against each other, what is required, and the model (--layers' count and sizes,
// the model text's length, --input-shape): kUsage naming the first flag at fault, in the order
// of the steps in validate.cc.
Status Validate(const TrainOptions& o);

}  // namespace shmtrain::plan
