#include "master/run/signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "data/dataset.h"
#include "master/log/report.h"
#include "master/run/run.h"
#include "shmtrain/status.h"

namespace shmtrain::master {
namespace {

constexpr int kStopSignals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1,   SIGUSR2, SIGPIPE, SIGALRM,
                                SIGTERM, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,   SIGPWR};
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
// Sanitizer builds keep the sanitizer's own crash handlers: their reports matter more there.
#ifdef SHMTRAIN_SANITIZED
constexpr bool kOwnCrashHandlers = false;
#else
constexpr bool kOwnCrashHandlers = true;
#endif

// The slots of RemovedOnDeath: a path is written while its slot is kFilling and unlinked by a
// handler only once kReady, so a handler never reads a path half written.
constexpr int kSlots = 16;
enum SlotState : int { kFree = 0, kFilling = 1, kReady = 2 };
struct Slot {
  std::atomic<int> state{kFree};
  char path[4096];
};
static_assert(std::atomic<int>::is_always_lock_free, "read from a signal handler");
Slot g_slots[kSlots];
StopAction g_stop_action = StopAction::kRaiseFlag;

void RemoveAll() {  // async-signal-safe
  for (Slot& s : g_slots) {
    if (s.state.load() == kReady) unlink(s.path);
  }
}

void OnStopSignal(int sig, siginfo_t* info, void*) {
  // The kernel's SIGPIPE for our own write carries our own pid as the sender.
  if (sig == SIGPIPE && info != nullptr && info->si_pid == getpid()) return;
  g_stop_signal = sig;
  if (g_stop_action == StopAction::kRemoveAndDie) {
    RemoveAll();
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

void OnCrashSignal(int sig) {
  RemoveAll();
  signal(sig, SIG_DFL);
  raise(sig);
}

void OnTerminate() {
  const std::string what = DescribeException(std::current_exception());
  RemoveAll();
  std::fprintf(stderr, "shmtrain: error: internal error: %s\n", what.c_str());
  std::fflush(nullptr);
  std::_Exit(kExitInternal);
}

}  // namespace

std::atomic<int> g_stop_signal{0};

RemovedOnDeath::RemovedOnDeath(const std::string& path) {
  if (path.empty() || path.size() >= sizeof(Slot::path)) return;
  for (int k = 0; k < kSlots; ++k) {
    int free = kFree;
    if (!g_slots[k].state.compare_exchange_strong(free, kFilling)) continue;
    std::memcpy(g_slots[k].path, path.c_str(), path.size() + 1);
    g_slots[k].state.store(kReady);
    slot_ = k;
    return;
  }
}

RemovedOnDeath& RemovedOnDeath::operator=(RemovedOnDeath&& o) noexcept {
  if (this != &o) {
    Forget();
    slot_ = std::exchange(o.slot_, -1);
  }
  return *this;
}

void RemovedOnDeath::Forget() {
  if (slot_ < 0) return;
  g_slots[slot_].state.store(kFilling);  // no handler reads it from here on
  g_slots[slot_].state.store(kFree);
  slot_ = -1;
}

Verdict StopSignal::Tick(const RunView& view) {
  const int sig = g_stop_signal.load();
  if (sig == 0) return Verdict::GoOn();
  const bool from_mpirun = under_mpirun_ && sig == SIGTERM;
  // Under shmtrain launch, the SIGTERM may be the launcher's (master/log/report.h).
  const LauncherStop launcher = sig == SIGTERM ? LauncherStopped() : LauncherStop::kNone;
  const char* why =
      launcher == LauncherStop::kLoss
          ? " (shmtrain launch stopped this host master: another one was lost, and the job is "
            "relaunched on the hosts left)"
      : launcher == LauncherStop::kLauncherGone
          ? " (its shmtrain launch is gone: no job goes on without it)"
      : from_mpirun ? " (under mpirun, SIGTERM comes from mpirun: it ends the job this way when "
                      "it is interrupted or when another host master has failed; its message, "
                      "or that host's, tells which)"
                    : "";
  return Verdict::EndIf(Status::Interrupted("stopped by " + SignalName(sig) + " at step " +
                                            std::to_string(view.progress) + " of " +
                                            std::to_string(total_steps_) + why));
}

std::string DescribeException(std::exception_ptr e) {
  if (!e) return "unknown exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return "out of memory (std::bad_alloc)";
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

void InstallSignalHandlers(StopAction stop) {
  g_stop_action = stop;
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = OnStopSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  for (const int sig : kStopSignals) sigaction(sig, &sa, nullptr);
  struct sigaction crash {};
  sigemptyset(&crash.sa_mask);
  crash.sa_handler = OnCrashSignal;
  crash.sa_flags = SA_RESETHAND;
  if (kOwnCrashHandlers) {
    for (const int sig : kCrashSignals) sigaction(sig, &crash, nullptr);
  }
  std::set_terminate(OnTerminate);
  // A load of images checks for a stop between files (kRemoveAndDie never lets it see one).
  data::SetLoadStop([] { return g_stop_signal.load(); });
}

}  // namespace shmtrain::master
