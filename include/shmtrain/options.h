// Every setting of a training run, with its default and its limits.
//
// The CLI fills a TrainOptions, Validate() checks it, and the master copies the parts the
// workers need into the segment header (shm/layout.h), which is the workers' only source of
// truth. A field added here that workers need must be added there too (and the ABI bumped).
#pragma once

#include <cstdint>
#include <string>

#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain {

enum class Mode : uint32_t { kSync = 0, kAsync = 1 };  // stored in the segment: append only
enum class LogFormat { kText, kJson };
enum class HeaderMode { kAuto, kYes, kNo };

struct TrainOptions {
  // Number of worker processes. Default 1; 1 <= workers <= 256.
  int workers = 1;
  Mode mode = Mode::kSync;

  // Data: exactly one of data_path / example. example: "parabola".
  std::string data_path;
  std::string example;
  // Rows of the built-in example. Default 50 (the seed's N); 1 <= n <= 10^7.
  int64_t example_rows = 50;
  // Label column of a CSV file, 0-based; -1 (default) is the last column.
  int label_col = -1;
  // Whether the CSV file's first line is a header. Default: detected (a first line with a
  // cell that is not a number is a header).
  HeaderMode header = HeaderMode::kAuto;

  // Model. layers: required, e.g. {1,5,1}; first = number of features, last = 1 for mse or the
  // number of classes for xent; each size 1..65536, 2..64 entries.
  ModelSpec model;
  Init init = Init::kNormal;

  // Optimiser. lr > 0 (required); 0 <= momentum < 1 (default 0: plain SGD).
  double lr = 0;
  double momentum = 0;

  // Length: exactly one of steps (>= 1) and epochs (>= 1). With a batch, an epoch is
  // ceil(rows / batch) steps; full batch, an epoch is one step.
  int64_t steps = 0;
  int64_t epochs = 0;
  // Global minibatch size; 0 (default) = the full dataset every step. 1 <= batch <= rows.
  int64_t batch = 0;
  // Seed of initialisation and shuffling. Default 1.
  uint64_t seed = 1;

  // Logging: the loss every log_every steps (default 50; 0 = only the summary).
  int64_t log_every = 50;
  LogFormat log_format = LogFormat::kText;
  // Live progress line: auto = when stderr is a terminal.
  bool progress = true;

  // Save the trained model here (empty: do not save).
  std::string save_path;

  // Deadline of every barrier wait in a worker, seconds. Default 120; 0.01..86400.
  double barrier_timeout_s = 120;

  // Test hook (not shown in --help): worker `fault_rank` exits with kWorkerInjectedFault
  // when it reaches step `fault_step`. -1 = off.
  int fault_rank = -1;
  int64_t fault_step = -1;

  // Checks every field against its limits and the fields against each other (data-dependent
  // checks such as layer sizes against the data live in the master). Returns kUsage.
  Status Validate() const;

  // Steps the run takes once the dataset has `rows` rows.
  int64_t TotalSteps(int64_t rows) const;
};

}  // namespace shmtrain
