// Helpers for tests that run the real executables as child processes.
//
// A child is started with fork + execv, stdin on /dev/null and stdout/stderr on pipes. Both
// pipes are always drained together (poll), so a child that fills one pipe while the test
// waits on the other never deadlocks. Every wait has a deadline: a child that outlives it is
// SIGKILLed, reaped, and the current test fails. The helpers never block without a bound.
//
// Not thread-safe: one test thread drives a Subprocess.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

// Opens a convergence test: one that asks whether training reaches an accuracy or an ordering.
// Sanitized builds skip it: its paths (loading, processes, updates) are each run there by
// smaller tests, and its minutes of arithmetic at -O1 find nothing more. The normal build
// runs it.
// A rate test (one that compares how fast something goes under two conditions) is skipped
// there too: the instrumentation, not the code under test, sets the pace.
// A test that repeats paths is skipped there as well: chaos (a kill every few recoveries, the
// same death and replacement tens of times) and the fault points again under one more update
// rule. Each path it takes is taken there by a test of one fault (a fault point, a kill at a
// step, a resume), which is what a sanitizer checks; the normal build checks the outcome of the
// repetition. (ASan's slowest tests were these: 108 s of its 593.)
#ifdef SHMTRAIN_SANITIZED
#define SHMTRAIN_CONVERGENCE_TEST() \
  GTEST_SKIP() << "a convergence test: the normal build runs it, smaller tests run its paths here"
#define SHMTRAIN_RATE_TEST() \
  GTEST_SKIP() << "a rate test: the normal build runs it, smaller tests run its paths here"
#define SHMTRAIN_REPEATS_PATHS_TEST() \
  GTEST_SKIP() << "it repeats paths that tests of one fault each run here; the normal build runs it"
#else
#define SHMTRAIN_CONVERGENCE_TEST() static_cast<void>(0)
#define SHMTRAIN_RATE_TEST() static_cast<void>(0)
#define SHMTRAIN_REPEATS_PATHS_TEST() static_cast<void>(0)
#endif

namespace shmtrain::test {

// `normal` in the normal build, `sanitized` under a sanitizer: what a test repeats (fault
// points, steps) where the instrumentation makes each repetition costly and finds nothing more.
template <class T>
T UnlessSanitized([[maybe_unused]] T normal, [[maybe_unused]] T sanitized) {
#ifdef SHMTRAIN_SANITIZED
  return sanitized;
#else
  return normal;
#endif
}

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How a child ended, with everything it wrote.
struct ProcResult {
  pid_t pid = -1;
  bool exited = false;     // ended by exit(); exit_code is valid
  int exit_code = -1;      //
  int term_signal = 0;     // ended by this signal (0: it exited)
  bool timed_out = false;  // it outlived its deadline and was SIGKILLed by the helper
  std::string out;         // all of stdout
  std::string err;         // all of stderr
  Clock::time_point end;   // when the helper reaped it

  // "exit 2" / "signal 9" / "timed out", then stderr, for failure messages.
  std::string Describe() const;
};

// A running child. If the test did not Wait() for it, the destructor sends SIGTERM, then
// SIGKILL after a grace period, and reaps it.
class Subprocess {
 public:
  // Starts argv[0] (a path: no PATH search) with argv. On failure to start, the current test
  // fails and pid() is -1; the other methods are then harmless no-ops.
  explicit Subprocess(const std::vector<std::string>& argv);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !reaped_; }

  // Next line of stdout (without '\n'), reading both pipes meanwhile; at EOF a last line
  // without '\n' counts too. false at EOF or when timeout passes first (then *line is
  // untouched and nothing is lost).
  bool ReadLine(std::string* line, milliseconds timeout);

  // kill(pid, sig) while the child has not been reaped; false otherwise.
  bool Signal(int sig);

  // Waits for the child to end, draining both pipes; past the deadline it is SIGKILLed,
  // reaped, and the test fails. Stdout lines already returned by ReadLine are included.
  // Whenever the helper SIGKILLs a child, it also unlinks the segments named for its pid,
  // which a SIGKILLed master cannot remove itself.
  ProcResult Wait(milliseconds timeout);

  // Stderr read so far.
  const std::string& err() const { return err_; }

 private:
  // One poll round over the open pipes and the pidfd, up to `timeout`.
  void Pump(milliseconds timeout);
  void ReapIfDone(bool block);
  void KillAndReap();

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int pidfd_ = -1;  // -1 when pidfd_open is unavailable: polling falls back to a short tick
  bool reaped_ = false;
  int status_ = 0;
  Clock::time_point end_;
  std::string out_;      // all of stdout
  size_t line_pos_ = 0;  // stdout before this offset was returned by ReadLine
  std::string err_;
};

// Runs argv to completion with a deadline (see Subprocess::Wait).
ProcResult RunProcess(const std::vector<std::string>& argv, milliseconds timeout);

// Names (without directory) of the /dev/shm entries that start with
// "shmtrain-<uid>-<master_pid>-": the segments of that master, and nobody else's.
std::vector<std::string> SegmentsOf(pid_t master_pid);

// Whether pid is a live process: it exists (kill(pid, 0)) and is not a zombie.
bool PidAlive(pid_t pid);

// Polls PidAlive until it is false or timeout passes; returns whether the pid is gone.
bool WaitPidGone(pid_t pid, milliseconds timeout);

// Parses one flat JSON object such as {"event":"step","step":50,"loss":0.5}: string, number,
// true/false/null values, no nesting. Values come back as text: strings unescaped, numbers
// and literals as written. nullopt when the line is not such an object.
std::optional<std::map<std::string, std::string>> ParseFlatJson(const std::string& line);

// The field `key` of a flat JSON object line, or nullopt (no such key, or not flat JSON).
std::optional<std::string> JsonField(const std::string& line, const std::string& key);

// Splits text into lines on '\n'; a final line without '\n' is kept, a trailing empty one
// is not.
std::vector<std::string> SplitLines(const std::string& text);

// A fresh directory under $TMPDIR (or /tmp), or under `base`, removed with its contents on
// destruction.
class TempDir {
 public:
  TempDir();
  explicit TempDir(const std::string& base);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to File(name) and returns that path.
  std::string Write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

// A socket listening on 127.0.0.1 at a port the kernel picked: a port taken, or the server end
// of a client under test. Closed on destruction.
class LoopbackListener {
 public:
  LoopbackListener();
  ~LoopbackListener();
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  int fd() const { return fd_; }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

bool FileExists(const std::string& path);
// The bytes of a file; fails the current test and returns "" if it cannot be read.
std::string ReadWholeFile(const std::string& path);

// ---------------------------------------------------------------------------------------------
// What a run printed and wrote.

// s, or its beginning and end when it is long: a crash-looping run writes thousands of lines,
// and its master's message comes last.
std::string Clip(const std::string& s, size_t keep = 1500);

// Success when r exited with `code`; else how it ended, with its stderr (clipped) and the last
// 2000 bytes of its stdout.
::testing::AssertionResult ExitedWith(const ProcResult& r, int code);

// The json-mode summary line (the last one in r.out). It holds one JSON array (worker_updates
// in async mode), so it is not a flat object: read its numbers with Num(). Adds a failure and
// returns "" when there is none.
std::string SummaryOf(const ProcResult& r);
// The number `key` of a summary line (NAN for null; a failure and NAN when missing).
double Num(const std::string& summary, const std::string& key);

// The flat json-mode events of one kind in `out`, in order.
std::vector<std::map<std::string, std::string>> Events(const std::string& out,
                                                       const std::string& kind);

// The pids of the json-mode worker_started events in `out`, in order.
std::vector<pid_t> StartedWorkers(const std::string& out);

// A finished run left nothing behind: no segment of its master's pid, and every worker it
// started (StartedWorkers of its stdout) gone within 5 s.
void ExpectCleanedUp(const ProcResult& r);

// Success when `got` (a file's bytes) equals `want`; else the sizes and the first difference.
::testing::AssertionResult SameBytes(const std::string& got, const std::string& want);

// A checkpoint file's step: an i64 at offset 16 (master/files/checkpoint.h); -1 if unreadable.
int64_t CheckpointStep(const std::string& path);

// ---------------------------------------------------------------------------------------------
// Loopback TCP and a tiny HTTP/1.1 GET client (a run's metrics endpoint). Every step (connect,
// send, receive) runs under one deadline; nothing blocks without a bound.

// Owns a file descriptor (-1: none) and closes it.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// A non-blocking TCP connection to addr ("127.0.0.1:PORT"), established before the deadline;
// -1 (and *error) otherwise.
int ConnectTcp(const std::string& addr, Clock::time_point deadline, std::string* error);

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// GET http://addr/target with "Connection: close": the whole response, read to EOF, before
// the timeout; nullopt and *error otherwise (also for a malformed response).
std::optional<HttpResponse> HttpGet(const std::string& addr, const std::string& target,
                                    milliseconds timeout, std::string* error);

// ---------------------------------------------------------------------------------------------
// Prometheus' text exposition format (version 0.0.4).

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// name{k="v",...} with the labels in key order: one series.
std::string SeriesKey(const std::string& name, const std::map<std::string, std::string>& labels);

// Parses one sample line strictly: name[{k="v",...}] value [timestamp].
bool ParseSampleLine(const std::string& line, Sample* s);

// ---------------------------------------------------------------------------------------------
// Chaos (--chaos-kill-every) at the pace of this build on this machine.
//
// A kill costs a run about one recovery: from the worker's death until its replacement has
// attached and the run has moved on (the summary's recovery_max_s), most of it a process
// start: tens of milliseconds in the normal build on a quiet machine, a second under TSan on a
// loaded one. The supervisor kills again only once the run has moved past the previous kill,
// so no interval stalls a run; but kills closer together than a recovery leave a sync run one
// step per kill (a TSan run of the hosts' chaos test: 204 kills of one rank, one step each,
// until its 120 s deadline). A chaos test therefore measures a recovery in the same build at
// the same time (WithOneDeath, RecoverySeconds), keeps its kills a few recoveries apart
// (ChaosEveryMs), and expects the kills the pace it chose allows (KillsAtLeast).

// argv (a run of more than 10 steps with 2 workers or more, --log-format json) with rank 1
// ending at the start of its step 10 (--fault-point 1): one death, replaced as any other.
std::vector<std::string> WithOneDeath(std::vector<std::string> argv);

// The recovery of that death in seconds, from the run's summary line; a failure and NAN when
// the run recovered from no death.
double RecoverySeconds(const std::string& summary);

// The recovery of one death in the runs summary_of(steps) makes (each WithOneDeath's), from
// `steps` up: an async run may end before its replacement is attached, since the other workers
// go on without it (2000 updates in 0.07 s: restarts 1, recoveries 0), so a run that measured
// none is made 4 times longer, up to 3 times. A failure and NAN when none measured one.
double MeasureRecovery(const std::function<std::string(int64_t steps)>& summary_of,
                       int64_t steps);

// A chaos interval in milliseconds: `per_run` kills per undisturbed run of wall_s, but never
// less than `recoveries` x recovery_s, nor floor_ms.
int64_t ChaosEveryMs(double wall_s, double per_run, double recovery_s, double recoveries,
                     int64_t floor_ms);

// The steps of a run that lasts `intervals` chaos intervals of every_ms at least, from one of
// `steps` steps that took wall_s: steps itself, or a multiple of it (at most 10 times). Where a
// recovery is long next to a run's steps (a sanitizer's build), a run of the usual length sees
// hardly a kill at a pace that lets it move.
int64_t StepsForIntervals(int64_t steps, double wall_s, int64_t every_ms, double intervals);

// The kills a chaos run that lasted wall_s at an interval of every_ms has made at least: kills
// come 0.5 to 1.5 intervals apart once the run has moved past the previous one, which it has
// within a recovery (an interval of 2 recoveries or more leaves it that), so floor(wall_s /
// 1.5 intervals); this gives floor(wall_s / 2 intervals), which leaves room for recoveries
// slower than the one measured.
int KillsAtLeast(double wall_s, int64_t every_ms);

// "N restarts in T s (recoveries: median M s, max X s)", from a chaos run's summary line.
std::string ChaosOutcome(const std::string& summary);

// The median of v (NAN when empty); for an even count, the upper of the two middle values.
double Median(std::vector<double> v);

// ---------------------------------------------------------------------------------------------
// Other tools.

// Runs a shell command line with positional arguments ($0, $1, ...): the children of
// proc_util have stdin on /dev/null, so redirections happen in the shell.
ProcResult RunShell(const std::string& script, const std::vector<std::string>& args,
                    milliseconds timeout = milliseconds{60'000});

// `shmtrain <args>` run to its end (RunProcess); a train run gets --no-metrics, --no-progress and
// --log-every 0. A run that leaves a segment fails the current test.
ProcResult Shmtrain(std::vector<std::string> args, milliseconds timeout);

// Sets an environment variable for its lifetime and then restores what was there (unset if
// nothing): a test that picks the CPU path (SHMTRAIN_CPU) leaves the caller's choice to the
// tests after it, as CI's run of the AVX2 path needs.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// An .npy file `name` in dir of dtype descr ("<f4") and shape ("n, 4") whose data is a hole of
// data_bytes: as large as it says, no disk spent.
std::string SparseNpy(const TempDir& dir, const std::string& name, const std::string& descr,
                      const std::string& shape, int64_t data_bytes);

// Whether path (a tool CMake looked for) names an executable: not empty, not *-NOTFOUND.
bool ToolFound(const char* path);

}  // namespace shmtrain::test
