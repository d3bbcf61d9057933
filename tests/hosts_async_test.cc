// Async across hosts (master/hosts/param_server.h) under Open MPI, judged from outside: real mpirun
// jobs of 2 or 3 host masters on this machine (tests/mpi_job.h), each running the single-host
// async protocol with its own workers while the exchange threads push every part to its owner.
//
//  1. Convergence: 2 and 3 hosts x 1 worker reach the held-out accuracy of one host with 2 and
//     3 workers (same flags and seeds), within 1 point in the median over seeds.
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
//  7. Refusals: what async across hosts cannot do under mpirun, and a host with no update.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shm/layout.h"
#include "tests/mpi_job.h"
#include "tests/proc_util.h"
#include "tests/real_data.h"
#include "tests/reference.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::Clip;
using test::Clock;
using test::Contains;
using test::Events;
using test::ExitedWith;
using test::ExpectJobGone;
using test::KillHostMaster;
using test::JsonField;
using test::kEventTimeout;
using test::kGoneBound;
using test::kJobTimeout;
using test::MpiJob;
using test::Ms;
using test::Num;
using test::ProcResult;
using test::RunJob;
using test::StopHostMaster;
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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v[v.size() / 2];
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
// 1. Convergence on fashion8 (tests/real_data.h): H hosts x 1 worker against one host with H
// workers, the same flags and seed, for each of kConvergenceSeeds seeds; the median over the
// seeds of the difference in held-out accuracy must be above -1 point (-1.6 for 3 hosts).
//
// Why this run: the hosts exchange every --push-every (4) updates only if their exchange
// threads get the CPU, and with H workers busy on this 2-core machine (and its other load) they
// often do not: a push then carries tens of updates (10 to 110 for 64-128-10 at batch 32, 60 us
// an update), and the hosts drift apart by as much before they hear of each other. 64-1024-10
// at batch 64 (about 1.3 ms an update) keeps 2 hosts at 6 to 9 updates a push; the cosine
// schedule settles the last updates. 2 hosts, measured over seeds 1..5 or 1..6 (multi minus
// single, points): +0.6 -0.6 -0.3 +0.6 -0.3 +0.3; +0.3 -0.3 -0.3 +0.8 -0.3 (median -0.3); the
// same seed on one host varies by under 0.3 points from run to run. Hosts that never merge what
// they pull (each trains alone and undoes the other's pushes) fall 0.8 to 3.3 points short:
// median -1.95, red.
//
// 3 hosts met the bound only once the exchange kept its pace on a machine whose cores are all
// busy (the workers at nice +5 below their master, naps no longer than the next push is away;
// docs/hosts.md, async across hosts). Before: a push carried 7 to 110 updates and the median over 5
// seeds measured -0.8, -9.2, -1.4, +0.3, -3.6, -1.1 in six runs (single seeds down to -17
// points). After, at a load average of 10: 5.6 to 9.4 updates a push, medians +0.28, -0.84,
// +0.28, -0.84, +0.00, -0.56 in six runs; in CI's normal build, beside its other tests (6 to
// 11 updates a push), -1.11 in both attempts of one run. 3 hosts that never merge what they
// pull: medians -4.18 and -2.23 (seeds down to -24.8 points). So 3 hosts are held to -1.6
// points, between the two; 2 hosts keep -1.
constexpr int kConvergenceSeeds = 5;
double ConvergenceBound(int hosts) { return hosts <= 2 ? -1.0 : -1.6; }

std::vector<std::string> Fashion8Run(const std::string& data, int workers, int seed) {
  return {kMasterBin,      "train",       "--mode",        "async",
          "--rule",        "dc-asgd-a",   "--workers",     std::to_string(workers),
          "--data",        data,          "--normalize",   "minmax",
          "--val-split",   "0.2",         "--seed",        std::to_string(seed),
          "--layers",      "64,1024,10",  "--activation",  "tanh",
          "--loss",        "xent",        "--init",        "xavier",
          "--lr",          "0.2",         "--lr-schedule", "cosine",
          "--batch",       "64",          "--steps",       "600",
          "--log-every",   "0",           "--log-format",  "json",
          "--no-progress", "--no-metrics"};
}

class HostsAsyncConvergenceTest : public HostsAsyncTest,
                                  public ::testing::WithParamInterface<int> {};

// One comparison over the seeds: the median difference in points, and the runs' lines.
double MedianDifference(const std::string& data, int H, std::string* runs) {
  std::vector<double> diffs;
  for (int seed = 1; seed <= kConvergenceSeeds; ++seed) {
    const ProcResult one = test::RunProcess(Fashion8Run(data, H, seed), kJobTimeout);
    EXPECT_TRUE(ExitedWith(one, 0));
    const ProcResult multi = RunJob(H, Fashion8Run(data, 1, seed));
    EXPECT_TRUE(ExitedWith(multi, 0));
    const std::string s1 = SummaryOf(one), sm = SummaryOf(multi);
    EXPECT_EQ(Num(sm, "updates"), 600) << sm;
    const double a1 = Num(s1, "val_accuracy"), am = Num(sm, "val_accuracy");
    diffs.push_back(100 * (am - a1));
    char line[200];
    std::snprintf(line, sizeof line,
                  "  seed %d: one host %.4f, %d hosts %.4f (%+.2f points; %g pushes, %.1f "
                  "updates a push)\n",
                  seed, a1, H, am, diffs.back(), Num(sm, "pushes_sent"),
                  600.0 * H / std::max(1.0, Num(sm, "pushes_sent")));
    *runs += line;
  }
  return Median(diffs);
}

// Both kinds of run are async, so neither is reproducible: a median past the bound is measured
// once more before the test fails (a broken exchange misses it both times: see above).
TEST_P(HostsAsyncConvergenceTest, ReachesTheAccuracyOfOneHost) {
  SHMTRAIN_CONVERGENCE_TEST();
  const int H = GetParam();
  const std::string data = test::SmallFashionCsv();
  ASSERT_FALSE(data.empty()) << "no data set: the failure above says why";
  std::string runs;
  double median = 0;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    runs += "attempt " + std::to_string(attempt) + ":\n";
    median = MedianDifference(data, H, &runs);
    std::printf("[ %d hosts x 1 worker against one host with %d ] median %+.2f points\n", H, H,
                median);
    if (median >= ConvergenceBound(H) || ::testing::Test::HasFailure()) break;
  }
  std::printf("%s", runs.c_str());
  EXPECT_GE(median, ConvergenceBound(H))
      << H << " hosts fall more than " << -ConvergenceBound(H) << " points short of one host:\n"
      << runs;
}

INSTANTIATE_TEST_SUITE_P(Hosts, HostsAsyncConvergenceTest, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "hosts"; });

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
// 3. The owner's delay compensation. Workers compensate too: a worker's correction uses
// w - w_bak, and with one worker a host no other local update moves w during its computation,
// but the exchange does (a pulled part merged into W), so with the default --push-every a huge
// lambda diverges whoever compensates (it did with the owner's lambda zeroed). With
// --push-every past the host's share no host pushes before its workers are done: the workers'
// w never moves under them (w = w_bak exactly), and the only compensation left is the owners',
// on the end's pushes: at each owner one of the two hosts' pushes comes second, stale by the
// other's (tau 1), and is compensated against its backup. A lambda of 1e12 then ruins the
// model (non-finite: exit 5; or weights driven far out), lambda 0 sums the two hosts' work and
// trains. An owner that skipped the compensation would give the lambda-0 model both times.

double MaxAbsParam(const std::string& path) {
  double most = 0;
  for (float v : test::LoadSaved(path).params)
    most = std::max(most, static_cast<double>(std::fabs(v)));
  return most;
}

TEST_F(HostsAsyncTest, TheOwnerCompensatesTheStalePush) {
  SHMTRAIN_CONVERGENCE_TEST();  // the rule itself: tests/param_server_test.cc, in every build
  constexpr int64_t kSteps = 800;
  TempDir dir;
  auto run = [&](const std::string& lambda) {
    return AsyncBlobs(4096, "16,512,4", 256,
                      {"--rule", "dc-asgd-c", "--lambda", lambda, "--workers", "1", "--steps",
                       std::to_string(kSteps), "--lr", "0.05", "--push-every", "1000000",
                       "--log-every", "0", "--save", dir.File("lambda" + lambda + ".model")});
  };
  const ProcResult plain = RunJob(2, run("0"));
  ASSERT_TRUE(ExitedWith(plain, 0));
  const std::string s = SummaryOf(plain);
  EXPECT_LT(Num(s, "final_loss"), 0.05) << "lambda 0 did not train: " << s;
  EXPECT_EQ(Num(s, "pushes_sent"), 4) << "each host pushes each part once, at the end: " << s;
  EXPECT_EQ(Num(s, "cross_staleness_max"), 1) << s;
  const double plain_max = MaxAbsParam(dir.File("lambda0.model"));

  const ProcResult wild = RunJob(2, run("1e12"));
  if (wild.exited && wild.exit_code == 5) {
    EXPECT_TRUE(Contains(wild.err, "not finite")) << Clip(wild.err);
    std::printf("[ lambda 1e12 ] the owner's compensation made the model non-finite (exit 5)\n");
    return;
  }
  ASSERT_TRUE(ExitedWith(wild, 0));
  const double wild_max = MaxAbsParam(dir.File("lambda1e12.model"));
  std::printf("[ lambda 1e12 ] weights up to %g (lambda 0: %g)\n", wild_max, plain_max);
  EXPECT_GT(wild_max, 100 * plain_max)
      << "lambda 1e12 trained as lambda 0: the owners applied no compensation\n"
      << SummaryOf(wild);
}

// ---------------------------------------------------------------------------------------------
// 4. Workers killed on host 1 while the hosts exchange: rank 0 SIGKILLs itself halfway through
// applying an update (--fault-point 7: a torn update, settled by host 1's master), and the test
// SIGKILLs rank 1. Host 1's master replaces both (their incarnation 1 is seen), host 0 restarts
// nothing, and the counts stay exact: every host trains exactly its share.

TEST_F(HostsAsyncTest, WorkersKilledOnHost1KeepTheCountsExact) {
  // A second or more, so that the kill lands mid-run; instrumented steps are 5x longer or more.
  const int64_t kSteps = test::UnlessSanitized<int64_t>(16000, 4000);
  MpiJob job(2, AsyncBlobs(kCountRows, kCountLayers, kCountBatch,
                           {"--workers", "2", "--steps", std::to_string(kSteps), "--lr", "0.05",
                            "--log-every", "100", "--fault-host", "1", "--fault-rank", "0",
                            "--fault-point", "7", "--fault-step", "50"}));
  ASSERT_GT(job.mpirun(), 0);
  ASSERT_TRUE(job.UntilRunning(2, kEventTimeout)) << "the job did not start; stderr:\n"
                                                  << job.err() << job.DescribeWorkers();
  ASSERT_TRUE(job.Until([](const std::string& l) { return JsonField(l, "event") == "step"; },
                        kEventTimeout))
      << job.err();
  pid_t victim = -1;
  for (const auto& [pid, w] : job.workers(1)) {
    if (w.rank == 1 && w.incarnation == 0) victim = pid;
  }
  ASSERT_GT(victim, 0) << job.DescribeWorkers();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const ProcResult r = job.Wait(kJobTimeout);
  ExpectJobGone(job, Clock::now(), milliseconds{2'000});
  ASSERT_TRUE(ExitedWith(r, 0));
  const std::string s = SummaryOf(r);
  std::printf("[ killed on host 1 ] %s\n%s", s.c_str(), job.DescribeWorkers().c_str());
  ExpectCrossHostCounts(s, kSteps, 2);
  EXPECT_TRUE(job.SawIncarnation(1, 0, 1)) << "the torn update did not happen on host 1:\n"
                                           << job.DescribeWorkers();
  EXPECT_TRUE(job.SawIncarnation(1, 1, 1)) << "host 1's rank 1 was not replaced:\n"
                                           << job.DescribeWorkers();
  for (const auto& [pid, w] : job.workers(0)) {
    EXPECT_EQ(w.incarnation, 0) << "host 0 restarted a worker:\n" << job.DescribeWorkers();
  }
  EXPECT_EQ(Num(s, "restarts"), 0) << "host 0's summary counts host 0's restarts: " << s;
}

// ---------------------------------------------------------------------------------------------
// 5. A host master SIGKILLed mid-run (either host): mpirun ends the job (exit 137, naming the
// rank); every process of the job and every segment is gone within the bound (the dead
// master's workers remove its segment: without that, its segment was left). A host master
// SIGSTOPped: the other's exchange hears nothing from it for --host-timeout (3 s here) and
// ends the job with exit 6, naming host 1; nothing is left.

std::vector<std::string> LongAsyncRun(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"--workers", "1",    "--steps",     "100000000",
                                "--lr",      "0.05", "--log-every", "200"};
  a.insert(a.end(), extra.begin(), extra.end());
  return AsyncBlobs(kCountRows, kCountLayers, kCountBatch, a);
}

// Until the job is training and exchanging: host 0 logged an update past 1000.
bool UntilExchanging(MpiJob& job) {
  return job.UntilRunning(1, kEventTimeout) &&
         job.Until(
             [](const std::string& l) {
               return JsonField(l, "event") == "step" && std::stoll(*JsonField(l, "step")) >= 1000;
             },
             kEventTimeout);
}

// A long 2-host run serving metrics from *base (host h at *base + h), started and exchanging.
void StartExchangingWithMetrics(std::unique_ptr<MpiJob>* job, int* base) {
  *base = test::PickFreePorts(2);
  ASSERT_GT(*base, 0);
  *job = std::make_unique<MpiJob>(
      2, LongAsyncRun({"--metrics-addr", "127.0.0.1:" + std::to_string(*base)}));
  ASSERT_GT((*job)->mpirun(), 0);
  ASSERT_TRUE(UntilExchanging(**job)) << "the job did not get going; stderr:\n"
                                      << (*job)->err() << (*job)->DescribeWorkers();
}

TEST_F(HostsAsyncTest, HostMasterKilledEndsTheJob) {
  for (const int victim : {1, 0}) {
    SCOPED_TRACE("host " + std::to_string(victim) + "'s master SIGKILLed");
    MpiJob job(2, LongAsyncRun({"--host-timeout", "60s"}));
    ASSERT_GT(job.mpirun(), 0);
    ASSERT_TRUE(UntilExchanging(job)) << "the job did not get going; stderr:\n"
                                      << job.err() << job.DescribeWorkers();
    KillHostMaster(job, victim);
  }
}

TEST_F(HostsAsyncTest, StoppedHostMasterEndsTheJobAfterTheHostTimeout) {
  constexpr milliseconds kHostTimeout{3'000};
  MpiJob job(2, LongAsyncRun({"--host-timeout", "3s"}));
  ASSERT_GT(job.mpirun(), 0);
  ASSERT_TRUE(UntilExchanging(job)) << "the job did not get going; stderr:\n"
                                    << job.err() << job.DescribeWorkers();
  StopHostMaster(job, kHostTimeout, "async exchange: nothing arrived from host 1 (");
}

// ---------------------------------------------------------------------------------------------
// 6. A slow host slows no other. 2 hosts x 1 worker; host 1's worker is SIGSTOPped and let go
// again in turns (phases of kPhase: running, stopped, running, ..., running), and host 0's
// metrics endpoint is read at every turn: its updates (shmtrain_steps_total) and its pushes
// (shmtrain_host_pushes_total) per second. Each stopped phase is compared with the mean of the
// two running phases around it, and the median of those ratios must be 0.9 or more, for the
// updates and for the pushes. Stopping host 1's worker frees a core on this 2-core machine, so
// the comparison can only favour the stopped phases: the slow host must not make host 0
// slower. Turns, not two runs, and each stopped phase against its neighbours, because the
// machine's other load swings host 0's rate by 2 to 4 times within seconds (3000 to 16000
// updates a second). A failed measurement is made once more in the same run, and the test
// fails when both fail: a real wait on the slow host fails every time. Host 0's workers never
// wait for the exchange, so its updates can only slow through the CPU; its pushes would stop if
// the exchange waited for the slow host (pushes held until host 1 had pushed again turned the
// test red: 4 pushes a second while host 1 was stopped, 337 while it ran).

// Host 0's counters, read from its endpoint.
struct Counters {
  double updates = -1, pushes = -1;
  Clock::time_point at;
};

bool Scrape(const std::string& addr, Counters* c, std::string* error) {
  const auto resp = test::HttpGet(addr, "/metrics", milliseconds{5'000}, error);
  c->at = Clock::now();
  if (!resp.has_value()) return false;
  for (const std::string& line : test::SplitLines(resp->body)) {
    if (line.empty() || line[0] == '#') continue;
    test::Sample sample;
    if (!test::ParseSampleLine(line, &sample)) continue;
    if (sample.name == "shmtrain_steps_total") c->updates = sample.value;
    if (sample.name == "shmtrain_host_pushes_total") c->pushes = sample.value;
  }
  if (c->updates < 0 || c->pushes < 0) *error = "no steps or pushes in:\n" + Clip(resp->body);
  return c->updates >= 0 && c->pushes >= 0;
}

std::string List(const std::vector<double>& v) {
  std::string s;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, "%s%.0f", s.empty() ? "" : " ", x);
    s += buf;
  }
  return s;
}

// Sends SIGCONT to a stopped worker however the test ends.
struct Resume {
  pid_t pid;
  ~Resume() {
    if (pid > 0) kill(pid, SIGCONT);
  }
};

// Host 0's rates around the turns of host 1's worker: the ratios of each stopped phase's rate to
// its running neighbours' mean, for the updates and the pushes.
struct Turns {
  std::vector<double> updates, pushes;           // per phase, per second
  std::vector<double> update_ratio, push_ratio;  // per stopped phase
  std::string Describe() const {
    return "updates/s by phase (running, stopped, ...): " + List(updates) +
           "\npushes/s by phase: " + List(pushes);
  }
};

Turns MeasureTurns(MpiJob& job, pid_t slow, const std::string& addr) {
  constexpr int kTurns = 8;
  constexpr milliseconds kPhase{300};
  Turns t;
  std::string error;
  Counters last;
  if (!Scrape(addr, &last, &error)) {
    ADD_FAILURE() << error;
    return t;
  }
  for (int phase = 0; phase < 2 * kTurns + 1; ++phase) {
    const bool stopped = phase % 2 == 1;
    if (kill(slow, stopped ? SIGSTOP : SIGCONT) != 0 || !job.Pause(kPhase)) {
      ADD_FAILURE() << "the run ended; stderr:\n" << job.err();
      return t;
    }
    Counters now;
    if (!Scrape(addr, &now, &error)) {
      ADD_FAILURE() << error;
      return t;
    }
    const double s = std::chrono::duration<double>(now.at - last.at).count();
    t.updates.push_back((now.updates - last.updates) / s);
    t.pushes.push_back((now.pushes - last.pushes) / s);
    last = now;
  }
  kill(slow, SIGCONT);
  for (size_t k = 1; k + 1 < t.updates.size(); k += 2) {
    t.update_ratio.push_back(t.updates[k] /
                             std::max(1.0, (t.updates[k - 1] + t.updates[k + 1]) / 2));
    t.push_ratio.push_back(t.pushes[k] / std::max(1.0, (t.pushes[k - 1] + t.pushes[k + 1]) / 2));
  }
  return t;
}

// Host 0's live page lists every host's workers: the parameter server's thread reports them.
TEST_F(HostsAsyncTest, HostZerosPageListsEveryHostsWorkers) {
  std::unique_ptr<MpiJob> started;
  int base = 0;
  ASSERT_NO_FATAL_FAILURE(StartExchangingWithMetrics(&started, &base));
  MpiJob& job = *started;
  test::ExpectThePageListsEveryHostsWorkers(job, base);
  ASSERT_TRUE(job.SignalMpirun(SIGINT));
  const Clock::time_point ended = Clock::now();
  (void)job.Wait(milliseconds{30'000});
  ExpectJobGone(job, ended, kGoneBound);
}

TEST_F(HostsAsyncTest, AStoppedWorkerOnHost1SlowsNotHost0) {
  SHMTRAIN_RATE_TEST();
  std::unique_ptr<MpiJob> started;
  int base = 0;
  ASSERT_NO_FATAL_FAILURE(StartExchangingWithMetrics(&started, &base));
  MpiJob& job = *started;
  pid_t slow = -1;
  for (const auto& [pid, w] : job.workers(1)) slow = pid;
  ASSERT_GT(slow, 0) << job.DescribeWorkers();
  const Resume resume{slow};
  const std::string addr = job.host(0)->metrics;
  std::string seen;
  bool held = false;
  for (int attempt = 1; attempt <= 2 && !held; ++attempt) {
    const Turns t = MeasureTurns(job, slow, addr);
    ASSERT_FALSE(::testing::Test::HasFailure());
    const double updates = Median(t.update_ratio), pushes = Median(t.push_ratio);
    char line[160];
    std::snprintf(line, sizeof line,
                  "measurement %d: stopped against running, median ratio: updates %.2f, pushes "
                  "%.2f\n",
                  attempt, updates, pushes);
    seen += line + t.Describe() + "\n";
    held = updates >= 0.9 && pushes >= 0.9 && Median(t.pushes) > 0;
  }
  std::printf("[ host 0 while host 1's worker is stopped ]\n%s", seen.c_str());
  EXPECT_TRUE(held) << "host 0 trains or pushes slower while host 1's worker is stopped:\n" << seen;
  ASSERT_TRUE(job.SignalMpirun(SIGINT));
  const Clock::time_point ended = Clock::now();
  (void)job.Wait(milliseconds{30'000});
  ExpectJobGone(job, ended, kGoneBound);
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

// What async across hosts cannot do (main.cc, JoinTheHosts; run.cc, StartHere): an early stop
// (no host validates the run's parameters, each its own), and checkpoints whose sync points
// some host would never reach: --checkpoint-every not a multiple of the hosts, or a run whose
// updates are not (the hosts' shares would differ). A --checkpoint-every alone is refused by
// the flags' own check, naming it.
TEST_P(HostsAsyncRefusalTest, IsRefusedUnderMpirun) {
  TempDir dir;
  std::vector<std::string> extra = {"--workers", "2", "--lr", "0.05"};
  for (const std::string& f : GetParam().flags) {
    extra.push_back(f == "DIR" ? dir.path()
                               : (f.rfind("DIR/", 0) == 0 ? dir.File(f.substr(4)) : f));
  }
  MpiJob job(2, AsyncBlobs(400, "16,32,4", 16, extra));
  ExpectRefusedBeforeAnyWorker(job, GetParam().message);
  EXPECT_FALSE(test::FileExists(dir.File("never.ckpt"))) << "a refused run wrote a checkpoint";
}

INSTANTIATE_TEST_SUITE_P(
    Flags, HostsAsyncRefusalTest,
    ::testing::Values(
        Refusal{"early_stop",
                {"--steps", "100", "--early-stop", "3", "--val-split", "0.2"},
                "--early-stop is not available with --mode async across 2 hosts"},
        Refusal{"checkpoint_every_not_a_multiple_of_the_hosts",
                {"--steps", "100", "--checkpoint", "DIR/never.ckpt", "--checkpoint-every", "11"},
                "--checkpoint-every 11 with --mode async across 2 hosts must be a multiple of 2"},
        Refusal{"checkpoints_in_a_run_of_unequal_shares",
                {"--steps", "101", "--checkpoint", "DIR/never.ckpt", "--checkpoint-every", "10"},
                "--checkpoint-every with --mode async across 2 hosts needs a run of a multiple "
                "of 2 updates; this one has 101"},
        Refusal{"checkpoint_every_alone",
                {"--steps", "100", "--checkpoint-every", "10"},
                "--checkpoint-every: needs --checkpoint PATH"}),
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
  // --push-every above those shares (the default is 4): the parts meet their owners only at
  // the end, which the run says.
  const auto warned = Events(ok.out, "push_every_exceeds_share");
  ASSERT_EQ(warned.size(), 1u) << Clip(ok.out);
  EXPECT_EQ(warned[0].at("push_every"), "4");
  EXPECT_EQ(warned[0].at("updates"), "1");
}

}  // namespace
}  // namespace shmtrain
