// The process's stop flag: which stop signal asked the run to stop. Raised by the handlers of
// master/run/signals.h (which defines it); asked by every wait that a stop must end (the run's
// rounds, an output write, the hosts' exchanges).
#pragma once

#include <atomic>

namespace shmtrain::master {

// The signal that asked the run to stop (SIGINT, SIGTERM, SIGHUP, ...), 0 if none. Set by the
// handler (on whichever thread the kernel picks: MPI's own threads among them, hence an
// atomic, lock-free and so async-signal-safe).
extern std::atomic<int> g_stop_signal;
static_assert(std::atomic<int>::is_always_lock_free, "stored from a signal handler");
inline bool StopRequested() {
  return g_stop_signal.load() != 0;
}

}  // namespace shmtrain::master
