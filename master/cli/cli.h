// The `shmtrain` command line: commands, flags, help texts.
#pragma once

#include <string>
#include <vector>

#include "master/flags/command.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// Parses argv (argv[0] is the program). kUsage with a message naming the flag on error.
Status ParseCommandLine(const std::vector<std::string>& args, Command* out);

// The log format argv asks for, from its words alone: the last `--log-format json|text` (or
// `--log-format=...`) before a "--", else text. For the message of a command line that
// ParseCommandLine refuses, whatever the mistake and wherever it stands (before the flag too):
// a json run's errors are JSON events.
LogFormat AskedLogFormat(const std::vector<std::string>& args);

}  // namespace shmtrain::master
