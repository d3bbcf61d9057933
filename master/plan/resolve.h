// A training run's start, resolved once: the options' model with its input known, parsed once
// and its shapes resolved once, its counts, the memory its passes take, and the data's
// description. Made in one place (Resolve), early in the start of `shmtrain train`, from the
// options plan::Validate has checked and the data the pipeline reads (data/pipeline.h, which
// resolves the model the moment its input is known: from the options, a file's header or the
// data's width); what follows the start reads it instead of resolving the model again.
#pragma once

#include <cstdint>
#include <string>

#include "data/pipeline.h"
#include "nn/layer.h"
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
};

// The data read (data::PrepareData: loaded, checked against the model, split, scaled; a
// --model's input set from the data) and the run resolved from it. The pipeline's refusals,
// unchanged.
Status Resolve(TrainOptions& o, const data::RunSizing& run, data::RunData* rd, Resolved* out);

}  // namespace shmtrain::plan
