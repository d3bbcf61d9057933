// `shmtrain eval` and `shmtrain predict`: a saved model on new rows.
//
// Both read the model file (master/files/model_file.h), load the data with the model's width, task
// and classes, scale it with the model's normalisation statistics, and run the network.
// --val-split F --seed S picks the same held-out rows a training run with those flags held out.
#pragma once

#include <string>

#include "data/dataset.h"
#include "master/flags/command.h"
#include "master/log/log.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// Prints the metrics (rows, loss, accuracy or RMSE) of the model on the data.
Status RunEval(const Command& cmd, Logger& log);
// Writes one line per row: the class and its probabilities, or the value (CSV, with a header
// line), to cmd.out_path (written whole or not at all) or to stdout.
Status RunPredict(const Command& cmd, Logger& log);

// Image folders (data/image_folder.h): the warning for the files a load of `src` left out,
// when it left any out (eval, predict and train's data).
void WarnSkippedFiles(const data::Dataset& d, const std::string& src, Logger& log);

}  // namespace shmtrain::master
