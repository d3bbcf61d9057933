// Async mode: the update rules against hand-computed values, then real async runs (accounting,
// convergence against sync, staleness limits) and the simulator's rule comparison on fashion8
// (tests/real_data.h).
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/files/model_file.h"
#include "nn/update.h"
#include "shm/layout.h"
#include "tests/proc_util.h"
#include "tests/real_data.h"

namespace shmtrain {
namespace {

using test::JsonField;
using test::ProcResult;
using test::RunProcess;
using test::SplitLines;
using std::chrono::milliseconds;

// ---- the rules, as pure functions.

nn::RuleParams Params(AsyncRule rule, double lr, double lambda) {
  nn::RuleParams p;
  p.rule = rule;
  p.lr = lr;
  p.lambda0 = lambda;
  return p;
}

TEST(Rules, LambdaZeroIsPlainSgd) {
  for (AsyncRule rule : {AsyncRule::kAsgd, AsyncRule::kDcAsgdC, AsyncRule::kDcAsgdA}) {
    std::vector<float> w = {1.0f, -2.0f, 0.5f}, bak = {0.0f, 3.0f, -1.0f};
    const std::vector<float> g = {0.5f, -1.0f, 2.0f};
    std::vector<float> ms = {0.1f, 0.2f, 0.3f};
    nn::ApplyRule<nn::PlainAccess>(Params(rule, 0.1, 0.0), 3, w.data(), bak.data(), g.data(),
                                   ms.data());
    EXPECT_FLOAT_EQ(w[0], 1.0f - 0.05f) << ToString(rule);
    EXPECT_FLOAT_EQ(w[1], -2.0f + 0.1f) << ToString(rule);
    EXPECT_FLOAT_EQ(w[2], 0.5f - 0.2f) << ToString(rule);
  }
}

TEST(Rules, NoDelayMeansNoCorrection) {
  // w = w_bak: the Taylor term vanishes, every rule is SGD (dc-asgd-a still updates ms).
  for (AsyncRule rule : {AsyncRule::kDcAsgdC, AsyncRule::kDcAsgdA}) {
    std::vector<float> w = {1.0f, -2.0f}, bak = w, ms = {0.0f, 0.0f};
    const std::vector<float> g = {0.5f, -1.0f};
    nn::ApplyRule<nn::PlainAccess>(Params(rule, 0.1, 2.0), 2, w.data(), bak.data(), g.data(),
                                   ms.data());
    EXPECT_FLOAT_EQ(w[0], 0.95f);
    EXPECT_FLOAT_EQ(w[1], -1.9f);
  }
}

TEST(Rules, NoDelayIsSgdHoweverLargeTheLambda) {
  // w = w_bak: the step is g itself, also where lambda g^2 |w| dwarfs |g| (a form that
  // computes g - c w_bak + c w lost g there: no update at all at lambda 1e30).
  for (AsyncRule rule : {AsyncRule::kDcAsgdC, AsyncRule::kDcAsgdA}) {
    for (double lambda : {1e6, 1e20, 1e30}) {
      std::vector<float> w = {0.7f, -3.0f, 1e4f}, bak = w, ms = {1e-8f, 1e-8f, 1e-8f};
      const std::vector<float> g = {0.5f, -1.0f, 2e-3f};
      nn::ApplyRule<nn::PlainAccess>(Params(rule, 0.1, lambda), 3, w.data(), bak.data(),
                                     g.data(), ms.data());
      for (int i = 0; i < 3; ++i) {
        EXPECT_FLOAT_EQ(w[i], bak[i] - 0.1f * g[i]) << ToString(rule) << " lambda " << lambda;
      }
    }
  }
}

TEST(Rules, ConstantLambdaByHand) {
  // w = 1, w_bak = 0.5, g = 2, lambda = 0.04, lr = 0.1:
  // step = 2 + 0.04 * 4 * 0.5 = 2.08; w' = 1 - 0.208 = 0.792.
  std::vector<float> w = {1.0f}, bak = {0.5f};
  const std::vector<float> g = {2.0f};
  nn::ApplyRule<nn::PlainAccess>(Params(AsyncRule::kDcAsgdC, 0.1, 0.04), 1, w.data(), bak.data(),
                                 g.data(), nullptr);
  EXPECT_FLOAT_EQ(w[0], 0.792f);
}

TEST(Rules, AdaptiveStepWithKnownMeanSquare) {
  // ms = 3, m = 0.95, g = 2: ms' = 0.95 * 3 + 0.05 * 4 = 3.05; lambda = 2 / sqrt(3.05 + 1e-7);
  // w = 1, w_bak = 0.5: step = 2 + lambda * 4 * 0.5; w' = 1 - 0.1 * step.
  std::vector<float> w = {1.0f}, bak = {0.5f}, ms = {3.0f};
  const std::vector<float> g = {2.0f};
  nn::RuleParams p = Params(AsyncRule::kDcAsgdA, 0.1, 2.0);
  p.ms_decay = 0.95;
  p.epsilon = 1e-7;
  nn::ApplyRule<nn::PlainAccess>(p, 1, w.data(), bak.data(), g.data(), ms.data());
  const double lambda = 2.0 / std::sqrt(3.05 + 1e-7);
  EXPECT_FLOAT_EQ(ms[0], 3.05f);
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(1.0 - 0.1 * (2.0 + lambda * 4.0 * 0.5)));
}

TEST(Rules, SharedAccessComputesTheSameBits) {
  std::vector<float> a = {0.3f, -0.7f, 1.1f, 2.5f}, b = a;
  const std::vector<float> bak = {0.1f, -0.9f, 1.0f, 2.0f}, g = {0.2f, 0.4f, -0.6f, 1.5f};
  std::vector<float> ms_a = {0.5f, 0.1f, 0.0f, 2.0f}, ms_b = ms_a;
  const nn::RuleParams p = Params(AsyncRule::kDcAsgdA, 0.05, 2.0);
  nn::ApplyRule<nn::PlainAccess>(p, 4, a.data(), bak.data(), g.data(), ms_a.data());
  nn::ApplyRule<nn::SharedAccess>(p, 4, b.data(), bak.data(), g.data(), ms_b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(ms_a, ms_b);
}

TEST(Staleness, Buckets) {
  EXPECT_EQ(shm::StalenessBucket(0), 0);
  EXPECT_EQ(shm::StalenessBucket(1), 1);
  EXPECT_EQ(shm::StalenessBucket(2), 2);
  EXPECT_EQ(shm::StalenessBucket(3), 3);
  EXPECT_EQ(shm::StalenessBucket(4), 3);
  EXPECT_EQ(shm::StalenessBucket(512), shm::kStalenessBuckets - 2);
  EXPECT_EQ(shm::StalenessBucket(513), shm::kStalenessBuckets - 1);
}

// ---- real runs.

const std::string kBin = SHMTRAIN_BIN;

ProcResult Shmtrain(std::vector<std::string> args, int timeout_ms = 120000) {
  if (args[0] == "train") args.insert(args.begin() + 1, "--metrics-addr=127.0.0.1:0");
  if (args[0] == "example") args.insert(args.begin() + 2, "--metrics-addr=127.0.0.1:0");
  args.insert(args.begin(), kBin);
  ProcResult r = RunProcess(args, milliseconds(timeout_ms));
  EXPECT_TRUE(test::SegmentsOf(r.pid).empty()) << "segment left behind";
  return r;
}

std::string Summary(const ProcResult& r) {
  for (const std::string& line : SplitLines(r.out)) {
    if (line.find("\"event\":\"summary\"") != std::string::npos) return line;
  }
  ADD_FAILURE() << "no summary in:\n" << r.out << r.err;
  return "";
}

// The largest magnitude of a saved model's parameters.
double MaxAbsParam(const std::string& path) {
  Model m;
  const Status s = DecodeModel(test::ReadWholeFile(path), path, &m);
  EXPECT_TRUE(s.ok()) << s.message();
  double most = 0;
  for (float v : m.params) most = std::max(most, static_cast<double>(std::abs(v)));
  return most;
}

double Num(const std::string& summary, const std::string& key) {
  // The summary holds one array (worker_updates), so read numbers by key directly.
  const std::string k = "\"" + key + "\":";
  const size_t p = summary.find(k);
  if (p == std::string::npos) {
    ADD_FAILURE() << key << " missing in " << summary;
    return NAN;
  }
  return std::stod(summary.substr(p + k.size()));
}

std::vector<long> WorkerUpdates(const std::string& summary) {
  std::vector<long> v;
  const size_t p = summary.find("\"worker_updates\":[");
  if (p == std::string::npos) return v;
  size_t i = p + 18;
  while (summary[i] != ']') {
    size_t used = 0;
    v.push_back(std::stol(summary.substr(i), &used));
    i += used;
    if (summary[i] == ',') ++i;
  }
  return v;
}

TEST(AsyncRun, ParabolaWithinTwiceTheSyncLoss) {
  // Sync: 2000 full-batch steps of 50 samples. Async at P = 2, full batch: every update is the
  // gradient of all 50 rows, computed on parameters up to a few updates old; 4000 of them.
  const ProcResult sync = Shmtrain({"example", "parabola", "--workers", "2", "--log-format",
                                    "json"});
  ASSERT_EQ(sync.exit_code, 0) << sync.Describe();
  const double sync_loss = Num(Summary(sync), "final_loss");
  for (const char* rule : {"asgd", "dc-asgd-c", "dc-asgd-a"}) {
    const ProcResult r =
        Shmtrain({"train", "--mode", "async", "--rule", rule, "--workers", "2", "--example",
                  "parabola", "--layers", "1,5,1", "--lr", "0.01", "--steps", "4000",
                  "--log-format", "json"});
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    const std::string s = Summary(r);
    EXPECT_LE(Num(s, "final_loss"), 2 * sync_loss) << rule << ": " << s;
    EXPECT_EQ(Num(s, "steps"), 4000);
  }
}

// Delay compensation acts in the real workers, not only in the rules' unit tests above: with
// an absurd lambda the correction lambda * g*g*(w - w_bak) dwarfs the gradient as soon as a
// worker's copy is stale (tau >= 1), and the run diverges or ruins the model; with lambda 0
// the same run is plain ASGD and trains. Workers that skipped the compensation would train with both. Each
// update takes about a millisecond (batch 256 through 16-512-4), so two workers overlap
// whether they have a core each or share one (a time slice ends mid-update).
TEST(AsyncRun, DelayCompensationActsInRealRuns) {
  SHMTRAIN_CONVERGENCE_TEST();
  for (const char* rule : {"dc-asgd-c", "dc-asgd-a"}) {
    const std::vector<std::string> base = {
        "train", "--mode", "async", "--rule", rule, "--workers", "2", "--example", "blobs",
        "--rows", "4096", "--features", "16", "--layers", "16,512,4", "--loss", "xent",
        "--init", "xavier", "--lr", "0.05", "--batch", "256", "--steps", "800", "--log-every",
        "0", "--log-format", "json"};
    test::TempDir dir;
    std::vector<std::string> plain = base, wild = base;
    plain.insert(plain.end(), {"--lambda", "0", "--save", dir.File("plain.model")});
    wild.insert(wild.end(), {"--lambda", "1e12", "--save", dir.File("wild.model")});
    const ProcResult p = Shmtrain(plain);
    ASSERT_EQ(p.exit_code, 0) << rule << ": " << p.Describe();
    ASSERT_GT(Num(Summary(p), "mean_staleness"), 0) << rule << ": the workers never overlapped";
    // The correction either makes a loss or gradient non-finite (exit 5) or drives the weights
    // so far that the tanh units saturate, the gradients vanish and the loss stays finite (3
    // runs in 20 on a loaded machine; their final losses were 0, 2e24 and 5.6e10, so the loss
    // says nothing). Without compensation the weights would stay those of the plain run.
    const ProcResult w = Shmtrain(wild);
    if (w.exit_code != 5) {
      ASSERT_EQ(w.exit_code, 0) << rule << ": " << w.Describe();
      const double wild_max = MaxAbsParam(dir.File("wild.model"));
      const double plain_max = MaxAbsParam(dir.File("plain.model"));
      std::printf("[ %s, lambda 1e12 ] trained to weights up to %g (lambda 0: %g)\n", rule,
                  wild_max, plain_max);
      EXPECT_GT(wild_max, 100 * plain_max)
          << rule << " with lambda 1e12 trained as with 0: no compensation applied\n"
          << Summary(w);
    }
  }
}

TEST(AsyncRun, NoUpdateIsLost) {
  // version counter = updates applied = the sum of every worker's committed updates.
  const ProcResult r = Shmtrain({"train", "--mode", "async", "--workers", "3", "--example",
                                 "blobs", "--rows", "600", "--features", "8", "--layers",
                                 "8,16,4", "--loss", "xent", "--init", "xavier", "--lr", "0.1",
                                 "--batch", "8", "--steps", "1500", "--log-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string s = Summary(r);
  EXPECT_EQ(Num(s, "param_version"), 1500);
  EXPECT_EQ(Num(s, "updates"), 1500);
  EXPECT_EQ(Num(s, "dropped"), 0);
  const std::vector<long> per = WorkerUpdates(s);
  ASSERT_EQ(per.size(), 3u) << s;
  EXPECT_EQ(std::accumulate(per.begin(), per.end(), 0L), 1500);
}

// ---- update tickets: update u trains on minibatch u of the sync loop's stream.

// The loss of every logged step, as printed, in log order.
std::vector<std::string> StepLosses(const ProcResult& r) {
  std::vector<std::string> v;
  for (const std::string& line : SplitLines(r.out)) {
    if (JsonField(line, "event") == "step") v.push_back(JsonField(line, "loss").value_or("?"));
  }
  return v;
}

// A run whose parameters do not move (lr 1e-20 changes no float that matters at 9 digits):
// the loss logged at each update is then a fingerprint of the minibatch it trained on.
// `hidden`, the width of the hidden layer: kHeavy (and minibatches of 50, not 10) is about
// half a millisecond an update, so that kills a few ms apart land inside updates and the loss
// ring never laps the master; kHeavier is 8 times that, for runs of many kills.
constexpr int kLight = 64;
constexpr int kHeavy = 512;
constexpr int kHeavier = 4096;
std::vector<std::string> FrozenBlobs(const std::string& mode, int workers, int64_t steps,
                                     const std::vector<std::string>& extra = {},
                                     int hidden = kLight) {
  std::vector<std::string> a = {"train", "--mode", mode, "--workers", std::to_string(workers),
                                "--example", "blobs", "--rows", "1000", "--features", "16",
                                "--layers", "16," + std::to_string(hidden) + ",4", "--loss", "xent",
                                "--init", "xavier", "--lr", "1e-20", "--batch",
                                hidden == kLight ? "10" : "50", "--steps", std::to_string(steps),
                                "--log-every", "1", "--log-format", "json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A recovery from a worker's death in this build on this machine, now (tests/proc_util.h,
// "Chaos"): the one of a short run of `hidden` with one death.
double AsyncRecoverySeconds(int hidden) {
  return test::MeasureRecovery(
      [hidden](int64_t steps) {
        const ProcResult r =
            Shmtrain(test::WithOneDeath(FrozenBlobs("async", 2, steps, {}, hidden)));
        EXPECT_EQ(r.exit_code, 0) << r.Describe();
        return Summary(r);
      },
      500);
}

// The minibatch fingerprints of tickets 0 .. n-1: sync P = 1 logs minibatch t at step t.
const std::vector<std::string>& TicketLosses(int64_t n, int hidden) {
  static auto* cache = new std::map<std::pair<int64_t, int>, std::vector<std::string>>();
  auto it = cache->find({n, hidden});
  if (it != cache->end()) return it->second;
  const ProcResult r = Shmtrain(FrozenBlobs("sync", 1, n, {}, hidden));
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
  std::vector<std::string> v = StepLosses(r);
  EXPECT_EQ(v.size(), static_cast<size_t>(n));
  EXPECT_EQ(std::set<std::string>(v.begin(), v.end()).size(), v.size())
      << "two minibatches share a loss: the fingerprint cannot tell them apart";
  return cache->emplace(std::make_pair(n, hidden), std::move(v)).first->second;
}

// Which tickets an async run of `steps` updates applied, from its logged losses: every logged
// loss must be the fingerprint of exactly one ticket. Returns how many of the tickets below
// `steps` were missed (each must then have been made up by one past `steps`).
int64_t MissedTickets(const ProcResult& r, int64_t steps, int64_t spare, int hidden = kLight) {
  const std::vector<std::string>& ref = TicketLosses(steps + spare, hidden);
  std::map<std::string, int64_t> ticket_of;
  for (size_t t = 0; t < ref.size(); ++t) ticket_of[ref[t]] = static_cast<int64_t>(t);
  const std::vector<std::string> got = StepLosses(r);
  EXPECT_EQ(got.size(), static_cast<size_t>(steps)) << "every update logs its loss";
  std::map<int64_t, int> used;
  int64_t past = 0;
  for (const std::string& loss : got) {
    const auto it = ticket_of.find(loss);
    if (it == ticket_of.end()) {
      ADD_FAILURE() << "loss " << loss << " is no ticket's minibatch";
      continue;
    }
    if (++used[it->second] > 1) ADD_FAILURE() << "ticket " << it->second << " applied twice";
    past += it->second >= steps;
  }
  int64_t missed = 0;
  for (int64_t t = 0; t < steps; ++t) missed += used.count(t) == 0;
  EXPECT_EQ(missed, past) << "each missed ticket is made up by a fresh one past the end";
  return missed;
}

TEST(AsyncTickets, OneWorkerAsgdIsSyncSgd) {
  // Same minibatches in the same order, no staleness: the losses logged at every step agree
  // to float rounding (sync sums the gradient and divides in double, async scales in float).
  const std::vector<std::string> common = {
      "--example", "blobs", "--rows", "300", "--features", "8", "--layers", "8,16,3", "--loss",
      "xent", "--init", "xavier", "--lr", "0.1", "--batch", "16", "--steps", "200",
      "--log-every", "10", "--log-format", "json", "--workers", "1"};
  std::vector<std::string> sa = {"train", "--mode", "sync"}, aa = {"train", "--mode", "async",
                                                                   "--rule", "asgd"};
  sa.insert(sa.end(), common.begin(), common.end());
  aa.insert(aa.end(), common.begin(), common.end());
  const ProcResult sync = Shmtrain(sa), async = Shmtrain(aa);
  ASSERT_EQ(sync.exit_code, 0) << sync.Describe();
  ASSERT_EQ(async.exit_code, 0) << async.Describe();
  const std::vector<std::string> ls = StepLosses(sync), la = StepLosses(async);
  ASSERT_EQ(ls.size(), 20u);
  ASSERT_EQ(la.size(), ls.size());
  for (size_t i = 0; i < ls.size(); ++i) {
    EXPECT_NEAR(std::stod(la[i]), std::stod(ls[i]), 1e-6 * std::fabs(std::stod(ls[i])))
        << "step " << 10 * i;
  }
  const double fs = Num(Summary(sync), "final_loss"), fa = Num(Summary(async), "final_loss");
  EXPECT_NEAR(fa, fs, 1e-6 * fs);
}

TEST(AsyncTickets, EveryRowOncePerEpoch) {
  // 4 workers, exactly one epoch (1000 rows, batch 10): tickets 0..99 each applied once, so
  // every row is trained on exactly once, however the ranks were scheduled.
  const ProcResult r = Shmtrain(FrozenBlobs("async", 4, 100));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_EQ(MissedTickets(r, 100, 4), 0);
  EXPECT_EQ(Num(Summary(r), "param_version"), 100);
}

TEST(AsyncTickets, ADeathHoldingATicketLosesNoMinibatch) {
  // Rank 1 exits (code 20) at its first minibatch, after claiming its ticket: the replacement
  // takes the ticket over, so the run still applies every ticket once. Its first, and 2000
  // tickets: rank 1 must claim one before the others take them all, which at its 3rd of 100
  // failed to happen once on a loaded machine (a rank held off the cores for 80 ms).
  const ProcResult r = Shmtrain(FrozenBlobs(
      "async", 3, 2000, {"--fault-rank", "1", "--fault-step", "0", "--fault-point", "1"}, kHeavy));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string s = Summary(r);
  EXPECT_EQ(Num(s, "restarts"), 1) << s;
  EXPECT_EQ(Num(s, "torn_updates"), 0) << s;
  EXPECT_EQ(MissedTickets(r, 2000, 4, kHeavy), 0);
}

TEST(AsyncTickets, StaleGradientsAreDroppedAndRecomputed) {
  // --max-staleness 0 with 4 workers that all start at the gate at version 0: each gradient
  // another update overtook is dropped, counted, and recomputed on the same ticket, so the
  // run still applies exactly --steps updates, each ticket once.
  // Updates of about half a millisecond, 4 ranks on fewer cores: computations overlap.
  const ProcResult r =
      Shmtrain(FrozenBlobs("async", 4, 400, {"--max-staleness", "0"}, kHeavy));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string s = Summary(r);
  EXPECT_EQ(Num(s, "param_version"), 400);
  const std::vector<long> per = WorkerUpdates(s);
  EXPECT_EQ(std::accumulate(per.begin(), per.end(), 0L), 400);
  EXPECT_GT(Num(s, "dropped"), 0) << s;
  EXPECT_EQ(MissedTickets(r, 400, 4, kHeavy), 0);
}

TEST(AsyncTickets, SigkilledWorkersLoseOnlyTornTickets) {
  SHMTRAIN_REPEATS_PATHS_TEST();
  // Chaos SIGKILLs at random moments: a ticket held by a killed rank is taken over by its
  // replacement; only an update torn mid-apply loses its minibatch (it is not redone), and it
  // is made up by a fresh ticket past the end. The run applies exactly --steps updates.
  const int64_t steps = 2000;
  // The kills come about 25 times per undisturbed run of this build, and never more often than
  // a replacement starts (once a recovery, measured now in this build: tests/proc_util.h,
  // "Chaos"): kills faster than that would mostly hit starting workers. Each of the 2 workers
  // is then killed every 2 recoveries on average, up at least about half the time. The run
  // should last 20 such intervals (10 kills): the normal build does kHeavy's 2000 updates in
  // under 100 ms, and takes kHeavier there (more updates would outgrow the fingerprints: 11000
  // had 5 collisions); a sanitizer's kHeavy run, over 250 ms, stays, with the kills its
  // recoveries allow (fewer, in a build whose every restart is slow: kHeavier would cost it
  // eight times the run).
  int hidden = kHeavy;
  const double recovery_s = AsyncRecoverySeconds(hidden);
  ASSERT_FALSE(std::isnan(recovery_s));
  ProcResult calm = Shmtrain(FrozenBlobs("async", 2, steps, {}, hidden));
  ASSERT_EQ(calm.exit_code, 0) << calm.Describe();
  double wall_s = Num(Summary(calm), "wall_s");
  int64_t every_ms = test::ChaosEveryMs(wall_s, 25, recovery_s, 1, 10);
  if (wall_s < 0.25 && 1e3 * wall_s < 20.0 * every_ms) {
    hidden = kHeavier;
    calm = Shmtrain(FrozenBlobs("async", 2, steps, {}, hidden));
    ASSERT_EQ(calm.exit_code, 0) << calm.Describe();
    wall_s = Num(Summary(calm), "wall_s");
    every_ms = test::ChaosEveryMs(wall_s, 25, recovery_s, 1, 10);
  }
  const ProcResult r = Shmtrain(FrozenBlobs(
      "async", 2, steps,
      {"--chaos-kill-every", std::to_string(every_ms) + "ms", "--chaos-seed", "5"}, hidden));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string s = Summary(r);
  std::printf("[ tickets under chaos ] a recovery %.3f s, every %lld ms: %s, %g torn\n", recovery_s,
              static_cast<long long>(every_ms), test::ChaosOutcome(s).c_str(),
              Num(s, "torn_updates"));
  // The kills the run's length allows at that pace (a busy machine's calm run can be longer
  // than its chaos run, whose kills then come fewer).
  EXPECT_GE(Num(s, "restarts"), std::min(10, test::KillsAtLeast(Num(s, "wall_s"), every_ms))) << s;
  EXPECT_EQ(Num(s, "param_version"), steps) << s;
  const std::vector<long> per = WorkerUpdates(s);
  EXPECT_EQ(std::accumulate(per.begin(), per.end(), 0L), steps) << s;
  // Every missed ticket below --steps is a torn one. Not every torn one is below --steps: a
  // fresh ticket handed out to make one up can be torn in its turn (so missed <= torn, with
  // equality when no make-up update was torn; both seen under ASan's slower updates).
  EXPECT_LE(MissedTickets(r, steps, 50, hidden), Num(s, "torn_updates")) << s;
}

TEST(AsyncRun, DivergenceEndsTheRunAndNamesTheStep) {
  // A linear model: under --lr 1e6 a ReLU layer's units can all die in one step (once in a
  // loaded CI run), and a run whose outputs are then constant stays finite.
  const ProcResult r = Shmtrain({"train", "--mode", "async", "--workers", "2", "--example",
                                 "parabola", "--layers", "1,1", "--lr", "1e6", "--steps",
                                 "2000", "--log-format", "json"});
  EXPECT_EQ(r.exit_code, 5) << r.Describe();
  EXPECT_NE(r.err.find("training diverged at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(": the loss or gradient is not finite (NaN or infinite); the learning "
                       "rate (--lr 1e+06) is probably too large"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("\"event\":\"worker_restart\""), std::string::npos)
      << "a diverged worker is not restarted:\n" << r.out;
}

TEST(AsyncRun, StepLinesOverwrittenWhileTheMasterStoodStillAreCounted) {
  // The master is stopped once it has printed its first step, and let go only once its
  // workers have all ended (zombies it cannot reap while stopped): they log every update of
  // the run meanwhile, far more than the ring's 4096 records. Every logged step is then printed
  // or counted in the warning, and some are counted. Waiting for the workers' end instead of a
  // fixed pause makes the overwrite certain at any speed (a pause of 2 s once depended on the
  // workers logging 4096 updates in it) and costs only the rest of the run (a quarter of a
  // second in the normal build).
  test::TempDir dir;
  const std::string out = dir.path() + "/out.json";
  const int64_t steps = 100000;
  const ProcResult r = test::RunShell(
      "\"$0\" train --no-metrics --no-progress --mode async --workers 2 --example blobs --rows "
      "1000 --features 16 --layers 16,64,4 --loss xent --lr 0.01 --batch 10 --steps \"$2\" "
      "--log-every 1 --log-format json > \"$1\" & m=$!; "
      "until grep -q '\"event\":\"step\"' \"$1\"; do sleep 0.01; done; "
      "kill -STOP $m; "
      "while kill -0 $m && ps --ppid $m -o stat= | grep -qv Z; do sleep 0.01; done; "
      "kill -CONT $m; wait $m",
      {kBin, out, std::to_string(steps)}, milliseconds{240'000});
  const std::string log = test::ReadWholeFile(out);
  ASSERT_EQ(r.exit_code, 0) << r.Describe() << test::Clip(log);
  const auto lost = test::Events(log, "log_lines_lost");
  ASSERT_EQ(lost.size(), 1u) << "no warning: nothing was overwritten?\n" << test::Clip(log);
  const int64_t counted = std::stoll(lost[0].at("count"));
  EXPECT_GT(counted, 0);
  EXPECT_EQ(static_cast<int64_t>(test::Events(log, "step").size()) + counted, steps);
}

TEST(AsyncTickets, MoreWorkersThanRowsFinishQuickly) {
  // Once, ranks whose shard was empty left before the start gate and their peers waited out
  // the 120 s barrier timeout. Tickets leave no rank without rows.
  test::TempDir dir;
  const std::string four = dir.Write("four.csv", "0.1,0.2\n0.4,0.5\n-0.3,0.1\n0.8,-0.2\n");
  const std::vector<std::vector<std::string>> runs = {
      {"train", "--mode", "async", "--workers", "5", "--data", four, "--layers", "1,4,1",
       "--lr", "0.01", "--steps", "200", "--log-format", "json"},
      {"train", "--mode", "async", "--workers", "3", "--example", "blobs", "--rows", "400",
       "--features", "2", "--layers", "2,8,3", "--loss", "xent", "--lr", "0.1", "--steps",
       "200", "--val-split", "0.99", "--log-format", "json"},
      {"train", "--mode", "async", "--workers", "51", "--example", "parabola", "--layers",
       "1,5,1", "--lr", "0.01", "--steps", "2000", "--log-format", "json"},
  };
  for (const auto& args : runs) {
    std::string cmd;
    for (const std::string& a : args) cmd += a + " ";
    SCOPED_TRACE(cmd);
    // A few seconds (51 processes to start on a busy machine); the default barrier timeout,
    // 120 s, when broken: the deadline is half of that, whatever this machine's speed.
    const ProcResult r = Shmtrain(args, 60000);
    ASSERT_TRUE(r.exited) << r.Describe();
    EXPECT_EQ(r.exit_code, 0) << r.Describe();
    const std::string s = Summary(r);
    EXPECT_EQ(Num(s, "param_version"), Num(s, "steps")) << s;
  }
}

TEST(AsyncRun, LogsTheLossAtLoggedUpdates) {
  const ProcResult r = Shmtrain({"train", "--mode", "async", "--workers", "2", "--example",
                                 "parabola", "--layers", "1,5,1", "--lr", "0.01", "--steps",
                                 "1000", "--log-every", "100", "--log-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::vector<int> steps;
  for (const std::string& line : SplitLines(r.out)) {
    if (JsonField(line, "event") == "step") steps.push_back(std::stoi(*JsonField(line, "step")));
  }
  std::vector<int> want;
  for (int s = 0; s < 1000; s += 100) want.push_back(s);
  EXPECT_EQ(steps, want);
}

// The death is seen at once (the master polls its workers' pidfds): before the run's only
// timeout, the heartbeat's (5 s here, half the barrier timeout), which is how a master that
// missed it would have found the dead worker; a bound of the configuration, not of this
// machine's speed.
TEST(AsyncRun, KilledWorkerEndsTheRunCleanly) {
  constexpr milliseconds kHeartbeatTimeout{5'000};
  test::Subprocess p({kBin,
                      "train",
                      "--metrics-addr=127.0.0.1:0",
                      "--mode",
                      "async",
                      "--workers",
                      "2",
                      "--example",
                      "blobs",
                      "--rows",
                      "2000",
                      "--features",
                      "32",
                      "--layers",
                      "32,256,4",
                      "--loss",
                      "xent",
                      "--lr",
                      "0.01",
                      "--batch",
                      "32",
                      "--steps",
                      "100000000",
                      "--log-format",
                      "json",
                      "--log-every",
                      "100",
                      "--max-restarts",
                      "0",
                      "--barrier-timeout",
                      "10s"});
  std::string line;
  pid_t victim = -1;
  bool stepped = false;
  while ((victim < 0 || !stepped) && p.ReadLine(&line, milliseconds(20000))) {
    if (JsonField(line, "event") == "worker_started" && JsonField(line, "rank") == "1") {
      victim = std::stoi(*JsonField(line, "pid"));
    }
    if (JsonField(line, "event") == "step") stepped = true;
  }
  ASSERT_GT(victim, 0);
  ASSERT_TRUE(stepped);
  kill(victim, SIGKILL);
  const auto killed = test::Clock::now();
  const ProcResult r = p.Wait(4 * kHeartbeatTimeout);
  EXPECT_LT(r.end - killed, kHeartbeatTimeout) << "the death was found by a timeout, not at once";
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  EXPECT_NE(r.err.find("worker 1"), std::string::npos) << r.err;
  EXPECT_TRUE(test::SegmentsOf(r.pid).empty());
}

// ---- checkpoints: one at each multiple kN of --checkpoint-every N below --steps, holding
// exactly the updates of the tickets below kN (the ranks pause before ticket kN).

// The steps of the periodic checkpoints the run wrote, in order (JSON "checkpoint" events).
std::vector<int64_t> CheckpointSteps(const ProcResult& r) {
  std::vector<int64_t> v;
  for (const std::string& line : SplitLines(r.out)) {
    if (JsonField(line, "event") == "checkpoint") v.push_back(std::stoll(*JsonField(line, "step")));
  }
  return v;
}

std::vector<std::string> AsyncParabola(int workers, int64_t steps, const std::string& ckpt,
                                       int64_t every, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train", "--mode", "async", "--rule", "asgd", "--workers",
                                std::to_string(workers), "--example", "parabola", "--layers",
                                "1,5,1", "--lr", "0.01", "--steps", std::to_string(steps),
                                "--checkpoint", ckpt, "--checkpoint-every", std::to_string(every),
                                "--log-format", "json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(AsyncCheckpoints, OneAtEachMultipleWithExactlyThatManyUpdates) {
  // 3 ranks, updates of a few microseconds: without the pause the master, looking every few
  // milliseconds, would see the version jump over most multiples.
  test::TempDir dir;
  const std::string ckpt = dir.File("c.ckpt");
  const ProcResult r = Shmtrain(AsyncParabola(3, 400, ckpt, 7));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::vector<int64_t> want;
  for (int64_t k = 7; k < 400; k += 7) want.push_back(k);
  EXPECT_EQ(CheckpointSteps(r), want) << "the version at each copy is the multiple itself";
  // The last one (step 399) resumes: the run ends with the one update still owed.
  const ProcResult resumed = Shmtrain(AsyncParabola(3, 400, ckpt, 7, {"--resume", ckpt}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.Describe();
  EXPECT_EQ(Num(Summary(resumed), "first_step"), 399);
  EXPECT_EQ(Num(Summary(resumed), "param_version"), 400);
}

TEST(AsyncCheckpoints, OneWorkerResumesToTheUninterruptedBits) {
  // P = 1 is deterministic: a checkpoint that held W at any other update than its step (a
  // copy taken while the rank applies) would resume to other bits.
  test::TempDir dir;
  const std::string ckpt = dir.File("c.ckpt"), whole = dir.File("whole.model"),
                    resumed = dir.File("resumed.model");
  const ProcResult r = Shmtrain(AsyncParabola(1, 300, ckpt, 40, {"--save", whole}));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  ASSERT_EQ(CheckpointSteps(r), (std::vector<int64_t>{40, 80, 120, 160, 200, 240, 280}));
  const ProcResult again =
      Shmtrain(AsyncParabola(1, 300, ckpt, 40, {"--resume", ckpt, "--save", resumed}));
  ASSERT_EQ(again.exit_code, 0) << again.Describe();
  EXPECT_EQ(Num(Summary(again), "first_step"), 280);
  EXPECT_EQ(test::ReadWholeFile(whole), test::ReadWholeFile(resumed));
}

TEST(AsyncCheckpoints, NoneIsSkippedWhileWorkersAreKilled) {
  SHMTRAIN_REPEATS_PATHS_TEST();
  // Chaos kills land in computations, applies and pauses. Each multiple is still written once;
  // a death can cost a ticket below the multiple (torn, or lost while claimed), made up past
  // the end, so a checkpoint's step is the multiple less at most one per death so far.
  // The kills come about 10 times per undisturbed run, but never more often than a replacement
  // starts (once a recovery, measured now in this build: tests/proc_util.h, "Chaos"), and the
  // run lasts 3 intervals at least (more updates where a recovery is long next to them): a
  // kill at least.
  test::TempDir dir;
  const std::string ckpt = dir.File("c.ckpt");
  constexpr int64_t kUsualSteps = 1000;
  const double recovery_s = AsyncRecoverySeconds(kHeavy);
  ASSERT_FALSE(std::isnan(recovery_s));
  const ProcResult calm = Shmtrain(FrozenBlobs("async", 2, kUsualSteps, {}, kHeavy));
  ASSERT_EQ(calm.exit_code, 0) << calm.Describe();
  const double wall_s = Num(Summary(calm), "wall_s");
  const int64_t every_ms = test::ChaosEveryMs(wall_s, 10, recovery_s, 1, 10);
  const int64_t steps = test::StepsForIntervals(kUsualSteps, wall_s, every_ms, 3);
  const int64_t every = steps / 10;
  std::vector<std::string> args = FrozenBlobs("async", 2, steps, {}, kHeavy);
  args.insert(args.end(), {"--checkpoint", ckpt, "--checkpoint-every", std::to_string(every),
                           "--chaos-kill-every", std::to_string(every_ms) + "ms",
                           "--chaos-seed", "3"});
  const ProcResult r = Shmtrain(args);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string s = Summary(r);
  const double restarts = Num(s, "restarts");
  std::printf(
      "[ checkpoints under chaos ] %lld updates, a recovery %.3f s, every %lld ms: %s, "
      "%g torn\n",
      static_cast<long long>(steps), recovery_s, static_cast<long long>(every_ms),
      test::ChaosOutcome(s).c_str(), Num(s, "torn_updates"));
  EXPECT_GE(restarts, std::min(1, test::KillsAtLeast(Num(s, "wall_s"), every_ms))) << s;
  const std::vector<int64_t> got = CheckpointSteps(r);
  ASSERT_EQ(got.size(), static_cast<size_t>(steps / every - 1)) << r.out;
  for (size_t k = 0; k < got.size(); ++k) {
    const int64_t multiple = every * static_cast<int64_t>(k + 1);
    EXPECT_LE(got[k], multiple);
    EXPECT_GE(got[k], multiple - restarts) << "checkpoint " << k;
  }
  EXPECT_EQ(Num(s, "param_version"), steps);
}

TEST(AsyncRun, BadFlags) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--rule", "adam"}, "--rule: unknown value 'adam'"},
      {{"--lambda", "-1"}, "--lambda: must be a finite number >= 0"},
      {{"--ms-decay", "1"}, "--ms-decay: must be in [0, 1)"},
      {{"--epsilon", "0"}, "--epsilon: must be a finite number > 0"},
      {{"--momentum", "0.9"}, "--momentum: not available in async mode"},
      {{"--optimizer", "adam"}, "--optimizer adam: not available in async mode"},
      {{"--optimizer", "adamw", "--beta1", "0.8"}, "--optimizer adamw: not available in async mode"},
      {{"--max-staleness", "-2"}, "--max-staleness"},
      {{"--val-split", "1"}, "--val-split: must be in [0, 1)"},
      {{"--normalize", "zscore"}, "--normalize: unknown value 'zscore'"},
  };
  for (const auto& [extra, msg] : cases) {
    std::vector<std::string> args = {"train", "--mode",  "async", "--example", "parabola",
                                     "--layers", "1,5,1", "--lr", "0.01", "--steps", "10"};
    args.insert(args.end(), extra.begin(), extra.end());
    const ProcResult r = Shmtrain(args);
    EXPECT_EQ(r.exit_code, 2) << extra[0] << ": " << r.Describe();
    EXPECT_NE(r.err.find(msg), std::string::npos) << r.err;
  }
}

// The fashion8 run of the tests below, on `data` (test::SmallFashionCsv()).
std::vector<std::string> Fashion8Args(const std::string& data) {
  return {"--data", data, "--normalize", "minmax", "--val-split", "0.2", "--seed", "1",
          "--layers", "64,128,10", "--activation", "tanh", "--loss", "xent", "--init", "xavier",
          "--lr", "0.2", "--batch", "32", "--steps", "3000"};
}

// Held-out errors, measured (simulate is deterministic: the same in every run of a build):
// sgd/1 0.220; asgd/8 0.415, dc-asgd-a/8 0.267 (1.22 x sgd); asgd/16 0.822 (chance is 0.9: it
// diverges, a training loss of 62), dc-asgd-a/16 0.337 (asgd/16 is 2.44 x that). The diverging
// runs' figures depend on the build's floating point: in the ASan build asgd/8 0.457, asgd/16
// 0.716, dc-asgd-a/16 0.348 (2.06 x), hence 1.5 x below. With --lr 1e-9 every rule ends at
// 0.922 and the two comparisons between rules fail.
TEST(Simulate, DelayCompensationBeatsAsgdOnFashion8) {
  SHMTRAIN_CONVERGENCE_TEST();
  const std::string fashion8 = test::SmallFashionCsv();
  ASSERT_FALSE(fashion8.empty()) << "no data set: the failure above says why";
  std::vector<std::string> args = {"simulate", "--compare", "--workers", "8,16", "--log-format",
                                   "json"};
  const std::vector<std::string> d = Fashion8Args(fashion8);
  args.insert(args.end(), d.begin(), d.end());
  const ProcResult r = Shmtrain(args, 300000);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  std::map<std::string, double> err;  // "rule/M" -> held-out error
  for (const std::string& line : SplitLines(r.out)) {
    if (JsonField(line, "event") != "simulation") continue;
    err[*JsonField(line, "rule") + "/" + *JsonField(line, "workers")] =
        std::stod(*JsonField(line, "val_error"));
  }
  ASSERT_EQ(err.size(), 7u) << r.out;
  const double sgd = err["sgd/1"];
  EXPECT_LE(err["dc-asgd-a/8"], 1.5 * sgd) << r.out;
  EXPECT_LT(err["dc-asgd-a/8"], err["asgd/8"]) << r.out;
  EXPECT_GT(err["asgd/16"], 1.5 * err["dc-asgd-a/16"]) << r.out;
  EXPECT_GT(err["asgd/16"], 0.5) << "ASGD at M=16 should be far off: " << r.out;
}

TEST(Simulate, IsDeterministic) {
  const std::vector<std::string> args = {
      "simulate", "--workers", "4", "--rule", "dc-asgd-a", "--example", "parabola", "--layers",
      "1,5,1", "--lr", "0.01", "--steps", "500", "--batch", "8", "--log-format", "json"};
  const ProcResult a = Shmtrain(args), b = Shmtrain(args);
  ASSERT_EQ(a.exit_code, 0) << a.Describe();
  EXPECT_EQ(a.out, b.out);
}

// A rule whose model diverged is a cell that says so, not "-nan"; a converging run has none.
TEST(Simulate, ADivergedCellSaysDiverged) {
  const std::vector<std::string> base = {"simulate", "--workers", "4", "--compare", "--example",
                                         "parabola", "--layers", "1,5,1", "--steps", "200",
                                         "--batch", "8", "--lr"};
  std::vector<std::string> args = base;
  args.push_back("1000");
  const ProcResult bad = Shmtrain(args);
  ASSERT_EQ(bad.exit_code, 0) << bad.Describe();
  EXPECT_NE(bad.out.find("asgd        diverged"), std::string::npos) << bad.out;
  EXPECT_EQ(bad.out.find("nan"), std::string::npos) << bad.out;
  args.back() = "0.01";
  const ProcResult good = Shmtrain(args);
  ASSERT_EQ(good.exit_code, 0) << good.Describe();
  EXPECT_EQ(good.out.find("diverged"), std::string::npos) << good.out;
}

// Held-out accuracy of async runs varies with the scheduling (the same command in sync mode:
// 0.780; with --lr 1e-9: 0.078). Measured: 40 runs on this 2-core machine at its usual load (a
// load average of about 9, others compiling): min 0.752, median 0.780, max 0.802; 100 runs with
// 4 busy loops beside them besides: min 0.708 (twice), then 0.744, 0.749, median 0.772, max
// 0.802; a CI run on a fresh machine: 0.716. One run falls below 0.72 about once in 50 under
// load, so the bound holds the median of 5 runs: 3 of 5 at 0.72 or more (with 2 runs in 100
// below, 5 runs miss it about once in 10^4), and the test stops at the third that is.
TEST(AsyncRun, RealAsyncOnFashion8Reaches72Percent) {
  SHMTRAIN_CONVERGENCE_TEST();
  constexpr double kBound = 0.72;
  constexpr int kRuns = 5, kNeeded = 3;
  const std::string fashion8 = test::SmallFashionCsv();
  ASSERT_FALSE(fashion8.empty()) << "no data set: the failure above says why";
  std::vector<std::string> args = {"train", "--mode", "async", "--workers", "2", "--log-format",
                                   "json"};
  const std::vector<std::string> d = Fashion8Args(fashion8);
  args.insert(args.end(), d.begin(), d.end());
  std::vector<double> accuracies;
  std::string runs;
  int reached = 0;
  for (int k = 0; k < kRuns && reached < kNeeded; ++k) {
    const ProcResult r = Shmtrain(args);
    ASSERT_EQ(r.exit_code, 0) << r.Describe();
    const std::string s = Summary(r);
    EXPECT_EQ(Num(s, "param_version"), 3000);
    accuracies.push_back(Num(s, "val_accuracy"));
    reached += accuracies.back() >= kBound;
    runs += s + "\n";
  }
  std::string measured;
  for (double a : accuracies) measured += " " + std::to_string(a).substr(0, 6);
  std::printf("[ measured ] val_accuracy%s\n", measured.c_str());
  EXPECT_GE(reached, kNeeded) << "the median of " << kRuns << " runs is below " << kBound << ":\n"
                              << runs;
}

}  // namespace
}  // namespace shmtrain
