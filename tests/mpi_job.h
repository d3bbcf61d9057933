// Real mpirun jobs of host masters on this machine, watched from outside: the machinery of the
// tests of several hosts (tests/hosts_test.cc: sync, tests/hosts_async_test.cc: async).
//
// `mpirun -np H shmtrain train ...` runs H host masters (one MPI rank each, TCP over loopback),
// each with its own segment and workers. An MpiJob reads the job's stdout (the json "host"
// events name the masters' pids, segments and metrics addresses) and, while it reads, looks at
// mpirun's children (the host masters) and theirs (the workers, whose command lines say rank
// and incarnation), so that a test knows every process of the job and every incarnation of
// every rank it saw.
//
// Every job is tagged (mpirun -x SHMTRAIN_HOSTS_TEST_JOB=<tag>, inherited by the masters and
// their workers), so "nothing left" (ExpectJobGone) means: no live process carries the tag,
// mpirun is gone, and no segment of any of its host masters is in /dev/shm. A job looks at no
// other job's processes or segments: other tests may run concurrently (ctest -j2).
//
// Not thread-safe: one test thread drives a job.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/proc_util.h"

namespace shmtrain::test {

// Generous bounds for whole jobs: a job here takes one or two seconds (most of it mpirun's own
// start), but sanitizer builds under ctest -j2 are several times slower. A hang still fails.
constexpr milliseconds kJobTimeout{120'000};
constexpr milliseconds kEventTimeout{60'000};
// The bound of docs/hosts.md ("Faults"): after a host master's death, every process of the job
// and every segment gone within this (about 2 s documented; the rest is margin for a
// sanitizer build under ctest -j2).
constexpr milliseconds kGoneBound{5'000};

// The environment variable that marks every process of one job (mpirun -x; shmtrain launch
// passes every SHMTRAIN_* variable on).
inline constexpr const char* kTagVar = "SHMTRAIN_HOSTS_TEST_JOB";
// The live processes whose environment holds kTagVar=tag.
std::vector<pid_t> TaggedProcesses(const std::string& tag);
// Where this test process's mpirun jobs keep Open MPI's session directories (removed when the
// process ends): two jobs started at the same moment under the shared default race.
const std::string& SessionBase();

bool Contains(const std::string& haystack, const std::string& needle);
long long Ms(Clock::duration d);
// The time left until deadline (0 once it has passed).
milliseconds Left(Clock::time_point deadline);

// Every test of several hosts needs mpirun (found by CMake): SetUp fails the test, saying what
// to install, when it is missing.
class MpiTest : public ::testing::Test {
 protected:
  void SetUp() override;
};

// What a host master said about itself (its "host" event).
struct HostInfo {
  pid_t pid = -1;
  std::string segment;  // "/shmtrain-..."
  std::string metrics;  // "127.0.0.1:PORT", or "" without metrics
};

// A worker as its command line names it: shmtrain-worker SEGMENT RANK INCARNATION.
struct WorkerSeen {
  int rank = -1;
  int incarnation = -1;
};

// One mpirun job of host masters (above). On destruction, a job still running is ended
// (SIGTERM to mpirun, which ends its ranks), and any process still carrying its tag is
// SIGKILLed by pid.
class MpiJob {
 public:
  // The same shmtrain command (argv[0] the binary) on `hosts` host masters.
  MpiJob(int hosts, const std::vector<std::string>& shmtrain_argv);
  // One app context per entry: `count` ranks running its command.
  explicit MpiJob(const std::vector<std::pair<int, std::vector<std::string>>>& contexts);
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  pid_t mpirun() const { return p_.pid(); }
  const std::string& tag() const { return tag_; }
  int hosts() const { return hosts_; }
  const std::string& err() const { return p_.err(); }
  bool SignalMpirun(int sig) { return p_.Signal(sig); }

  // Host h's "host" event, or nullptr before it came.
  const HostInfo* host(int h) const;
  // Every host master seen: mpirun's children and the pids of the host events.
  std::set<pid_t> masters() const;
  // Every worker of host h seen so far (pid -> rank and incarnation).
  std::map<pid_t, WorkerSeen> workers(int h) const;
  // Whether rank `rank` of host h was seen in incarnation `incarnation`.
  bool SawIncarnation(int h, int rank, int incarnation) const;

  // Reads stdout until want(line) holds (the line in *hit). false if the output ended or the
  // timeout passed first.
  bool Until(const std::function<bool(const std::string&)>& want, milliseconds timeout,
             std::string* hit = nullptr);
  // Reads stdout and watches until cond() holds; false at the end of the output or timeout.
  bool UntilCondition(const std::function<bool()>& cond, milliseconds timeout);
  // Until every host's "host" event has come and `workers` ranks of every host were seen.
  bool UntilRunning(int workers, milliseconds timeout);
  // Reads stdout and watches for `d` (false if the output ended first).
  bool Pause(milliseconds d);

  // Waits for mpirun to end (watching meanwhile); past the timeout it is SIGKILLed and the
  // test fails (Subprocess::Wait).
  ProcResult Wait(milliseconds timeout);

  // How the workers of every host were seen, for failure messages.
  std::string DescribeWorkers() const;

 private:
  static int CountOf(const std::vector<std::pair<int, std::vector<std::string>>>& contexts);
  static std::vector<std::string> Argv(
      const std::string& tag,
      const std::vector<std::pair<int, std::vector<std::string>>>& contexts);
  bool Read(std::string* line, Clock::time_point deadline);
  void Note(const std::string& line);
  void Watch();

  const std::string tag_;
  const int hosts_;
  Subprocess p_;
  std::map<int, HostInfo> hosts_seen_;
  std::set<pid_t> masters_;
  std::map<pid_t, std::map<pid_t, WorkerSeen>> workers_;  // by master pid
  bool ended_ = false;                                    // the end of stdout was read
  Clock::time_point next_watch_;
};

// After the job has ended (or is ending): within `bound` of `since`, no process carries its
// tag, no master or worker it saw is alive, no segment of any of its masters remains. Returns
// how long that took from `since`; adds failures naming what is left.
Clock::duration ExpectJobGone(MpiJob& job, Clock::time_point since, milliseconds bound);

// SIGKILLs host `victim`'s master: mpirun must end the job within kGoneBound with the dead
// rank's signal (exit 137) and a message naming the rank, and nothing of the job may be left
// (docs/hosts.md). Returns how the job ended.
ProcResult KillHostMaster(MpiJob& job, int victim);

// SIGSTOPs host 1's master: the others must end the job with exit 6 once `host_timeout` has
// passed (not before it, and within kGoneBound after it), naming host 1 in a message that
// contains `what` ("nothing arrived from host 1 (" in sync), and nothing may be left.
void StopHostMaster(MpiJob& job, milliseconds host_timeout, const std::string& what);

// Runs a job of `hosts` host masters to its end and expects nothing of it left within 2 s;
// returns how it ended.
ProcResult RunJob(int hosts, const std::vector<std::string>& argv);

// Whether the flags choose about metrics (--no-metrics or --metrics-addr).
bool ChoosesMetrics(const std::vector<std::string>& a);
// a with --no-metrics unless it chooses already.
std::vector<std::string> WithoutMetrics(std::vector<std::string> a);

// A base port p with 127.0.0.1:p .. p+count-1 all free, below the kernel's ephemeral range:
// the ports that other tests get by binding port 0 come from that range, so none of them can
// take these between this check and the job's listen. -1 if none was found.
int PickFreePorts(int count);

// Host 0's live page (/api/run on 127.0.0.1:base) lists every host's workers, with the pids
// the job's processes have, within 10 s (each host master reports its own about once a
// second); a failure otherwise.
void ExpectThePageListsEveryHostsWorkers(MpiJob& job, int base);

}  // namespace shmtrain::test
