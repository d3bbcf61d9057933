#include "master/signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "master/run.h"
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

void UnlinkSegment() {
  if (g_segment_path[0] != '\0') unlink(g_segment_path);  // async-signal-safe
}

void OnStopSignal(int sig, siginfo_t* info, void*) {
  // The kernel's SIGPIPE for our own write carries our own pid as the sender.
  if (sig == SIGPIPE && info != nullptr && info->si_pid == getpid()) return;
  g_stop_signal = sig;
}

void OnCrashSignal(int sig) {
  UnlinkSegment();
  signal(sig, SIG_DFL);
  raise(sig);
}

void OnTerminate() {
  const std::string what = DescribeException(std::current_exception());
  UnlinkSegment();
  std::fprintf(stderr, "shmtrain: error: internal error: %s\n", what.c_str());
  std::fflush(nullptr);
  std::_Exit(kExitInternal);
}

// "SIGHUP" for 1, for messages.
std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

Verdict StopSignal::Tick(const RunView& view) {
  const int sig = g_stop_signal.load();
  if (sig == 0) return Verdict::GoOn();
  const bool from_mpirun = under_mpirun_ && sig == SIGTERM;
  return Verdict::EndIf(Status::Interrupted(
      "stopped by " + SignalName(sig) + " at step " + std::to_string(view.progress) + " of " +
      std::to_string(total_steps_) +
      (from_mpirun ? " (under mpirun, SIGTERM comes from mpirun: it ends the job this way when "
                     "it is interrupted or when another host master has failed; its message, "
                     "or that host's, tells which)"
                   : "")));
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

void InstallSignalHandlers() {
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
}

}  // namespace shmtrain::master
