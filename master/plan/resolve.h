// A training run's start, resolved once: the options' model with its input known, parsed once
// and its shapes resolved once, its counts, the memory its passes take, the data's description,
// this host's share of the run, the optimizer, the segment's header and the room the outputs
// take. Made in one place (Resolve), early in the start of `shmtrain train`, from the options
// plan::Validate has checked and the data the pipeline reads (data/pipeline.h, which resolves
// the model the moment its input is known: from the options, a file's header or the data's
// width); what follows the start reads it instead of resolving or checking anything again.
#pragma once

#include <cstdint>
#include <string>

#include "data/pipeline.h"
#include "master/kinds/kind.h"
#include "master/log/log.h"
#include "nn/layer.h"
#include "shm/layout.h"
#include "shmtrain/optim_config.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::plan {

// What the training data is, as the run sees it once loaded, split and scaled.
struct DataDescription {
  std::string source;  // the file, or "example NAME"
  int64_t rows = 0;    // training rows
  int features = 0;
  int64_t val_rows = 0;  // held-out rows (--val-split or --val-data), 0 without
  int64_t classes = 0;   // classification: the classes; 0 for regression
};

struct Resolved {
  nn::ResolvedModel model;  // spec (input known), shapes, outputs, parameters, statistics
  DataDescription data;
  // The bytes one worker's training pass over its most rows takes (nn::PassBytes, backward),
  // and those rows.
  uint64_t worker_pass_bytes = 0;
  int64_t worker_batch_rows = 0;
  int64_t total_steps = 0;        // the run's (TrainOptions::TotalSteps)
  int64_t steps_per_epoch = 0;    // an epoch's steps as the host's plan counts them
  master::HostPlan host;          // this host's share of the run (KindPlan::Plan)
  OptimConfig optim;              // resolved over total_steps (nn::ResolveOptim)
  std::string optimizer;          // its description, as checkpoints store it
  uint64_t fingerprint = 0;       // of the run, in every checkpoint (RunFingerprint)
  shm::Header header;             // the segment's, checked as the workers will check it
  uint64_t model_bytes = 0;       // the --save file's size (0 without --save)
  uint64_t checkpoint_bytes = 0;  // a checkpoint's size
};

// The data read (data::PrepareData: loaded, checked against the model, split, scaled; a
// --model's input set from the data; files it skipped said in the log), and the run resolved
// from it: this host's share (the kind's plan), the optimizer, the segment's header checked as
// the workers will check it, the fingerprint, and the outputs' sizes (the model file read back
// through its decoder first: a model the format cannot hold is refused now, not after the
// training). The pipeline's and the plan's refusals, unchanged. Logs the choice of --precision
// auto.
Status Resolve(TrainOptions& o, const master::RunKind& kind, master::Logger& log, data::RunData* rd,
               Resolved* out);

}  // namespace shmtrain::plan
