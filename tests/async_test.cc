// Async mode: the update rules against hand-computed values, then real async runs (accounting,
// convergence against sync, staleness limits) and the simulator's rule comparison on digits.
#include <signal.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nn/update.h"
#include "shm/layout.h"
#include "tests/proc_util.h"

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
const std::string kDigits = SHMTRAIN_DIGITS;

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

TEST(AsyncRun, ParabolaWithinTwiceTheSyncLossForTheSameSamples) {
  // Sync: 2000 full-batch steps of 50 samples. Async at P = 2: each update is one worker's
  // shard of 25 samples, so 4000 updates see the same 100,000 samples.
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

TEST(AsyncRun, StaleGradientsAreDroppedAndCountedApart) {
  // --max-staleness 0 drops every gradient another update overtook before its apply began;
  // the applied count still ends exactly at --steps and the drops are reported beside it.
  const ProcResult r = Shmtrain({"train", "--mode", "async", "--workers", "3", "--example",
                                 "blobs", "--rows", "600", "--features", "8", "--layers",
                                 "8,64,4", "--loss", "xent", "--init", "xavier", "--lr", "0.1",
                                 "--batch", "16", "--steps", "800", "--max-staleness", "0",
                                 "--log-format", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string s = Summary(r);
  EXPECT_EQ(Num(s, "param_version"), 800);
  const std::vector<long> per = WorkerUpdates(s);
  EXPECT_EQ(std::accumulate(per.begin(), per.end(), 0L), 800);
  // Drops depend on the interleaving, so their count is only reported; tau as recorded can
  // exceed S (updates that land between the check and the apply count in it).
  EXPECT_GE(Num(s, "dropped"), 0);
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

TEST(AsyncRun, KilledWorkerEndsTheRunCleanly) {
  test::Subprocess p({kBin, "train", "--metrics-addr=127.0.0.1:0", "--mode", "async", "--workers", "2", "--example", "blobs",
                      "--rows", "2000", "--features", "32", "--layers", "32,256,4", "--loss",
                      "xent", "--lr", "0.01", "--batch", "32", "--steps", "100000000",
                      "--log-format", "json", "--log-every", "100", "--max-restarts", "0"});
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
  const ProcResult r = p.Wait(milliseconds(5000));
  EXPECT_EQ(r.exit_code, 3) << r.Describe();
  EXPECT_NE(r.err.find("worker 1"), std::string::npos) << r.err;
  EXPECT_TRUE(test::SegmentsOf(r.pid).empty());
}

TEST(AsyncRun, BadFlags) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--rule", "adam"}, "--rule: unknown value 'adam'"},
      {{"--lambda", "-1"}, "--lambda: must be a finite number >= 0"},
      {{"--ms-decay", "1"}, "--ms-decay: must be in [0, 1)"},
      {{"--epsilon", "0"}, "--epsilon: must be a finite number > 0"},
      {{"--momentum", "0.9"}, "--momentum: applies to sync mode only"},
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

bool HaveDigits() { return test::FileExists(kDigits); }

std::vector<std::string> DigitsArgs() {
  return {"--data", kDigits, "--normalize", "minmax", "--val-split", "0.2", "--seed", "1",
          "--layers", "64,128,10", "--activation", "tanh", "--loss", "xent", "--init", "xavier",
          "--lr", "0.2", "--batch", "32", "--steps", "3000"};
}

TEST(Simulate, DelayCompensationBeatsAsgdOnDigits) {
  if (!HaveDigits()) GTEST_SKIP() << kDigits << " not found";
  std::vector<std::string> args = {"simulate", "--compare", "--workers", "8,16", "--log-format",
                                   "json"};
  const std::vector<std::string> d = DigitsArgs();
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
  EXPECT_GT(err["asgd/16"], 3 * err["dc-asgd-a/16"]) << r.out;
  EXPECT_GT(err["asgd/16"], 0.2) << "ASGD at M=16 should be far off: " << r.out;
}

TEST(Simulate, IsDeterministic) {
  const std::vector<std::string> args = {
      "simulate", "--workers", "4", "--rule", "dc-asgd-a", "--example", "parabola", "--layers",
      "1,5,1", "--lr", "0.01", "--steps", "500", "--batch", "8", "--log-format", "json"};
  const ProcResult a = Shmtrain(args), b = Shmtrain(args);
  ASSERT_EQ(a.exit_code, 0) << a.Describe();
  EXPECT_EQ(a.out, b.out);
}

TEST(AsyncRun, RealAsyncOnDigitsReaches95Percent) {
  if (!HaveDigits()) GTEST_SKIP() << kDigits << " not found";
  std::vector<std::string> args = {"train", "--mode", "async", "--workers", "2", "--log-format",
                                   "json"};
  const std::vector<std::string> d = DigitsArgs();
  args.insert(args.end(), d.begin(), d.end());
  const ProcResult r = Shmtrain(args);
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  const std::string s = Summary(r);
  EXPECT_GE(Num(s, "val_accuracy"), 0.95) << s;
  EXPECT_EQ(Num(s, "param_version"), 3000);
}

}  // namespace
}  // namespace shmtrain
