// The `shmtrain` command line: commands, flags, help texts.
#pragma once

#include <string>
#include <vector>

#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// What the command line asks for.
struct Command {
  enum class Kind { kHelp, kVersion, kTrain, kSimulate, kCleanup, kEval, kPredict, kExport };
  Kind kind = Kind::kHelp;
  std::string help_text;  // for kHelp: what to print (stdout, exit 0)
  TrainOptions train;
  // simulate: the worker counts to simulate, and whether to compare every rule.
  std::vector<int> sim_workers;
  bool compare = false;
  // eval/predict: the model file, and where predictions go (empty: stdout). The data and
  // its format flags are in `train`. export: the model file and the .npz to write.
  std::string model_path;
  std::string out_path;
  // cleanup: list only, remove nothing.
  bool dry_run = false;
};

// Parses argv (argv[0] is the program). kUsage with a message naming the flag on error.
Status ParseCommandLine(const std::vector<std::string>& args, Command* out);

// The log format argv asks for, from its words alone: the last `--log-format json|text` (or
// `--log-format=...`) before a "--", else text. For the message of a command line that
// ParseCommandLine refuses, whatever the mistake and wherever it stands (before the flag too):
// a json run's errors are JSON events.
LogFormat AskedLogFormat(const std::vector<std::string>& args);

}  // namespace shmtrain::master
