// `shmtrain train`'s data (and simulate's), from the options to scaled rows, in this order:
//   1. the model's input: an IDX or NumPy file's header gives a --model without --input-shape
//      its image shape; the built-in examples are flat;
//   2. --data read, or the --example made: once its shape is known and before a row is
//      stored, its images are checked against the model (CheckImage), its width against the
//      model's input, and the run (its segment and its workers' passes: RunSizing) against
//      /dev/shm and the memory;
//   3. a flat model's input: the data's width;
//   4. --val-split's held-out rows split off, and the model's outputs and --batch checked
//      against the training rows;
//   5. --val-data read with the training rows' classes and width;
//   6. --normalize fitted on the training rows and applied to both sets.
// Eval and predict read their file with the same image and memory checks (LoadForModel).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "data/dataset.h"
#include "data/preprocess.h"
#include "nn/layer.h"
#include "shm/segment.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::data {

// The data a run trains and validates on: loaded, split (--val-split) and scaled
// (--normalize, fitted on the training rows), and checked against the model.
struct RunData {
  Dataset train;
  Dataset val;
  Normalizer norm;
  // The model, resolved once its input is known (from the options, a file's header, or the
  // data's width): the options' model with that input, its shapes and counts.
  nn::ResolvedModel model;
};

// What the data's size check asks of the run the data is for, whose segment and workers the
// master lays out: given the options, the model resolved on the data's width and the data's
// shape,
//   worker_batch_rows: the most rows one worker's pass takes at once;
//   segment_bytes: the run's segment in *bytes, or why the run cannot be made (kUsage naming
//                  the flag, as for what the workers would refuse).
struct RunSizing {
  std::function<int64_t(const TrainOptions& o, int64_t rows)> worker_batch_rows;
  std::function<Status(const TrainOptions& o, const nn::ResolvedModel& model, int64_t rows,
                       int features, uint64_t* bytes)>
      segment_bytes;
};

// The steps above. A --model given without --input-shape gets its input shape from the data
// here (o.model.input).
Status PrepareData(TrainOptions& o, const RunSizing& run, RunData* out);

// Eval and predict: the rows of `path`, read as `file` says for a trained model (its input
// width and, classifying, its classes; model_src names the model in messages), with
// CheckImage and CheckMemory before a row is stored. labels: whether the labels are read.
Status LoadForModel(const std::string& path, const DataFileOptions& file, const ModelSpec& model,
                    const ClassMap& classes, const std::string& model_src, bool labels,
                    Dataset* out);

// The one check that data fits in memory, made by train, eval and predict through
// LoadOptions::check_size before a row is read: rows x features as float32, and a target per
// row, and the activations and scratch of the model's passes over them (nn::PassBytes: eval and
// predict's chunks), against MemAvailable of /proc/meminfo (unknown: nothing is refused). Train
// adds its segment and its workers' passes. Status::Resource naming src and the figures
// otherwise.
Status CheckMemory(const std::string& src, int64_t rows, int features, const ModelSpec& model);
// The bytes this process may still map under its own limits (RLIMIT_AS, ulimit -v; RLIMIT_DATA),
// UINT64_MAX when none is set; the memory checks take the smaller of it and MemAvailable. *what
// (if given) names the limit that binds, its size and what is left, for messages.
uint64_t RoomUnderMemoryLimits(std::string* what);

// The one check of an image model's input against the image shape data gives one sample
// (LoadOptions::check_image), made by train (--data, --val-data), eval and predict before a row
// is read: the same shape, or kUsage naming the data file (data_src), both shapes and where
// the model's comes from (model_src: a flag, a file). A model that takes no images
// (nn::TakesImages), or whose input is not known yet (c = 0), takes the data as flat values.
Status CheckImage(const ModelSpec& model, const std::string& model_src, const Shape& image,
                  const std::string& data_src);

// The flag or file a model's input shape comes from, as messages name it: --layers,
// --input-shape, --features, --example NAME, or the data file.
std::string InputSource(const TrainOptions& o);

// The model's shapes and its outputs against its loss: kUsage naming `flag` (--layers or
// --model) and the layer that does not fit. The input shape must be known (c > 0); flat_input:
// it is a row of flat data, which has no image shape (nn::ResolveShapes). The run's options
// check it where the command line tells the input (master/plan/validate.h), the steps above
// where the data does. The resolved model goes to *resolved when it is given.
Status CheckModel(const ModelSpec& model, const char* flag, bool flat_input = false,
                  nn::ResolvedModel* resolved = nullptr);

// The training batches against batch norm once the training data has `rows` rows: kUsage
// naming --batch and the layer when a batch the run meets (--batch, the full batch, or the
// last batch of an epoch, rows % batch) gives a batch norm layer one value per channel
// (nn::LoneValueLayer) of the run's model, resolved.
Status CheckBatchNormBatches(const TrainOptions& o, const nn::ResolvedModel& model, int64_t rows);

// What the options ask of the model, without its text: the precision's kernels on the CPU in
// use (bf16 needs avx512_bf16), the augmentation on the model's input. The master makes it on
// the header it writes from the model it resolved (master/plan/segment_plan.h, CheckConfig),
// and each worker again, on its own CPU, once it has read the model (worker/worker_main.cc).
shm::ConfigCheck CheckRunOptions(const shm::RunConfig& c);

}  // namespace shmtrain::data
