// `shmtrain train`: load the data, lay out and fill the segment, then run the list of units
// that make a run (master/run_loop.h), each owning one concern: stop signals
// (master/signals.h), the loss and live lines (master/run_lines.h), validation and early
// stopping (master/validation.h), the cross-host combine (master/combiner.h), the workers'
// lives (master/supervisor.h), checkpoints (master/checkpoint_policy.h), the model kept and
// the summary line. RunTrain's list is the order of every round and of the run's end.
//
// The master never blocks on anything a worker can hold: it sleeps only in poll() on the
// workers' pidfds with a short timeout, reads the segment without locks, and after an abort
// gives the workers a bounded time to leave before it kills them.
#pragma once

#include <memory>

#include "data/dataset.h"
#include "data/preprocess.h"
#include "master/hosts.h"
#include "master/launcher.h"
#include "master/log.h"
#include "master/signals.h"
#include "monitoring/exporter.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// The data a run trains and validates on: loaded, split (--val-split) and scaled
// (--normalize, fitted on the training rows), and checked against the model. A --model given
// without --input-shape gets its input shape from the data here (opts.model.input).
struct RunData {
  data::Dataset train;
  data::Dataset val;
  data::Normalizer norm;
};
Status PrepareData(TrainOptions& opts, RunData* out);

// The one check that data fits in memory, made by train, eval and predict through
// LoadOptions::check_size before a row is read: rows x features as float32, and a target per
// row, and the activations and scratch of the model's passes over them (nn::PassBytes: eval and
// predict's chunks), against MemAvailable of /proc/meminfo (unknown: nothing is refused). Train
// adds its segment and its workers' passes. Status::Resource naming src and the figures
// otherwise.
Status CheckMemory(const std::string& src, int64_t rows, int features, const ModelSpec& model);

// How to read the data files named by the options (format, label column, header) for `task`.
data::LoadOptions LoadOptionsFor(const TrainOptions& opts, Task task);

// The one check of an image model's input against the image shape data gives one sample
// (data::LoadOptions::check_image), made by train (--data, --val-data), eval and predict before
// a row is read: the same shape, or kUsage naming the data file (data_src), both shapes and
// where the model's comes from (model_src: a flag, a file). A model that takes no images
// (nn::TakesImages), or whose input is not known yet (c = 0), takes the data as flat values.
Status CheckImage(const ModelSpec& model, const std::string& model_src, const Shape& image,
                  const std::string& data_src);

// Runs a training to its end: this host's part of it when hosts.count() > 1 (opts.host_* must
// match hosts). On failure, every worker is gone and the segment removed before this returns.
// The metrics endpoint, if any, is left in *exporter: stopping it costs civetweb's 2 s poll
// quantum, so the caller lets the process's exit close it instead.
// hosts is shared with the run's cross-host thread, which a failure may leave behind.
Status RunTrain(const TrainOptions& opts, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts,
                std::unique_ptr<monitoring::Exporter>* exporter);

}  // namespace shmtrain::master
