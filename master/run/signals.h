// How the master meets signals and escaped exceptions, in one place.
//
//  - Stop signals (HUP, INT, QUIT, USR1, USR2, PIPE from another process, ALRM, TERM, XCPU,
//    XFSZ, VTALRM, PROF, IO, PWR). In `train` (StopAction::kRaiseFlag): a flag
//    (g_stop_signal), which StopSignal, the first unit of the run loop's rounds, turns into
//    the end of the run (kInterrupted), and which every wait of the run's end asks (an
//    output write that has no room, master/files/output_write.h), as does a load of data
//    between two blocks of it (data::SetLoadStop); the run's end stops the workers,
//    writes a checkpoint if one is configured, removes the segment, and the process exits
//    128 + n. In the other commands (StopAction::kRemoveAndDie), which hold no workers: the
//    files registered with RemovedOnDeath are removed and the signal is raised again with its
//    default action, so the process ends at once, by that signal, leaving nothing behind. A
//    SIGPIPE the master raised itself (a write to a closed stdout or a scraper that hung up)
//    is ignored: the write fails with EPIPE and training goes on (a failed stdout ends a run
//    that ends well with exit 4, once its model is saved: Logger::stdout_status,
//    WithStdoutStatus in master/run/run.h).
//  - Crash signals (SEGV, BUS, FPE, ILL, ABRT, TRAP, SYS): the files registered with
//    RemovedOnDeath (the segment's name among them) are removed, then the signal is raised
//    again with its default action. Workers die with the master (PR_SET_PDEATHSIG).
//  - An exception that escapes a thread other than main's: std::terminate prints it, removes
//    the same files and exits 1. (main's own exceptions unwind through the normal cleanup.)
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>

#include "core/signal_name.h"
#include "master/unit/removed_on_death.h"
#include "master/unit/run_unit.h"
#include "master/unit/stop_flag.h"

namespace shmtrain::master {

// Ends the run at the first round after a stop signal, naming it and the step.
class StopSignal final : public RunUnit {
 public:
  // under_mpirun: several hosts, where a SIGTERM is how mpirun ends the job.
  StopSignal(int64_t total_steps, bool under_mpirun)
      : total_steps_(total_steps), under_mpirun_(under_mpirun) {}
  Verdict Tick(const RunView& view) override;

 private:
  int64_t total_steps_;
  bool under_mpirun_;
};

// What a stop signal does (above).
enum class StopAction { kRaiseFlag, kRemoveAndDie };

// Installs the handlers above. Call again after anything that may have replaced one (the
// metrics server's library sets SIGPIPE to SIG_IGN when it starts).
void InstallSignalHandlers(StopAction stop = StopAction::kRaiseFlag);

// What an exception says, for "internal error: ..." messages: its what(), "out of memory
// (std::bad_alloc)" for an allocation failure, "unknown exception" for a non-std one.
std::string DescribeException(std::exception_ptr e);

}  // namespace shmtrain::master
