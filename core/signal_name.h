// Signals in messages: a stop's ("stopped by SIGTERM") and a death's ("killed by signal 9
// (SIGKILL)"). A signal without a name (a real-time one) is shown by its number alone.
#pragma once

#include <cstring>
#include <string>

namespace shmtrain {

// "SIGHUP" for 1; "signal 35" for a signal without a name.
inline std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// "signal 9 (SIGKILL)"; "signal 35" for a signal without a name.
inline std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

}  // namespace shmtrain
