// What a command line asks for, once parsed (master/cli/cli.h reads it; the flag table in
// master/flags/flags.h says which flag fills which field). The commands' own rooms (run,
// files) take it from here, below the command line's parser.
#pragma once

#include <string>
#include <vector>

#include "shmtrain/options.h"

namespace shmtrain::master {

// What the command line asks for.
struct Command {
  enum class Kind {
    kHelp,
    kVersion,
    kTrain,
    kSimulate,
    kCleanup,
    kEval,
    kPredict,
    kExport,
    kLaunch
  };
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
  // launch: the slots of the host masters (a name given twice is two ranks on that machine),
  // the fewest left before it gives up, the relaunches it may make, and the job's command
  // ("train" and its flags; `train` holds them parsed).
  std::vector<std::string> hosts;
  int min_hosts = 1;
  int max_relaunches = 3;
  std::vector<std::string> job;
};

}  // namespace shmtrain::master
