// Async across hosts (master/param_server.h) under Open MPI, judged from outside: real mpirun
// jobs of 2 or 3 host masters on this machine (tests/mpi_job.h), each running the single-host
// async protocol with its own workers while the exchange threads push every part to its owner.
//
//  1. Convergence: H hosts x 1 worker reach the held-out accuracy of one host with H workers
//     (same flags and seeds), within 1 point in the median over seeds.
//  2. Counts: every host trains its share of --steps (shm::AsyncHostUpdates), their sum is the
//     run's updates, and every push sent is applied or dropped at its owner, --max-staleness 0
//     dropping some.
//  3. The owner's delay compensation: with no exchange before the workers are done, only the
//     owners can compensate; a huge --lambda then ruins the model, lambda 0 trains.
//  4. Workers killed on host 1 (a torn update, a SIGKILL from the test): replaced, and the
//     counts stay exact.
//  5. A host master SIGKILLed: mpirun ends the job, nothing left. SIGSTOPped: the others end
//     the job after --host-timeout with exit 6, naming it, nothing left.
//  6. A slow host (its worker SIGSTOPped) slows no other: host 0's updates and pushes per
//     second stay within 10% of their rate while host 1 runs.
//  7. Refusals: what the parameter server cannot do under mpirun, and a host with no update.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/model_file.h"
#include "shm/layout.h"
#include "tests/mpi_job.h"
#include "tests/proc_util.h"
#include "tests/real_data.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::Clip;
using test::Clock;
using test::Contains;
using test::Events;
using test::ExitedWith;
using test::ExpectJobGone;
using test::JsonField;
using test::kEventTimeout;
using test::kGoneBound;
using test::kJobTimeout;
using test::MpiJob;
using test::Ms;
using test::Num;
using test::ProcResult;
using test::RunJob;
using test::SummaryOf;
using test::TempDir;
using test::WithoutMetrics;

constexpr const char* kMasterBin = SHMTRAIN_BIN;

class HostsAsyncTest : public test::MpiTest {};

// An async run of blobs (16 features, 4 classes), softmax cross-entropy, json output without
// progress or metrics unless asked; `extra` gives the rest (--workers, --steps, ...).
std::vector<std::string> AsyncBlobs(int rows, const std::string& layers, int batch,
                                    const std::vector<std::string>& extra) {
  std::vector<std::string> a = {kMasterBin,     "train",
                                "--mode",       "async",
                                "--example",    "blobs",
                                "--rows",       std::to_string(rows),
                                "--features",   "16",
                                "--layers",     layers,
                                "--loss",       "xent",
                                "--init",       "xavier",
                                "--batch",      std::to_string(batch),
                                "--log-format", "json",
                                "--no-progress"};
  a.insert(a.end(), extra.begin(), extra.end());
  return WithoutMetrics(a);
}

// The integers of the array `key` of a summary line ("host_updates":[501,500]).
std::vector<int64_t> Ints(const std::string& summary, const std::string& key) {
  std::vector<int64_t> v;
  const std::string k = "\"" + key + "\":[";
  size_t i = summary.find(k);
  if (i == std::string::npos) {
    ADD_FAILURE() << key << " missing in summary " << summary;
    return v;
  }
  i += k.size();
  while (i < summary.size() && summary[i] != ']') {
    size_t used = 0;
    v.push_back(std::stoll(summary.substr(i), &used));
    i += used;
    if (summary[i] == ',') ++i;
  }
  return v;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Each host's share of `steps` updates.
std::vector<int64_t> Shares(int64_t steps, int hosts) {
  std::vector<int64_t> v;
  for (int h = 0; h < hosts; ++h) v.push_back(shm::AsyncHostUpdates(steps, hosts, h));
  return v;
}

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return "[" + s + "]";
}

// The cross-host accounting of a good end's summary (host 0's, for the run): the hosts' updates
// are their shares of `steps` and add up to the run's updates; every push sent is applied or
// dropped at its owner; the staleness quantiles are ordered.
void ExpectCrossHostCounts(const std::string& s, int64_t steps, int hosts) {
  EXPECT_EQ(Num(s, "hosts"), hosts) << s;
  const std::vector<int64_t> per = Ints(s, "host_updates");
  EXPECT_EQ(Join(per), Join(Shares(steps, hosts))) << "each host trains its share: " << s;
  EXPECT_EQ(Sum(per), steps) << s;
  EXPECT_EQ(Num(s, "updates"), steps) << s;
  EXPECT_EQ(Num(s, "steps"), steps) << s;
  EXPECT_EQ(Num(s, "param_version"), steps) << s;
  const std::vector<int64_t> here = Ints(s, "worker_updates");
  if (!per.empty()) {
    EXPECT_EQ(Sum(here), per[0]) << "host 0's workers: " << s;
  }
  const double sent = Num(s, "pushes_sent"), applied = Num(s, "pushes_applied"),
               dropped = Num(s, "pushes_dropped");
  EXPECT_GT(sent, 0) << s;
  EXPECT_EQ(sent, applied + dropped) << "a push neither applied nor dropped: " << s;
  EXPECT_GT(Num(s, "push_bytes"), 0) << s;
  EXPECT_LE(Num(s, "cross_staleness_p50"), Num(s, "cross_staleness_p90")) << s;
  EXPECT_LE(Num(s, "cross_staleness_p90"), Num(s, "cross_staleness_max")) << s;
}

// ---------------------------------------------------------------------------------------------
// 2. Counts add up exactly.

// The runs of the counts: an update takes about 0.3 ms (batch 64 through 16-256-4), so that the
// hosts push while they train (a run of tiny updates ends before the first push), and 2048 rows
// are 32 whole minibatches.
constexpr int kCountRows = 2048;
constexpr const char* kCountLayers = "16,256,4";
constexpr int64_t kCountBatch = 64;

// 2 hosts x 2 workers, an odd number of updates: host 0 trains 501, host 1 500, and with no
// drop every update trained one minibatch.
TEST_F(HostsAsyncTest, CountsAddUpExactly) {
  constexpr int64_t kSteps = 1001;
  const ProcResult r = RunJob(2, AsyncBlobs(kCountRows, kCountLayers, kCountBatch,
                                            {"--workers", "2", "--steps", std::to_string(kSteps),
                                             "--lr", "0.05", "--log-every", "0"}));
  ASSERT_TRUE(ExitedWith(r, 0));
  const std::string s = SummaryOf(r);
  std::printf("[ 2 hosts x 2 ] %s\n", s.c_str());
  ExpectCrossHostCounts(s, kSteps, 2);
  EXPECT_EQ(Num(s, "pushes_dropped"), 0) << "nothing is dropped without --max-staleness: " << s;
  EXPECT_EQ(Num(s, "dropped"), 0) << s;
  const double samples = static_cast<double>(kCountBatch * kSteps);
  EXPECT_NEAR(Num(s, "samples_per_s") * Num(s, "wall_s"), samples, 1e-6 * samples)
      << "every update trains one minibatch of " << kCountBatch
      << " rows, on whichever host: " << s;
}

// 3 hosts x 1 worker with --max-staleness 0: a push from a host that has not pulled the part
// since another host's push was applied is dropped at the owner, and still counted as sent.
// One worker a host never drops locally (no other local update comes between its read and its
// apply), and every host still trains exactly its share.
TEST_F(HostsAsyncTest, DroppedPushesAreCountedAndTheSharesStayExact) {
  constexpr int64_t kSteps = 3000;
  const ProcResult r =
      RunJob(3, AsyncBlobs(kCountRows, kCountLayers, kCountBatch,
                           {"--workers", "1", "--steps", std::to_string(kSteps), "--lr", "0.05",
                            "--max-staleness", "0", "--log-every", "0"}));
  ASSERT_TRUE(ExitedWith(r, 0));
  const std::string s = SummaryOf(r);
  std::printf("[ 3 hosts x 1, --max-staleness 0 ] %s\n", s.c_str());
  ExpectCrossHostCounts(s, kSteps, 3);
  EXPECT_GT(Num(s, "pushes_dropped"), 0) << "no push was stale with 3 hosts pushing: " << s;
  EXPECT_LE(Num(s, "cross_staleness_max"), 0) << "a push staler than 0 was applied: " << s;
  EXPECT_EQ(Num(s, "dropped"), 0) << "one worker a host has no local staleness: " << s;
}

// ---------------------------------------------------------------------------------------------
// 7. Refusals, before any worker starts: exit 2, a message naming the flag, nothing left.

struct Refusal {
  std::string name;                // the flag refused
  std::vector<std::string> flags;  // given besides the run's own
  std::string message;             // in stderr
};

void PrintTo(const Refusal& r, std::ostream* os) {
  *os << r.name;
}

// Ends with exit 2 before any worker of any host starts, `message` in stderr, nothing left.
void ExpectRefusedBeforeAnyWorker(MpiJob& job, const std::string& message) {
  const ProcResult r = job.Wait(kJobTimeout);
  ExpectJobGone(job, Clock::now(), milliseconds{2'000});
  EXPECT_TRUE(ExitedWith(r, 2));
  EXPECT_TRUE(Contains(r.err, message)) << Clip(r.err);
  EXPECT_TRUE(Events(r.out, "worker_started").empty()) << Clip(r.out);
  for (int h = 0; h < job.hosts(); ++h) {
    EXPECT_TRUE(job.workers(h).empty()) << job.DescribeWorkers();
  }
}

class HostsAsyncRefusalTest : public HostsAsyncTest,
                              public ::testing::WithParamInterface<Refusal> {};

// The parameter server's parts live in the host masters, outside the segment: no checkpoint
// holds them, and no host validates the run's parameters (main.cc, JoinTheHosts).
// --checkpoint-every is accepted only with --checkpoint, which the refusal names first (a
// --checkpoint-every alone is refused by the flags' own check, naming it).
TEST_P(HostsAsyncRefusalTest, IsRefusedUnderMpirun) {
  TempDir dir;
  std::vector<std::string> extra = {"--workers", "2", "--steps", "100", "--lr", "0.05"};
  for (const std::string& f : GetParam().flags) {
    extra.push_back(f == "DIR" ? dir.path()
                               : (f.rfind("DIR/", 0) == 0 ? dir.File(f.substr(4)) : f));
  }
  MpiJob job(2, AsyncBlobs(400, "16,32,4", 16, extra));
  ExpectRefusedBeforeAnyWorker(job, GetParam().message);
  EXPECT_FALSE(test::FileExists(dir.File("never.ckpt"))) << "a refused run wrote a checkpoint";
}

constexpr const char* kRefused = " is not available with --mode async across 2 hosts";

INSTANTIATE_TEST_SUITE_P(Flags, HostsAsyncRefusalTest,
                         ::testing::Values(Refusal{"checkpoint",
                                                   {"--checkpoint", "DIR/never.ckpt"},
                                                   std::string("--checkpoint") + kRefused},
                                           Refusal{"checkpoint_every",
                                                   {"--checkpoint", "DIR/never.ckpt",
                                                    "--checkpoint-every", "10"},
                                                   std::string("--checkpoint") + kRefused},
                                           Refusal{"checkpoint_every_alone",
                                                   {"--checkpoint-every", "10"},
                                                   "--checkpoint-every: needs --checkpoint PATH"},
                                           Refusal{"resume",
                                                   {"--resume", "DIR/absent.ckpt"},
                                                   std::string("--resume") + kRefused},
                                           Refusal{"early_stop",
                                                   {"--early-stop", "3", "--val-split", "0.2"},
                                                   std::string("--early-stop") + kRefused}),
                         [](const auto& info) { return info.param.name; });

// --steps 1 across 2 hosts leaves host 1 no update (shm::AsyncHostUpdates): host 1 refuses to
// start, naming --steps, and host 0 learns of it at the start's exchange; neither starts a
// worker.
TEST_F(HostsAsyncTest, StepsThatLeaveAHostNoUpdateAreRefused) {
  MpiJob job(2, AsyncBlobs(400, "16,32,4", 16, {"--workers", "1", "--steps", "1", "--lr", "0.05"}));
  ExpectRefusedBeforeAnyWorker(job, "--steps 1 leaves host 1 no update");
  // Two updates are one each: the same job runs.
  const ProcResult ok =
      RunJob(2, AsyncBlobs(400, "16,32,4", 16, {"--workers", "1", "--steps", "2", "--lr", "0.05"}));
  ASSERT_TRUE(ExitedWith(ok, 0));
  EXPECT_EQ(Join(Ints(SummaryOf(ok), "host_updates")), "[1,1]");
}

}  // namespace
}  // namespace shmtrain
