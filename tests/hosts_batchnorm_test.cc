// Batch norm across hosts under Open MPI (sync), judged from outside as tests/hosts_test.cc
// judges the other runs of several hosts: every crossing's statistics cross the hosts through
// the combiner (master/hosts/combiner.h), so that
//  1. H hosts x P workers train what one process trains at the same global batch, to float
//     rounding (the running statistics included), full batch and minibatches; with one worker
//     a host, at the very bits of one host with H workers (the host order is then the rank
//     order); two identical runs save identical bytes;
//  2. a worker SIGKILLed on host 1 at every sync fault point, the crossing's among them, and
//     random kills on every host end byte-identical to the undisturbed run;
//  3. async across hosts still refuses batch norm, saying why;
//  4. the cost: the time per step of 2 hosts against one, and of a crossing's exchange,
//     printed (not asserted: the machine is shared).
//
// The model and data of tests/batchnorm_test.cc: conv2d, batchnorm2d, relu, pooling, linear
// on the 30 small images of tests/line_images.h; two crossings a step (batch norm's forward
// and backward sums).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/line_images.h"
#include "tests/mpi_job.h"
#include "tests/proc_util.h"
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
using test::kJobTimeout;
using test::MpiJob;
using test::Num;
using test::ProcResult;
using test::RunJob;
using test::SameBytes;
using test::SummaryOf;
using test::TempDir;

constexpr const char* kMasterBin = SHMTRAIN_BIN;
constexpr const char* kModel =
    "conv2d(4,3,padding=1,bias=false),batchnorm2d,relu,adaptiveavgpool2d(1),flatten,linear(3)";
// The parameters (tests/batchnorm_test.cc): the convolution's 36, then batch norm's weight,
// bias, running_mean, running_var (4 each) and num_batches_tracked, then the linear layer's.
constexpr int kChannels = 4, kBn = 9 * kChannels, kTracked = kBn + 4 * kChannels;
// Float rounding in another order of additions, against the largest parameter (the bound of
// tests/batchnorm_test.cc); statistics of one host's rows alone are orders of magnitude off.
constexpr double kTol = 1e-6;

// A train run of `workers` a host on the images in `data`: json output, no metrics, the
// model's loss only at the end.
std::vector<std::string> Train(const std::string& data, int workers, int64_t steps,
                               const std::vector<std::string>& extra) {
  std::vector<std::string> a = {
      kMasterBin,  "train", "--data",  data,   "--input-shape", "1,6,6",  "--model",
      kModel,      "--loss", "xent",   "--workers", std::to_string(workers), "--lr", "0.5",
      "--steps",   std::to_string(steps), "--seed", "5", "--log-every", "0", "--no-progress",
      "--no-metrics", "--log-format", "json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// One host: the same command without mpirun.
ProcResult RunOneHost(const std::vector<std::string>& argv) {
  return test::RunProcess(argv, milliseconds{120'000});
}

std::vector<float> ParamsOf(const std::string& path) { return test::LoadSaved(path).params; }

// max |a - b| over max |b|; INFINITY for different sizes, NaN, or an empty b.
double ScaledDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double diff = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!(d <= diff)) diff = d;  // NaN sticks
    largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
  }
  return largest > 0 ? diff / largest : INFINITY;
}

class HostsBatchNormTest : public test::MpiTest {
 protected:
  void SetUp() override {
    test::MpiTest::SetUp();
    data_ = dir_.Write("images.csv", test::Images().Csv());
  }
  TempDir dir_;
  std::string data_;
};

// ---------------------------------------------------------------------------------------------
// 1. H hosts x P workers against one process at the same global batch.

struct Batching {
  const char* name;
  std::vector<std::string> flags;
};

void PrintTo(const Batching& b, std::ostream* os) { *os << b.name; }

class HostsBatchNormMatchTest : public HostsBatchNormTest,
                                public ::testing::WithParamInterface<Batching> {};

TEST_P(HostsBatchNormMatchTest, HostsTrainWhatOneWorkerTrains) {
  constexpr int64_t kSteps = 10;
  const std::vector<std::string>& batch = GetParam().flags;
  auto with = [&](std::vector<std::string> extra, const std::string& file) {
    extra.insert(extra.end(), batch.begin(), batch.end());
    extra.insert(extra.end(), {"--save", file});
    return extra;
  };
  const std::string one_file = dir_.File("one.model");
  ASSERT_TRUE(ExitedWith(RunOneHost(Train(data_, 1, kSteps, with({}, one_file))), 0));
  const std::vector<float> want = ParamsOf(one_file);
  ASSERT_EQ(want[kTracked], static_cast<float>(kSteps)) << "num_batches_tracked";
  // One host with 2 workers: what 2 hosts of one worker each add, in the same order.
  const std::string two_workers = dir_.File("two_workers.model");
  ASSERT_TRUE(ExitedWith(RunOneHost(Train(data_, 2, kSteps, with({}, two_workers))), 0));

  // Under a sanitizer 2 x 2 alone: its combiner adds two ranks, the paths of 2 x 1's and more.
  for (const int P : test::UnlessSanitized<std::vector<int>>({1, 2}, {2})) {
    std::string first;
    for (int k = 1; k <= 2; ++k) {
      SCOPED_TRACE("2 hosts x " + std::to_string(P) + " workers, run " + std::to_string(k));
      const std::string file = dir_.File("2x" + std::to_string(P) + "-" + std::to_string(k));
      const ProcResult r = RunJob(2, Train(data_, P, kSteps, with({}, file)));
      ASSERT_TRUE(ExitedWith(r, 0));
      const std::string s = SummaryOf(r);
      EXPECT_EQ(Num(s, "hosts"), 2) << s;
      const std::vector<float> got = ParamsOf(file);
      const double diff = ScaledDiff(got, want);
      std::printf("[ batch norm, %s, 2 hosts x %d ] against one worker: %.3g\n", GetParam().name,
                  P, diff);
      EXPECT_LE(diff, kTol);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(got[kTracked], static_cast<float>(kSteps)) << "num_batches_tracked";
      const std::string bytes = test::ReadWholeFile(file);
      if (k == 1) {
        first = bytes;
      } else {
        EXPECT_TRUE(SameBytes(bytes, first)) << "two identical runs";
      }
      if (P == 1) {
        EXPECT_TRUE(SameBytes(bytes, test::ReadWholeFile(two_workers)))
            << "one worker a host: the host order is one host's rank order";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Batches, HostsBatchNormMatchTest,
                         ::testing::Values(Batching{"full_batch", {}},
                                           Batching{"minibatch", {"--batch", "8"}}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// 2. Workers killed: at each point of step kFaultStep on host 1 (point 11 between the step's
// two crossings, once the second's sums are published: the replacement redoes crossings that
// the combiner may have exchanged already), and at random on every host.

constexpr int64_t kFaultSteps = 300;  // the replacement's steps: long enough for the watch
constexpr int64_t kFaultStep = 20;

TEST_F(HostsBatchNormTest, WorkerKilledOnHost1AtEverySyncPointEndsByteIdentical) {
  const std::vector<int> points =
      test::UnlessSanitized<std::vector<int>>({2, 3, 4, 5, 6, 9, 10, 11}, {11});
  const std::vector<std::string> rule = {"--batch", "8", "--momentum", "0.9"};
  auto run = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), rule.begin(), rule.end());
    return Train(data_, 2, kFaultSteps, extra);
  };
  const std::string ref_file = dir_.File("undisturbed.model");
  ASSERT_TRUE(ExitedWith(RunJob(2, run({"--save", ref_file})), 0));
  const std::string want = test::ReadWholeFile(ref_file);
  for (const int point : points) {
    SCOPED_TRACE("--fault-point " + std::to_string(point));
    const std::string file = dir_.File("point" + std::to_string(point) + ".model");
    MpiJob job(2, run({"--fault-host", "1", "--fault-rank", "1", "--fault-point",
                       std::to_string(point), "--fault-step", std::to_string(kFaultStep), "--save",
                       file}));
    const ProcResult r = job.Wait(kJobTimeout);
    ExpectJobGone(job, Clock::now(), milliseconds{2'000});
    if (!ExitedWith(r, 0)) {
      ADD_FAILURE() << ExitedWith(r, 0).message();
      continue;
    }
    EXPECT_TRUE(SameBytes(test::ReadWholeFile(file), want));
    EXPECT_TRUE(job.SawIncarnation(1, 1, 1))
        << "the fault did not fire on host 1 (no incarnation 1 of its rank 1):\n"
        << job.DescribeWorkers();
    EXPECT_EQ(Num(SummaryOf(r), "restarts"), 0) << "host 0 restarted a worker";
  }
}

// Random kills on every host (--chaos-kill-every), paced as tests/hosts_test.cc paces them
// (ChaosOnEveryHostEndsByteIdentical): a kill lands mostly inside a crossing's exchange, where a
// step of this model spends its time.
TEST_F(HostsBatchNormTest, ChaosOnEveryHostEndsByteIdentical) {
  SHMTRAIN_REPEATS_PATHS_TEST();
  constexpr int64_t kSteps = 3000;
  auto run = [&](int64_t steps, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--batch", "8", "--momentum", "0.9"});
    return Train(data_, 2, steps, extra);
  };
  const std::string ref_file = dir_.File("reference.model");
  auto reference = [&](int64_t steps) {
    const ProcResult r = RunJob(2, test::WithOneDeath(run(steps, {"--save", ref_file})));
    EXPECT_TRUE(ExitedWith(r, 0));
    return SummaryOf(r);
  };
  int64_t steps = kSteps;
  std::string ref = reference(steps);
  ASSERT_FALSE(HasFailure());
  double wall_s = Num(ref, "wall_s");
  const double recovery_s = test::RecoverySeconds(ref);
  ASSERT_TRUE(wall_s > 0 && recovery_s > 0) << ref;
  const int64_t every_ms = test::ChaosEveryMs(wall_s, 15, recovery_s, 4, 20);
  if (test::StepsForIntervals(kSteps, wall_s, every_ms, 3) != kSteps) {
    steps = test::StepsForIntervals(kSteps, wall_s, every_ms, 3);
    ref = reference(steps);
    ASSERT_FALSE(HasFailure());
  }
  std::printf("[ chaos ] reference: %lld steps in %.3f s, a recovery %.3f s: kills every %lld ms\n",
              static_cast<long long>(steps), Num(ref, "wall_s"), recovery_s,
              static_cast<long long>(every_ms));
  const std::string file = dir_.File("chaos.model");
  MpiJob job(2, run(steps, {"--chaos-kill-every", std::to_string(every_ms) + "ms", "--chaos-seed",
                            "5", "--save", file}));
  const ProcResult r =
      job.Wait(std::max(kJobTimeout, milliseconds{static_cast<int64_t>(10e3 * wall_s)}));
  ExpectJobGone(job, Clock::now(), milliseconds{2'000});
  ASSERT_TRUE(ExitedWith(r, 0));
  const std::string s = SummaryOf(r);
  const int want = std::min(5, test::KillsAtLeast(Num(s, "wall_s"), every_ms));
  int replaced_on_host1 = 0;
  for (const auto& [pid, w] : job.workers(1)) replaced_on_host1 += w.incarnation > 0;
  std::printf("[ chaos ] host 0: %s; host 1: %d replacements seen\n", test::ChaosOutcome(s).c_str(),
              replaced_on_host1);
  EXPECT_GE(Num(s, "restarts"), want) << "fewer kills on host 0 than its pace makes: " << s;
  EXPECT_GE(replaced_on_host1, std::min(1, want)) << job.DescribeWorkers();
  EXPECT_TRUE(SameBytes(test::ReadWholeFile(file), test::ReadWholeFile(ref_file)));
}

// ---------------------------------------------------------------------------------------------
// 3. Async across hosts: the parameter server does not move the running statistics.

TEST_F(HostsBatchNormTest, AsyncAcrossHostsIsRefused) {
  MpiJob job(2, Train(data_, 2, 20, {"--mode", "async"}));
  const ProcResult r = job.Wait(kJobTimeout);
  ExpectJobGone(job, Clock::now(), milliseconds{2'000});
  EXPECT_TRUE(ExitedWith(r, 2));
  EXPECT_TRUE(Contains(r.err, "the model's batch norm layers need one host with --mode async "
                              "(this run has 2 hosts)"))
      << Clip(r.err);
  EXPECT_TRUE(Events(r.out, "worker_started").empty()) << Clip(r.out);
}

// ---------------------------------------------------------------------------------------------
// 4. The cost, printed: one host of 2 workers against 2 hosts of one (the same ranks, the
// same bits), full batch. Each step of the latter waits for two crossings' exchanges and the
// gradient's combine.

TEST_F(HostsBatchNormTest, PrintsTheTimePerStepAgainstOneHost) {
#ifdef SHMTRAIN_SANITIZED
  GTEST_SKIP() << "a timing; the normal build prints it";
#endif
  constexpr int64_t kSteps = 2000;
  const ProcResult one = RunOneHost(Train(data_, 2, kSteps, {}));
  ASSERT_TRUE(ExitedWith(one, 0));
  const ProcResult two = RunJob(2, Train(data_, 1, kSteps, {}));
  ASSERT_TRUE(ExitedWith(two, 0));
  const std::string a = SummaryOf(one), b = SummaryOf(two);
  std::printf("[ cost ] batch norm, %lld steps: 1 host x 2 workers %.1f us/step; 2 hosts x 1 "
              "worker %.1f us/step (a crossing's exchange %.1f us, 2 a step; the gradient's "
              "combine %.1f us)\n",
              static_cast<long long>(kSteps), Num(a, "us_per_step"), Num(b, "us_per_step"),
              Num(b, "crossing_combine_us"), Num(b, "step_combine_us"));
  EXPECT_GT(Num(b, "crossing_combine_us"), 0) << b;
}

}  // namespace
}  // namespace shmtrain
