// Batch norm through real processes: the promises of sync runs (chaos and every fault point of a
// step end with the undisturbed bits, a resumed checkpoint too, a rank with no rows still takes
// part in every crossing, a stopped rank is replaced and its peers waiting in a crossing are
// not blamed), async runs (every applied update counted by num_batches_tracked, running
// statistics that stand in for the batch's), what is refused (several hosts, a segment whose
// statistics count is not its model's), and eval and predict reading the running statistics.
//
// The data is the CNN tests' small image set (tests/line_images.h): 30 images of 1x6x6 in 3
// classes. Minibatches of 8 (or 7) rows give every step both crossings of each batch norm layer.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data/batch_plan.h"
#include "gtest/gtest.h"
#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "nn/batch_norm.h"
#include "nn/net.h"
#include "shm/segment.h"
#include "shmtrain/status.h"
#include "tests/line_images.h"
#include "tests/parabola_layout.h"
#include "tests/proc_util.h"
#include "tests/reference.h"
#ifdef SHMTRAIN_TEST_MPI
#include "tests/mpi_job.h"
#endif

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::Clock;
using test::Events;
using test::ExitedWith;
using test::Images;
using test::JsonField;
using test::Num;
using test::ProcResult;
using test::SameBytes;
using test::SummaryOf;
using test::TempDir;

constexpr milliseconds kRunTimeout{180'000};
constexpr milliseconds kEventTimeout{60'000};

// Both kinds: batchnorm2d over the convolution's 4 channels, batchnorm1d over the 36 features.
constexpr const char* kModel =
    "conv2d(4,3,padding=1,bias=false),batchnorm2d,relu,maxpool2d(2),flatten,batchnorm1d,linear(3)";
// batchnorm2d alone: each channel's statistics over a batch's every pixel. (batchnorm1d over a
// batch of 2 rows divides by a two-value spread, which turns float rounding into 1e-5 within a
// few steps, whatever P: not what a comparison of P can use.)
constexpr const char* kHeadModel =
    "conv2d(4,3,padding=1,bias=false),batchnorm2d,relu,maxpool2d(2),flatten,linear(3)";

std::string ImagesCsv(const TempDir& dir) { return dir.Write("images.csv", Images().Csv()); }

// The update rule of most runs: momentum SGD on minibatches of 8.
using Rule = std::vector<std::string>;
const Rule kMomentum = {"--lr", "0.02", "--batch", "8", "--momentum", "0.9"};

// A run of `model` on the images by `rule` (json log, a step event every 100 steps); `extra`
// after everything.
std::vector<std::string> Train(const std::string& data, int workers, int64_t steps,
                               const std::vector<std::string>& extra = {},
                               const Rule& rule = kMomentum, const std::string& model = kModel) {
  std::vector<std::string> a = {SHMTRAIN_BIN, "train", "--no-metrics", "--no-progress",
                                "--log-format", "json", "--log-every", "100", "--data", data,
                                "--input-shape", "1,6,6", "--model", model, "--loss", "xent",
                                "--workers", std::to_string(workers), "--seed", "5", "--steps",
                                std::to_string(steps)};
  a.insert(a.end(), rule.begin(), rule.end());
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

ProcResult Finish(const std::vector<std::string>& argv) {
  ProcResult r = test::RunProcess(argv, kRunTimeout);
  test::ExpectCleanedUp(r);
  return r;
}

// The undisturbed run of Train(data, workers, steps): its model file's bytes and its wall time,
// once per test process.
struct Reference {
  std::string model;
  double wall_s = NAN;
};
const Reference& SyncReference(const std::string& data, int workers, int64_t steps) {
  static auto* cache = new std::map<std::vector<std::string>, Reference>();
  const std::vector<std::string> key = Train(data, workers, steps);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  TempDir dir;
  const ProcResult r = Finish(Train(data, workers, steps, {"--save", dir.File("ref.model")}));
  EXPECT_TRUE(ExitedWith(r, 0));
  Reference ref;
  if (r.exited && r.exit_code == 0) {
    EXPECT_EQ(Num(SummaryOf(r), "restarts"), 0);
    ref.wall_s = Num(SummaryOf(r), "wall_s");
    ref.model = test::ReadWholeFile(dir.File("ref.model"));
  }
  if (ref.model.empty()) return *new Reference();  // not cached: the caller fails
  return cache->emplace(key, ref).first->second;
}

// The buffers of each batch norm layer of params: running_mean, running_var, and
// num_batches_tracked.
struct Buffers {
  std::vector<float> mean, var;
  float tracked = NAN;
};
std::vector<Buffers> BuffersOf(const ModelSpec& spec, const std::vector<float>& params) {
  std::vector<Buffers> out;
  for (const nn::NormSite& s : nn::NormSites(spec)) {
    const float* p = params.data() + s.running;
    out.push_back({{p, p + s.channels}, {p + s.channels, p + 2 * s.channels}, p[2 * s.channels]});
  }
  return out;
}

// Every layer's running statistics moved away from their start (mean 0, variance 1), and
// num_batches_tracked is `steps`.
void ExpectMovedBy(const ModelSpec& spec, const std::vector<float>& params, double steps) {
  const std::vector<Buffers> b = BuffersOf(spec, params);
  ASSERT_EQ(b.size(), nn::NormSites(spec).size());
  ASSERT_FALSE(b.empty());
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].tracked, steps) << "batch norm layer " << i << ": num_batches_tracked";
    EXPECT_TRUE(std::any_of(b[i].mean.begin(), b[i].mean.end(), [](float v) { return v != 0; }))
        << "batch norm layer " << i << ": running_mean never moved from 0";
    EXPECT_TRUE(std::any_of(b[i].var.begin(), b[i].var.end(), [](float v) { return v != 1; }))
        << "batch norm layer " << i << ": running_var never moved from 1";
  }
}

// A run read as it goes: json events, the current worker of each rank.
class LiveRun {
 public:
  explicit LiveRun(const std::vector<std::string>& argv) : p_(argv) {}
  pid_t master() const { return p_.pid(); }
  pid_t worker(int rank) const { return workers_.count(rank) ? workers_.at(rank) : -1; }
  // Reads events until one of kind `event` (and rank `rank`, unless -1); the line in *hit.
  bool Until(const std::string& event, int rank = -1, std::string* hit = nullptr) {
    std::string line;
    const Clock::time_point deadline = Clock::now() + kEventTimeout;
    while (Clock::now() < deadline &&
           p_.ReadLine(&line, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()))) {
      const std::string kind = JsonField(line, "event").value_or("");
      if (kind == "worker_started") {
        workers_[std::stoi(*JsonField(line, "rank"))] = std::stoi(*JsonField(line, "pid"));
      }
      if (kind == event && (rank < 0 || JsonField(line, "rank") == std::to_string(rank))) {
        if (hit != nullptr) *hit = line;
        return true;
      }
    }
    return false;
  }
  bool Signal(int sig) { return p_.Signal(sig); }
  ProcResult Wait() { return p_.Wait(kRunTimeout); }

 private:
  test::Subprocess p_;
  std::map<int, pid_t> workers_;
};

// ---------------------------------------------------------------------------------------------
// 1. Chaos (--chaos-kill-every, at the pace of this build: tests/proc_util.h, "Chaos") and the
// fault points of a step: a rank killed anywhere, a crossing included, is replaced, redoes its
// phase, republishes the same sums under the same sequence numbers, and the run ends with the
// bits of the run that saw no fault.

TEST(BatchNormRun, ChaosEndsByteIdentical) {
  SHMTRAIN_REPEATS_PATHS_TEST();
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  for (const int workers : {2, 3}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    constexpr int64_t kUsual = 3000;
    const Reference& usual = SyncReference(data, workers, kUsual);
    ASSERT_FALSE(usual.model.empty());
    const double recovery_s = test::MeasureRecovery(
        [&](int64_t steps) {
          const ProcResult once = Finish(test::WithOneDeath(Train(data, workers, steps)));
          EXPECT_TRUE(ExitedWith(once, 0));
          return SummaryOf(once);
        },
        300);
    ASSERT_FALSE(std::isnan(recovery_s));
    const int64_t every_ms = test::ChaosEveryMs(usual.wall_s, 20, recovery_s, 3, 50);
    const int64_t steps = test::StepsForIntervals(kUsual, usual.wall_s, every_ms, 8);
    const Reference& ref = SyncReference(data, workers, steps);
    ASSERT_FALSE(ref.model.empty());
    const std::string model = dir.File("chaos.model");
    const ProcResult r = Finish(Train(data, workers, steps,
                                   {"--chaos-kill-every", std::to_string(every_ms) + "ms",
                                    "--chaos-seed", "3", "--save", model}));
    ASSERT_TRUE(ExitedWith(r, 0));
    const std::string s = SummaryOf(r);
    std::printf("[ batch norm chaos P=%d ] %lld steps, a recovery %.3f s, every %lld ms: %s\n",
                workers, static_cast<long long>(steps), recovery_s,
                static_cast<long long>(every_ms), test::ChaosOutcome(s).c_str());
    EXPECT_GE(Num(s, "restarts"), std::min(3, test::KillsAtLeast(Num(s, "wall_s"), every_ms)))
        << s;
    for (const auto& ev : Events(r.out, "worker_restart")) EXPECT_EQ(ev.at("reason"), "chaos");
    EXPECT_TRUE(SameBytes(test::ReadWholeFile(model), ref.model));
  }
}

// Rank 1 dies at step 100 before its gradient (2), with half its gradient slot NaN (3), after
// arriving at barrier 1 (4), with half its slice of W and of the momentum NaN (5: the buffers
// in it are rewritten from the step's sums again), after arriving at barrier 2 (6).
TEST(BatchNormRun, EveryFaultPointOfAStepEndsByteIdentical) {
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  constexpr int64_t kSteps = 400;
  const Reference& ref = SyncReference(data, 3, kSteps);
  ASSERT_FALSE(ref.model.empty());
  for (const int point : test::UnlessSanitized(std::vector<int>{2, 3, 4, 5, 6}, {3, 5})) {
    SCOPED_TRACE("--fault-point " + std::to_string(point));
    const std::string model = dir.File("point" + std::to_string(point) + ".model");
    const ProcResult r = Finish(Train(data, 3, kSteps,
                                   {"--fault-rank", "1", "--fault-step", "100", "--fault-point",
                                    std::to_string(point), "--save", model}));
    if (!ExitedWith(r, 0)) {
      ADD_FAILURE() << test::Clip(r.Describe());
      continue;
    }
    EXPECT_EQ(Num(SummaryOf(r), "restarts"), 1) << SummaryOf(r);
    EXPECT_TRUE(SameBytes(test::ReadWholeFile(model), ref.model));
  }
}

// ---------------------------------------------------------------------------------------------
// 2. A master SIGKILLed past a checkpoint: the checkpoint holds the running statistics of its
// step (moved, and num_batches_tracked = the step), and --resume ends with the bits of the run
// that never stopped.

TEST(BatchNormRun, ResumeIsExactAndTheCheckpointHoldsTheStatistics) {
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  constexpr int64_t kSteps = 20000;
  const Reference& ref = SyncReference(data, 2, kSteps);
  ASSERT_FALSE(ref.model.empty());
  const std::string ckpt = dir.File("run.ckpt");
  const std::vector<std::string> opts = {"--checkpoint", ckpt, "--checkpoint-every", "1000"};
  {
    LiveRun run(Train(data, 2, kSteps, opts));
    ASSERT_GT(run.master(), 0);
    ASSERT_TRUE(run.Until("checkpoint"));
    ASSERT_TRUE(run.Signal(SIGKILL));
    const ProcResult dead = run.Wait();
    ASSERT_EQ(dead.term_signal, SIGKILL) << dead.Describe();
    for (const pid_t w : test::StartedWorkers(dead.out)) {
      EXPECT_TRUE(test::WaitPidGone(w, milliseconds{5000})) << w;
    }
  }
  Checkpoint c;
  ASSERT_TRUE(LoadCheckpoint(ckpt, &c).ok());
  ASSERT_GE(c.step, 1000);
  ASSERT_LT(c.step, kSteps);
  std::printf("[ batch norm resume ] master SIGKILLed, checkpoint at step %lld\n",
              static_cast<long long>(c.step));
  ModelSpec spec = test::LoadSaved(dir.Write("ref.model", ref.model)).spec;
  ExpectMovedBy(spec, c.params, static_cast<double>(c.step));

  const std::string model = dir.File("resumed.model");
  std::vector<std::string> resume = opts;
  resume.insert(resume.end(), {"--resume", ckpt, "--save", model});
  const ProcResult r = Finish(Train(data, 2, kSteps, resume));
  ASSERT_TRUE(ExitedWith(r, 0));
  EXPECT_EQ(Num(SummaryOf(r), "first_step"), c.step);
  EXPECT_TRUE(SameBytes(test::ReadWholeFile(model), ref.model));
  ExpectMovedBy(spec, test::LoadSaved(model).params, kSteps);
}

// ---------------------------------------------------------------------------------------------
// 3. 30 rows in minibatches of 7: every fifth step's batch is the epoch's last 2 rows, and of 3
// ranks rank 0 has none. It still takes part in both crossings of every layer (a pass over 0
// samples, nn/net.cc), so nobody waits for it in vain, and 3 workers train what 1 trains, to
// float rounding (1e-5 of the largest parameter, as tests/resnet_head_test.cc).

TEST(BatchNormRun, ARankWithNoRowsStillCrossesAndPWorkersTrainWhatOneTrains) {
  const data::BatchPlan plan(Images::kRows, 7, 5);
  ASSERT_EQ(plan.BatchRows(4), 2);
  ASSERT_EQ(data::BatchPlan::ShareOf(2, 0, 3).end, 0) << "rank 0 has rows in step 4";
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  constexpr int64_t kSteps = 50;  // 10 epochs: 10 steps with an empty share
  std::map<int, std::vector<float>> params;
  for (const int workers : {1, 3}) {
    const std::string model = dir.File("p" + std::to_string(workers) + ".model");
    const ProcResult r =
        Finish(Train(data, workers, kSteps, {"--barrier-timeout", "10s", "--save", model},
                  {"--batch", "7", "--lr", "0.2"}, kHeadModel));
    ASSERT_TRUE(ExitedWith(r, 0));
    EXPECT_EQ(Num(SummaryOf(r), "restarts"), 0) << SummaryOf(r);
    params[workers] = test::LoadSaved(model).params;
  }
  const std::vector<double> want(params[1].begin(), params[1].end());
  const double diff = test::MaxScaledDiff(params[3], want);
  std::printf("[ batch norm, a rank with no rows ] P = 3 against P = 1: %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);
  const ModelSpec spec = test::LoadSaved(dir.File("p1.model")).spec;
  ExpectMovedBy(spec, params[3], kSteps);
}

// ---------------------------------------------------------------------------------------------
// 4. A rank stopped (SIGSTOP) while its peers wait for its sums in a crossing (where a batch
// norm step spends most of its waits): as at the phase barrier (tests/fault_test.cc,
// BarrierTimeoutBlamesTheStoppedRank), the stopped rank is killed as hung and replaced within
// its heartbeat timeout, the peers waiting in the crossing keep their heartbeats and are never
// blamed (at most restarted as its victims), and the run ends with the undisturbed bits. Each
// rank is stopped once in turn: a stop that finds the peers at a barrier instead (the rank
// stopped between its last crossing and its arrival) proves less.

TEST(BatchNormRun, AStoppedRankIsReplacedAndItsPeersInACrossingAreNotBlamed) {
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  constexpr int64_t kSteps = 20000;
  const Reference& ref = SyncReference(data, 3, kSteps);
  ASSERT_FALSE(ref.model.empty());
  // The deadline follows how fast this machine runs a worker now (fault_test.cc's rule): ten
  // times a short run, 1 s at least; the heartbeat timeout is half of it (the default).
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(ExitedWith(Finish(Train(data, 3, 300)), 0));
  const double short_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double barrier_s = std::clamp(10 * short_s, 1.0, 60.0);
  char barrier[32];
  std::snprintf(barrier, sizeof barrier, "%.1fs", barrier_s);
  const std::string model = dir.File("m.model");
  LiveRun run(Train(data, 3, kSteps, {"--barrier-timeout", barrier, "--save", model}));
  ASSERT_GT(run.master(), 0);
  std::vector<pid_t> stopped;
  for (const int rank : {1, 2, 0}) {
    ASSERT_TRUE(run.Until("step")) << "no progress before stopping rank " << rank;
    stopped.push_back(run.worker(rank));
    ASSERT_GT(stopped.back(), 0);
    ASSERT_EQ(kill(stopped.back(), SIGSTOP), 0);
    const Clock::time_point at = Clock::now();
    std::string restart;
    ASSERT_TRUE(run.Until("worker_restart", rank, &restart)) << "rank " << rank << " never replaced";
    const double took_s = std::chrono::duration<double>(Clock::now() - at).count();
    std::printf("[ batch norm, stopped rank %d ] --barrier-timeout %s: replaced after %.3f s\n",
                rank, barrier, took_s);
    EXPECT_EQ(JsonField(restart, "reason"), "hang") << restart;
    EXPECT_LT(took_s, barrier_s + 5) << "rank " << rank << " not replaced within its deadline";
  }
  const ProcResult r = run.Wait();
  test::ExpectCleanedUp(r);
  ASSERT_TRUE(ExitedWith(r, 0));
  for (const pid_t w : stopped) EXPECT_TRUE(test::WaitPidGone(w, milliseconds{5000})) << w;
  std::map<std::string, int> hung;
  for (const auto& ev : Events(r.out, "worker_restart")) {
    if (ev.at("reason") == "hang") {
      ++hung[ev.at("rank")];
    } else {
      EXPECT_EQ(ev.at("reason"), "peer_hang") << "rank " << ev.at("rank");
    }
  }
  EXPECT_EQ(hung, (std::map<std::string, int>{{"0", 1}, {"1", 1}, {"2", 1}}))
      << "a rank was killed as hung more often than it was stopped: a healthy one blamed";
  EXPECT_EQ(Num(SummaryOf(r), "steps"), kSteps);
  EXPECT_TRUE(SameBytes(test::ReadWholeFile(model), ref.model));
}

// ---------------------------------------------------------------------------------------------
// 5. Async: each update normalises with its own minibatch's statistics and moves the shared
// running statistics after it is applied. One worker with --rule asgd is sync's SGD (the same
// minibatches in the same order); two count every applied update in num_batches_tracked, and
// their running statistics stand in for the batch's: eval with them scores as the same
// parameters do with the statistics of the whole training set as one batch (a step of
// momentum 1 over it: nn::AdvanceRunningStats from the sums of one training pass).

// eval's json event on the images: accuracy and loss.
std::pair<double, double> Eval(const std::string& model, const std::string& data) {
  const ProcResult e =
      test::Shmtrain({"eval", "--model", model, "--data", data, "--log-format", "json"}, kRunTimeout);
  EXPECT_TRUE(ExitedWith(e, 0));
  const std::vector<std::string> lines = test::SplitLines(e.out);
  if (lines.empty()) return {NAN, NAN};
  return {std::stod(JsonField(lines.back(), "accuracy").value_or("nan")),
          std::stod(JsonField(lines.back(), "loss").value_or("nan"))};
}

// m with each layer's running statistics set to those of the whole data set as one batch.
Model WithBatchStatistics(Model m, const Images& d) {
  const std::vector<float> x(d.x.begin(), d.x.end());
  const std::vector<float> y(d.y.begin(), d.y.end());
  nn::Net<float> net(m.spec);
  nn::RecordedStats sums(m.spec);
  nn::PassInfo pass;
  pass.train = true;
  pass.stats = &sums;
  net.LossSum(m.params.data(), x.data(), y.data(), Images::kRows, pass);
  std::vector<nn::NormSite> sites = nn::NormSites(m.spec);
  for (nn::NormSite& s : sites) s.momentum = 1;
  const std::vector<float> before = m.params;
  nn::AdvanceRunningStats(sites, sums.data(), before.data(), m.params.data(), 0,
                          static_cast<int64_t>(m.params.size()));
  return m;
}

TEST(BatchNormRun, AsyncCountsEveryUpdateAndItsStatisticsStandInForTheBatchs) {
  const Rule kPlain = {"--lr", "0.05", "--batch", "8"};
  TempDir dir;
  const Images d;
  const std::string data = ImagesCsv(dir);
  auto async = [&](int workers, int64_t steps, const std::string& rule, const std::string& file) {
    return Finish(Train(data, workers, steps, {"--mode", "async", "--rule", rule, "--save",
                                            dir.File(file)}, kPlain));
  };
  // One worker: sync's SGD, running statistics included.
  const ProcResult one = async(1, 300, "asgd", "one.model");
  ASSERT_TRUE(ExitedWith(one, 0));
  const ProcResult sync = Finish(Train(data, 1, 300, {"--save", dir.File("sync.model")}, kPlain));
  ASSERT_TRUE(ExitedWith(sync, 0));
  const Model s = test::LoadSaved(dir.File("sync.model"));
  const double diff = test::MaxScaledDiff(test::LoadSaved(dir.File("one.model")).params,
                                          std::vector<double>(s.params.begin(), s.params.end()));
  std::printf("[ batch norm async ] one worker's asgd against sync: %.3g\n", diff);
  EXPECT_LE(diff, 1e-5);

  constexpr int64_t kSteps = 5000;
  const ProcResult two = async(2, kSteps, "dc-asgd-a", "two.model");
  ASSERT_TRUE(ExitedWith(two, 0));
  const std::string sum = SummaryOf(two);
  ASSERT_EQ(Num(sum, "updates"), kSteps) << sum;
  ASSERT_EQ(Num(sum, "torn_updates"), 0) << sum;
  const Model m = test::LoadSaved(dir.File("two.model"));
  ExpectMovedBy(m.spec, m.params, kSteps);

  const std::string batch = dir.Write("batch.model", EncodeModel(WithBatchStatistics(m, d)));
  const auto [acc, loss] = Eval(dir.File("two.model"), data);
  const auto [acc_batch, loss_batch] = Eval(batch, data);
  std::printf("[ batch norm async ] accuracy %.3f, loss %.3g (running statistics); %.3f, %.3g "
              "(the batch's)\n", acc, loss, acc_batch, loss_batch);
  EXPECT_GE(acc_batch, 0.9) << "the run did not train";
  EXPECT_LE(std::fabs(acc - acc_batch), 0.1);  // 3 images of 30
  EXPECT_LE(loss, 2 * loss_batch + 0.05);
}

// ---------------------------------------------------------------------------------------------
// 6. What is refused: a batch norm model in async across hosts (mpirun; sync across hosts
// crosses the hosts, tests/hosts_batchnorm_test.cc), before any worker starts, naming batch
// norm, nothing left; and a segment whose statistics count is not
// its model's, by the worker's segment check, which writes nothing into it.

#ifdef SHMTRAIN_TEST_MPI
class BatchNormHosts : public test::MpiTest {};

TEST_F(BatchNormHosts, ABatchNormModelIsRefusedInAsyncAcrossHosts) {
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  for (const char* mode : {"async"}) {
    SCOPED_TRACE(std::string("--mode ") + mode);
    test::MpiJob job(2, Train(data, 2, 50, {"--mode", mode, "--save", dir.File("never.model")},
                              {"--lr", "0.05", "--batch", "8"}));
    const ProcResult r = job.Wait(test::kJobTimeout);
    test::ExpectJobGone(job, Clock::now(), milliseconds{2'000});
    EXPECT_TRUE(ExitedWith(r, 2));
    EXPECT_TRUE(Contains(r.err, "the model's batch norm layers need")) << test::Clip(r.err);
    EXPECT_TRUE(Events(r.out, "worker_started").empty()) << test::Clip(r.out);
    for (int h = 0; h < job.hosts(); ++h) EXPECT_TRUE(job.workers(h).empty());
    EXPECT_FALSE(test::FileExists(dir.File("never.model")));
  }
}
#else
TEST(BatchNormHosts, ABatchNormModelIsRefusedInAsyncAcrossHosts) {
  GTEST_SKIP() << "a build without MPI runs no hosts";
}
#endif

TEST(BatchNormSegment, AStatisticsCountNotTheModelsIsRefusedByTheWorker) {
  shm::Header h = test::ParabolaLayout(Mode::kSync, 2, 0);
  ModelSpec spec;
  spec.input = {1, 1, 1};
  ASSERT_TRUE(nn::ParseModelText("linear(5),batchnorm1d,tanh,linear(1)", &spec.layers).ok());
  std::snprintf(h.config.model, sizeof h.config.model, "%s", nn::ModelText(spec.layers).c_str());
  h.config.param_count = spec.ParamCount();
  const auto count = static_cast<uint64_t>(nn::StatsCount(spec));
  ASSERT_EQ(count, 4u * 5 + 1);
  h.config.stats_count = count;
  ASSERT_TRUE(shm::ComputeLayout(&h));
  const shm::SegmentCheck right = shm::Segment::Validate(h, h.total_size);
  ASSERT_EQ(right.worker_exit, kWorkerOk) << right.status.message();
  for (const uint64_t wrong : {uint64_t{0}, count - 1, count + 4}) {
    SCOPED_TRACE("stats_count " + std::to_string(wrong) + " for " + std::to_string(count));
    h.config.stats_count = wrong;
    ASSERT_TRUE(shm::ComputeLayout(&h));  // laid out for its count: only the count is wrong
    shm::Segment seg;
    ASSERT_TRUE(shm::Segment::Create(shm::MakeSegmentName(), h, &seg).ok());
    const std::string before(seg.base(), seg.size());
    const ProcResult r = test::RunProcess({SHMTRAIN_WORKER_BIN, seg.name(), "0", "0"}, kRunTimeout);
    EXPECT_TRUE(ExitedWith(r, kWorkerBadLayout));
    EXPECT_TRUE(Contains(r.err, "stats_count " + std::to_string(wrong) +
                                    " is not the batch norm layers' count (" +
                                    std::to_string(count) + ")"))
        << r.err;
    EXPECT_TRUE(std::string(seg.base(), seg.size()) == before)
        << "the worker wrote into a segment it refused";
  }
}

// ---------------------------------------------------------------------------------------------
// 7. eval and predict normalise with the running statistics: a model that differs only in one
// layer's running_mean predicts otherwise, and an image predicted alone gets the probabilities
// it gets among all 30 (batch statistics would depend on the rows beside it).

TEST(BatchNormRun, EvalAndPredictUseTheRunningStatistics) {
  TempDir dir;
  const std::string data = ImagesCsv(dir);
  const std::string trained = dir.File("m.model");
  ASSERT_TRUE(ExitedWith(Finish(Train(data, 2, 300, {"--save", trained})), 0));
  Model m = test::LoadSaved(trained);
  const nn::NormSite first = nn::NormSites(m.spec).at(0);
  for (int64_t c = 0; c < first.channels; ++c) m.params[first.running + c] += 0.5f;
  const std::string shifted = dir.Write("shifted.model", EncodeModel(m));

  auto predict = [&](const std::string& model, const std::string& rows) {
    const std::string out = dir.File("p.csv");
    std::remove(out.c_str());
    const ProcResult r = test::Shmtrain(
        {"predict", "--model", model, "--data", rows, "--out", out}, kRunTimeout);
    EXPECT_TRUE(ExitedWith(r, 0));
    return test::SplitLines(test::ReadWholeFile(out));
  };
  const std::vector<std::string> all = predict(trained, data);
  ASSERT_EQ(all.size(), static_cast<size_t>(Images::kRows) + 1);  // a header, then a row each
  EXPECT_TRUE(predict(shifted, data) != all) << "running_mean changed nothing predict prints";
  EXPECT_NE(Eval(shifted, data).second, Eval(trained, data).second)
      << "running_mean changed nothing of eval's loss";
  const std::string csv = Images().Csv();
  for (const int row : {0, 17}) {
    size_t at = 0;
    for (int i = 0; i < row; ++i) at = csv.find('\n', at) + 1;
    const std::string alone = dir.Write("row.csv", csv.substr(at, csv.find('\n', at) + 1 - at));
    const std::vector<std::string> one = predict(trained, alone);
    ASSERT_EQ(one.size(), 2u);
    EXPECT_EQ(one[1], all[static_cast<size_t>(row) + 1]) << "image " << row << " alone";
  }
}

}  // namespace
}  // namespace shmtrain
