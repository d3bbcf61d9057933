// Status: the one error value of shmtrain, the exit codes, which are API, and the one way a
// broken invariant aborts. The policy they serve is docs/errors.md: read it before adding an
// error path.
//
// Boundary calls (parse flags, load data, create or attach the segment, spawn a worker, save
// a file, MPI) return a Status whose message a user can act on: it names what is wrong and
// where (file, line, column, flag, rank). Broken invariants are not Statuses: they abort
// loudly through SHMTRAIN_CHECK / SHMTRAIN_DIE, with file:line.
#pragma once

#include <string>
#include <utility>

namespace shmtrain {

// Exit codes of the `shmtrain` command. Scripts and tests rely on them: never renumber.
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,       // a bug: an invariant failed
  kExitUsage = 2,          // bad flag, value, data file or model file
  kExitWorkerFailed = 3,   // a worker died or timed out and the run was abandoned
  kExitResource = 4,       // shared memory, processes or files could not be had
  kExitDiverged = 5,       // the loss or the gradient became non-finite (NaN or infinite)
  kExitHostLost = 6,       // several hosts: another host's master failed or stopped answering
  kExitLaunchGaveUp = 7,   // launch: fewer hosts left than --min-hosts, or its relaunches used up
  kExitInterrupted = 130,  // SIGINT (128 + 2); any other stop signal n exits 128 + n
  kExitTerminated = 143,   // SIGTERM (128 + 15)
};

// Exit codes of the `shmtrain-worker` executable. The master maps them to messages; a test
// asserts each one. Never renumber: an old worker may meet a new master during an upgrade.
enum WorkerExit : int {
  kWorkerOk = 0,
  kWorkerBadArgs = 10,         // argv is not "<segment> <rank> <incarnation>"
  kWorkerNoSegment = 11,       // the segment cannot be opened or mapped
  kWorkerBadMagic = 12,        // not a shmtrain segment
  kWorkerBadAbi = 13,          // a segment of another layout version
  kWorkerBadLayout = 14,       // sizes/alignments/offsets disagree with this build
  kWorkerAborted = 15,         // the master raised the abort word
  kWorkerBarrierTimeout = 16,  // a barrier wait passed its deadline
  kWorkerOrphaned = 17,        // the master is gone
  kWorkerBadRank = 18,         // rank outside [0, P) or stale incarnation
  kWorkerInternal = 19,        // an invariant failed inside the worker
  kWorkerInjectedFault = 20,   // a test hook asked the worker to die
  kWorkerDiverged = 21,        // the loss or gradient was non-finite (Header.diverged_step)
};

// Human-readable name of a worker exit code, for messages.
const char* WorkerExitName(int code);

// Every exit code of `shmtrain` (128 + n for the other stop signals aside): what its help and
// docs/failures.md list, and a test holds them to it.
inline constexpr ExitCode kExitCodes[] = {
    kExitOk,       kExitInternal, kExitUsage,        kExitWorkerFailed, kExitResource,
    kExitDiverged, kExitHostLost, kExitLaunchGaveUp, kExitInterrupted,  kExitTerminated};

// A broken invariant (a bug, never a user's input): prints "shmtrain: internal error at
// FILE:LINE: what" to stderr and aborts. SIGABRT then takes the crash path of the process:
// the master's handler removes the segment (master/run/signals.h); a worker's death is seen and
// reported by its master like any other.
[[noreturn]] void Die(const char* file, int line, const std::string& what);

}  // namespace shmtrain

// SHMTRAIN_CHECK(cond, what): dies with `what` (evaluated only then) when cond is false.
#define SHMTRAIN_DIE(what) ::shmtrain::Die(__FILE__, __LINE__, (what))
#define SHMTRAIN_CHECK(cond, what)   \
  do {                               \
    if (!(cond)) SHMTRAIN_DIE(what); \
  } while (0)

namespace shmtrain {

// [[nodiscard]]: a Status is handled, passed up, or dropped on purpose with `(void)` beside
// the line that says where it was logged and counted (docs/errors.md, "Log and count").
class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk, kUsage, kData, kResource, kWorkerFailed, kInterrupted, kInternal, kDiverged, kHostLost
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status Usage(std::string msg) { return Status(Code::kUsage, std::move(msg)); }
  static Status Data(std::string msg) { return Status(Code::kData, std::move(msg)); }
  static Status Resource(std::string msg) { return Status(Code::kResource, std::move(msg)); }
  static Status WorkerFailed(std::string msg) {
    return Status(Code::kWorkerFailed, std::move(msg));
  }
  static Status Interrupted(std::string msg) { return Status(Code::kInterrupted, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }
  static Status Diverged(std::string msg) { return Status(Code::kDiverged, std::move(msg)); }
  static Status HostLost(std::string msg) { return Status(Code::kHostLost, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // The exit code of `shmtrain` for this status (kUsage and kData both give 2).
  int exit_code() const;

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace shmtrain
