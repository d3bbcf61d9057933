// `shmtrain launch` (master/launch/launch.h; the jobs: tests/launch_job.h): a sync job of 3
// host masters × 2 workers on this machine (three slots named localhost stand for three
// hosts), whose host masters are SIGKILLed (with their workers), SIGSTOPped, or killed while
// the survivors save, at random steps; the launcher relaunches the job on the slots left, and
// the model it saves equals, byte for byte, the one of the same job that lost nothing. Then
// the limits: below --min-hosts, --max-relaunches used up, a host lost during a relaunch, the
// launcher itself killed. After every job, nothing is left: no process of the job (each
// carries a tag, passed on by the launcher to every host master), no segment. The async job
// that loses a host is tests/launch_async_test.cc.
//
// The pure rules (where the ranks go, which state is the newest, which slots are lost) are
// tested first, without a process.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/launch/placement.h"
#include "shmtrain/status.h"
#include "tests/launch_job.h"
#include "tests/line_images.h"
#include "tests/mpi_job.h"
#include "tests/proc_util.h"

namespace shmtrain::test {
namespace {

namespace launch = master::launch;

// ---- the rules, without a process.

TEST(LaunchPlacement, OneRankASlotAtTheStartAndTheRanksOfAMachineTogether) {
  const launch::Placement p = launch::Place({"a", "b", "c"}, {0, 1, 2}, 0, 3);
  EXPECT_EQ(p.rank_slot, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p.host_flag, "a:1,b:1,c:1");
  // A name given twice: two slots of one machine, whose ranks Open MPI places together.
  const launch::Placement twice = launch::Place({"a", "b", "a"}, {0, 1, 2}, 0, 3);
  EXPECT_EQ(twice.rank_slot, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(twice.host_flag, "a:2,b:1");
}

TEST(LaunchPlacement, TheSameRanksOnTheSlotsLeftRankZeroWhereTheStateIs) {
  // Slot 1 lost; the newest state is on slot 2: rank 0 goes there, the extra rank with it.
  const launch::Placement p = launch::Place({"a", "b", "c"}, {0, 2}, 2, 3);
  EXPECT_EQ(p.rank_slot, (std::vector<int>{2, 2, 0}));
  EXPECT_EQ(p.host_flag, "c:2,a:1");
  const launch::Placement one = launch::Place({"a", "b", "c"}, {1}, 1, 3);
  EXPECT_EQ(one.rank_slot, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(one.host_flag, "b:3");
  // Evenly: 6 ranks on 4 slots are 2, 2, 1, 1.
  const launch::Placement even = launch::Place({"a", "b", "c", "d", "e"}, {0, 1, 3, 4}, 0, 6);
  EXPECT_EQ(even.rank_slot, (std::vector<int>{0, 0, 1, 1, 3, 4}));
  EXPECT_EQ(even.host_flag, "a:2,b:2,d:1,e:1");
}

TEST(LaunchPlacement, TheNewestStateOnASlotLeftAndTheLostSlots) {
  const std::vector<launch::SavedState> saved = {
      {0, "ck", 100}, {2, "ck.host2", 101}, {1, "ck.host1", 102}};
  EXPECT_EQ(launch::Newest(saved, {0, 2})->path, "ck.host2");  // slot 1's newer one is lost
  EXPECT_EQ(launch::Newest(saved, {0, 1, 2})->path, "ck.host1");
  EXPECT_EQ(launch::Newest(saved, {3}), nullptr);
  // Equal steps: the earliest slot.
  EXPECT_EQ(launch::Newest({{2, "x", 5}, {0, "y", 5}}, {0, 2})->path, "y");

  std::vector<launch::RankEnd> ends(3);
  for (int r = 0; r < 3; ++r) {
    ends[r].connected = ends[r].exited = true;
    ends[r].code = 143;
    ends[r].name = "host " + std::to_string(r) + " (node)";
  }
  ends[1].exited = false;  // rank 1 ended without a word
  EXPECT_EQ(launch::LostSlots(ends, {0, 1, 2}), (std::vector<int>{1}));
  EXPECT_EQ(launch::LostSlots(ends, {2, 2, 0}), (std::vector<int>{2}));  // its slot, once
  ends[1].ending = true;  // it said it was ending, and died before its exit
  EXPECT_TRUE(launch::LostSlots(ends, {0, 1, 2}).empty());
  // Found silent by another rank (exit 6 naming it): lost, whatever it said once woken.
  ends[0].code = shmtrain::kExitHostLost;
  ends[0].error = "step 812: nothing arrived from host 2 (node) by the deadline";
  // A host other than host 0 prefixes its messages with its name: not a silent one.
  ends[1].code = shmtrain::kExitHostLost;
  ends[1].error = "host 1 (node): step 812: nothing arrived from host 2 (node) by the deadline";
  EXPECT_EQ(launch::LostSlots(ends, {0, 1, 2}), (std::vector<int>{2}));
  EXPECT_TRUE(launch::RankLost(ends, 2));
  EXPECT_FALSE(launch::RankLost(ends, 0));
}

// ---- real jobs (tests/launch_job.h): a lost host costs nothing.

TEST_F(LaunchTest, AHostKilledAtRandomStepsEndsWithTheBitsOfTheRunThatLostNone) {
  TempDir dir;
  const Job job = MlpJob(dir.File("ck"), 5000);
  const std::string& want = Undisturbed(job, dir);
  ASSERT_FALSE(want.empty());
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 5; ++round) {
    const int64_t at = std::uniform_int_distribution<int64_t>(200, 3500)(rng);
    const int victim = std::uniform_int_distribution<int>(0, kHosts - 1)(rng);
    SCOPED_TRACE("host " + std::to_string(victim) + " killed at step " + std::to_string(at));
    const std::string model = dir.File("model" + std::to_string(round));
    Launch l(MlpJob(dir.File("ck" + std::to_string(round)), 5000), model);
    const int64_t step = l.UntilStep(at, 1);
    ASSERT_GE(step, at) << Clip(l.process().err());
    l.KillHost(victim);
    const ProcResult r = l.Wait();
    ASSERT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
    ExpectRelaunch(r, 1, "host_died", Named(victim), step);
    EXPECT_EQ(EventsOf(r, "launch").size(), 2u);
    EXPECT_TRUE(SameBytes(ReadWholeFile(model), want));
    ExpectLaunchGone(l, milliseconds{5'000});
  }
}

TEST_F(LaunchTest, TwoHostsLostOneAfterTheOtherDownToOneHostEndWithTheSameBits) {
  TempDir dir;
  const Job job = MlpJob(dir.File("ck"), 5000);
  const std::string& want = Undisturbed(job, dir);
  const std::string model = dir.File("model");
  Launch l(job, model);
  ASSERT_GE(l.UntilStep(1500, 1), 1500);
  l.KillHost(1);
  // The second job runs the 3 host masters on 2 slots: ranks 0 and 1 on one, 2 on the other.
  ASSERT_GE(l.UntilStep(3000, 2), 3000) << Clip(l.process().err());
  l.KillHost(2);
  const ProcResult r = l.Wait();
  ASSERT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
  ExpectRelaunch(r, 1, "host_died", Named(1), 1500);
  ExpectRelaunch(r, 2, "host_died", Named(2), 3000);
  const auto launches = EventsOf(r, "launch");
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[2].at("host"), "localhost:3");  // three host masters on one slot
  EXPECT_TRUE(SameBytes(ReadWholeFile(model), want));
  ExpectLaunchGone(l, milliseconds{5'000});
}

TEST_F(LaunchTest, ACnnWithBatchNormAndDropoutLosesAHostAndEndsWithTheSameBits) {
  TempDir dir;
  const std::string data = dir.Write("images.csv", Images().Csv());
  const Job job = CnnJob(data, dir.File("ck"), 3000);
  const std::string& want = Undisturbed(job, dir);
  const std::string model = dir.File("model");
  Launch l(job, model);
  ASSERT_GE(l.UntilStep(1000, 1), 1000);
  l.KillHost(0);
  const ProcResult r = l.Wait();
  ASSERT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
  ExpectRelaunch(r, 1, "host_died", Named(0), 1000);
  // The survivors say who stopped them.
  EXPECT_TRUE(Contains(r.err, Named(1) + ": stopped by SIGTERM at step ") &&
              Contains(r.err, "(shmtrain launch stopped this host master: another one was lost"))
      << Clip(r.err);
  EXPECT_TRUE(SameBytes(ReadWholeFile(model), want));
  ExpectLaunchGone(l, milliseconds{5'000});
}

TEST_F(LaunchTest, AHostLostAtTheLastStepStillEndsWithTheSameModel) {
  TempDir dir;
  const Job job = MlpJob(dir.File("ck"), 3000);
  const std::string& want = Undisturbed(job, dir);
  const std::string model = dir.File("model");
  Launch l(job, model);
  // Host 2 dies as the run ends: before host 0 saved (the survivors' checkpoints are at the
  // last step, and the relaunch is a run of no step), or after (the run is done).
  ASSERT_GE(l.UntilStep(2999, 1), 2999);
  l.KillHost(2);
  const ProcResult r = l.Wait();
  ASSERT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
  std::printf("[ host 2 killed at the end ] %zu relaunch(es)\n", EventsOf(r, "relaunch").size());
  for (const auto& e : EventsOf(r, "relaunch")) {
    EXPECT_EQ(e.at("step"), "3000") << "a finished run relaunched from an earlier state";
  }
  EXPECT_TRUE(SameBytes(ReadWholeFile(model), want));
  ExpectLaunchGone(l, milliseconds{5'000});
}

// ---- the limits.

TEST_F(LaunchTest, AHostSilentPastTheTimeoutIsLostAndTheRunEndsWithTheSameBits) {
  TempDir dir;
  Job job = MlpJob(dir.File("ck"), 5000);
  job.train.insert(job.train.begin() + 1, {"--host-timeout", "2s"});
  const std::string& want = Undisturbed(job, dir);
  const std::string model = dir.File("model");
  Launch l(job, model);
  const int64_t step = l.UntilStep(1500, 1);
  ASSERT_GE(step, 1500);
  l.KillHost(1, SIGSTOP);  // stopped, not dead: the others find it silent after 2 s
  const ProcResult r = l.Wait();
  ASSERT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
  // Its own stop checkpoint, once mpirun has woken it, is older than the others': not taken.
  ExpectRelaunch(r, 1, "host_silent", Named(1), step);
  EXPECT_TRUE(SameBytes(ReadWholeFile(model), want));
  ExpectLaunchGone(l, milliseconds{5'000});
}

TEST_F(LaunchTest, AHostLostWhileTheSurvivorsSaveOrDuringARelaunchCostsNothing) {
  TempDir dir;
  const Job job = MlpJob(dir.File("ck"), 5000);
  const std::string& want = Undisturbed(job, dir);
  {
    SCOPED_TRACE("host 2 killed as the others save");
    const std::string model = dir.File("model.saving");
    Launch l(MlpJob(dir.File("ck.saving"), 5000), model);
    ASSERT_GE(l.UntilStep(1500, 1), 1500);
    // Host 2 dies a moment after host 1, as the others stop and write their checkpoints.
    l.KillHost(1);
    std::this_thread::sleep_for(milliseconds{3});
    l.KillHost(2);
    const ProcResult r = l.Wait();
    ASSERT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
    const auto launches = EventsOf(r, "launch");
    ASSERT_EQ(launches.size(), 2u) << Clip(r.out);
    EXPECT_EQ(launches[1].at("host"), "localhost:3");
    EXPECT_TRUE(SameBytes(ReadWholeFile(model), want));
    ExpectLaunchGone(l, milliseconds{5'000});
  }
  {
    SCOPED_TRACE("host 2 killed as the relaunched job starts");
    const std::string model = dir.File("model.starting");
    Launch l(MlpJob(dir.File("ck.starting"), 5000), model);
    ASSERT_GE(l.UntilStep(1500, 1), 1500);
    l.KillHost(1);
    // The second job: ranks 0 and 1 on one slot, rank 2 alone on the other; rank 2 is lost as
    // soon as it has said where it is, before (or about when) the job's first step.
    ASSERT_TRUE(l.Until([&](const auto&) { return l.job() == 2 && l.HasHost(2); }));
    l.KillHost(2);
    const ProcResult r = l.Wait();
    ASSERT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
    const auto launches = EventsOf(r, "launch");
    ASSERT_EQ(launches.size(), 3u) << Clip(r.out);
    EXPECT_EQ(launches[2].at("host"), "localhost:3");
    ExpectRelaunch(r, 2, "host_died", Named(2), 1500);
    EXPECT_TRUE(SameBytes(ReadWholeFile(model), want));
    ExpectLaunchGone(l, milliseconds{5'000});
  }
}

TEST_F(LaunchTest, BelowMinHostsOrPastMaxRelaunchesItGivesUpWithExit7AndNothingLeft) {
  TempDir dir;
  for (const bool min_hosts : {true, false}) {
    SCOPED_TRACE(min_hosts ? "--min-hosts 3" : "--max-relaunches 0");
    const std::string ck = dir.File(min_hosts ? "min.ck" : "max.ck");
    Launch l(MlpJob(ck, 100'000), "",
             {min_hosts ? "--min-hosts" : "--max-relaunches", min_hosts ? "3" : "0"});
    ASSERT_GE(l.UntilStep(500, 1), 500);
    l.KillHost(1);
    const ProcResult r = l.Wait();
    EXPECT_TRUE(ExitedWith(r, shmtrain::kExitLaunchGaveUp)) << Clip(r.err);
    EXPECT_TRUE(Contains(r.err, "launch: giving up: " + Named(1) + " lost")) << Clip(r.err);
    EXPECT_TRUE(
        Contains(r.err, min_hosts ? "fewer than --min-hosts 3" : "--max-relaunches 0 are used up"))
        << Clip(r.err);
    // It says where the newest state is, for a resume by hand.
    EXPECT_TRUE(Contains(r.err, "the newest state is " + ck)) << Clip(r.err);
    EXPECT_EQ(EventsOf(r, "launch").size(), 1u);
    ExpectLaunchGone(l, milliseconds{5'000});
  }
}

TEST_F(LaunchTest, TheLauncherKilledEndsTheJobWhichCheckpointsAndLeavesNothing) {
  TempDir dir;
  const std::string ck = dir.File("ck");
  Launch l(MlpJob(ck, 100'000), "");
  ASSERT_GE(l.UntilStep(500, 1), 500);
  l.process().Signal(SIGKILL);
  (void)l.Wait();
  // Each host master sees its launcher gone and stops as on a stop signal; mpirun, told by
  // the kernel that its parent died, ends what is left.
  ExpectLaunchGone(l, milliseconds{5'000});
  for (const std::string& f : {ck, ck + ".host1", ck + ".host2"}) {
    EXPECT_GE(CheckpointStep(f), 500) << f << ": no stop checkpoint";
  }
}

TEST_F(LaunchTest, AJobThatFailsByItselfIsNotRelaunchedAndKeepsItsExitCode) {
  TempDir dir;
  Job job = MlpJob(dir.File("ck"), 100);
  job.train.insert(job.train.begin() + 1, {"--lr", "nan"});
  Launch bad_flag(job, "");
  const ProcResult usage = bad_flag.Wait();
  EXPECT_TRUE(ExitedWith(usage, 2)) << Clip(usage.err);  // refused before mpirun starts
  EXPECT_TRUE(Contains(usage.err, "launch: the job: --lr")) << Clip(usage.err);

  Job missing = MlpJob(dir.File("ck"), 100);
  missing.train.erase(missing.train.end() - 2, missing.train.end());  // no --checkpoint
  Launch no_checkpoint(missing, "");
  const ProcResult r = no_checkpoint.Wait();
  EXPECT_TRUE(ExitedWith(r, 2));
  EXPECT_TRUE(Contains(r.err, "launch: the job needs --checkpoint PATH")) << Clip(r.err);

  // A data file no host can read: every host master exits 2, nothing is relaunched.
  Job unreadable = MlpJob(dir.File("ck"), 100);
  const auto ex = std::find(unreadable.train.begin(), unreadable.train.end(), "--example");
  ex[0] = "--data";
  ex[1] = dir.File("missing.csv");
  unreadable.train.erase(ex + 2, ex + 4);  // --rows 2000
  Launch failing(unreadable, "");
  const ProcResult f = failing.Wait();
  EXPECT_TRUE(ExitedWith(f, 2)) << Clip(f.err);
  EXPECT_EQ(EventsOf(f, "launch").size(), 1u);
  EXPECT_TRUE(EventsOf(f, "relaunch").empty());
  ExpectLaunchGone(failing, milliseconds{5'000});
}

}  // namespace
}  // namespace shmtrain::test
