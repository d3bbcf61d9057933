// `shmtrain launch` (master/launch/launch.h): a sync job of 3 host masters × 2 workers on this
// machine (three slots named localhost stand for three hosts), whose host masters are
// SIGKILLed (with their workers), SIGSTOPped, or killed while the survivors save, at random
// steps; the launcher relaunches the job on the slots left, and the model it saves equals, byte
// for byte, the one of the same job that lost nothing. Then the limits: below --min-hosts,
// --max-relaunches used up, a host lost during a relaunch, the launcher itself killed. After
// every job, nothing is left: no process of the job (each carries a tag, passed on by the
// launcher to every host master), no segment.
//
// The pure rules (where the ranks go, which state is the newest, which slots are lost) are
// tested first, without a process.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "master/launch/placement.h"
#include "nlohmann/json.hpp"
#include "shm/layout.h"
#include "shmtrain/status.h"
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

// ---- real jobs.

constexpr const char* kBin = SHMTRAIN_BIN;
constexpr int kHosts = 3;
constexpr milliseconds kLaunchTimeout{180'000};

// Open MPI on this machine over loopback, as root, from the environment (the launcher passes
// it on to mpirun, as it does for a user's OMPI_MCA_* settings).
void SetOpenMpiEnvironment() {
  const std::pair<const char*, std::string> vars[] = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                                                      {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                                                      {"OMPI_MCA_btl", "self,tcp"},
                                                      {"OMPI_MCA_btl_tcp_if_include", "lo"},
                                                      {"OMPI_MCA_oob_tcp_if_include", "lo"},
                                                      {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
                                                      {"OMPI_MCA_orte_tmpdir_base", SessionBase()},
                                                      {"SHMTRAIN_MPIRUN", MPIRUN_BIN}};
  for (const auto& [name, value] : vars) setenv(name, value.c_str(), 1);
}

class LaunchTest : public MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    SetOpenMpiEnvironment();
  }
};

// The sync job of the tests: blobs (MLP), or a small CNN with batch norm and dropout on the
// line images; JSON log, a loss line every 100 steps, checkpoints beside `ckpt`.
struct Job {
  std::vector<std::string> train;  // "train" and its flags
  int64_t steps = 0;
};

// A job's command: "train", its own flags, then what every job of the tests has.
Job MakeJob(std::vector<std::string> own, const std::string& seed, const std::string& ckpt,
            int64_t steps) {
  Job job{{"train"}, steps};
  job.train.insert(job.train.end(), own.begin(), own.end());
  job.train.insert(job.train.end(),
                   {"--workers", "2", "--steps", std::to_string(steps), "--seed", seed,
                    "--log-every", "100", "--no-metrics", "--no-progress", "--log-format", "json",
                    "--checkpoint", ckpt});  // --checkpoint PATH last: Undisturbed replaces it
  return job;
}

Job MlpJob(const std::string& ckpt, int64_t steps) {
  return MakeJob({"--example", "blobs", "--rows", "2000", "--layers", "16,32,4", "--loss", "xent",
                  "--lr", "0.1", "--batch", "64"},
                 "3", ckpt, steps);
}

Job CnnJob(const std::string& data, const std::string& ckpt, int64_t steps) {
  return MakeJob(
      {"--data", data, "--input-shape", "1,6,6", "--model",
       "conv2d(4,3,padding=1),batchnorm2d,relu,maxpool2d(2),flatten,dropout(0.25),linear(3)",
       "--loss", "xent", "--lr", "0.2", "--batch", "12"},
      "7", ckpt, steps);
}

// One `shmtrain launch` of a job, tagged, read line by line.
class Launch {
 public:
  Launch(const Job& job, const std::string& save, const std::vector<std::string>& flags = {})
      : tag_(std::to_string(getpid()) + "-launch-" + std::to_string(++count_)),
        p_(Argv(job, save, flags, tag_)) {}
  ~Launch() {
    if (p_.running()) {
      p_.Signal(SIGTERM);
      (void)p_.Wait(kLaunchTimeout);
    }
    for (pid_t p : TaggedProcesses(tag_)) kill(p, SIGKILL);
  }

  // Reads lines until want(line) holds for an event; false at the end of the output.
  bool Until(const std::function<bool(const std::map<std::string, std::string>&)>& want,
             milliseconds timeout = kLaunchTimeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    std::string line;
    while (Clock::now() < deadline && p_.ReadLine(&line, Left(deadline))) {
      const auto e = ParseFlatJson(line);
      if (!e || !e->count("event")) continue;
      Note(*e);
      if (want(*e)) return true;
    }
    return false;
  }
  // Until host 0 of job `job` has combined step `step`, as its segment says (its log reaches
  // the test through mpirun's forwarding, a second or more late under load). The step then.
  int64_t UntilStep(int64_t step, int job) {
    // Every host master's pid first, so that any of them can be killed.
    auto started = [&](const auto&) {
      return job_ == job && !segment0_.empty() && hosts_.size() == static_cast<size_t>(kHosts);
    };
    if (!Until(started)) return -1;
    const int fd = open(("/dev/shm" + segment0_).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    void* m = mmap(nullptr, sizeof(shm::Header), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return -1;
    const auto* h = static_cast<const shm::Header*>(m);
    const Clock::time_point deadline = Clock::now() + kLaunchTimeout;
    int64_t now = -1;
    while ((now = std::atomic_ref<const int64_t>(h->combined_step).load()) < step &&
           Clock::now() < deadline && p_.running()) {
      std::this_thread::sleep_for(std::chrono::microseconds{200});
    }
    munmap(m, sizeof(shm::Header));
    return now >= step ? now : -1;
  }
  // SIGKILLs host h's master of the current job and its workers.
  void KillHost(int h, int sig = SIGKILL) {
    const pid_t master = hosts_.at(h);
    std::vector<pid_t> children;
    const std::string kids = ReadWholeFile("/proc/" + std::to_string(master) + "/task/" +
                                           std::to_string(master) + "/children");
    for (size_t at = 0; at < kids.size();) {
      const size_t end = std::min(kids.find(' ', at), kids.size());
      if (end > at) children.push_back(std::stoi(kids.substr(at, end - at)));
      at = end + 1;
    }
    kill(master, sig);
    if (sig == SIGKILL) {
      for (pid_t c : children) kill(c, SIGKILL);
    }
  }
  ProcResult Wait() { return p_.Wait(kLaunchTimeout); }
  Subprocess& process() { return p_; }
  const std::string& tag() const { return tag_; }
  int job() const { return job_; }
  bool HasHost(int h) const { return hosts_.count(h) != 0; }
  // The segments of every host master any job of this launch had.
  const std::set<pid_t>& masters() const { return masters_; }

 private:
  static std::vector<std::string> Argv(const Job& job, const std::string& save,
                                       const std::vector<std::string>& flags,
                                       const std::string& tag) {
    setenv(kTagVar, tag.c_str(), 1);
    std::vector<std::string> a = {kBin, "launch", "--hosts", "localhost,localhost,localhost"};
    a.insert(a.end(), flags.begin(), flags.end());
    a.push_back("--");
    a.insert(a.end(), job.train.begin(), job.train.end());
    if (!save.empty()) a.insert(a.end(), {"--save", save});
    return a;
  }
  void Note(const std::map<std::string, std::string>& e) {
    if (e.at("event") == "launch") {
      job_ = std::stoi(e.at("job"));
      hosts_.clear();
      segment0_.clear();
    }
    if (e.at("event") == "host") {
      hosts_[std::stoi(e.at("host"))] = std::stoi(e.at("pid"));
      masters_.insert(std::stoi(e.at("pid")));
      if (e.at("host") == "0") segment0_ = e.at("segment");
    }
  }
  static inline std::atomic<int> count_{0};
  const std::string tag_;
  Subprocess p_;
  int job_ = 0;
  std::map<int, pid_t> hosts_;  // the current job's host masters
  std::string segment0_;        // and host 0's segment
  std::set<pid_t> masters_;
};

// Within `bound` of the launcher's end: no process of the launch (the tag) and no segment of
// any of its host masters.
void ExpectLaunchGone(const Launch& l, milliseconds bound) {
  const Clock::time_point deadline = Clock::now() + bound;
  auto left = [&] {
    std::vector<std::string> what;
    for (pid_t p : TaggedProcesses(l.tag())) what.push_back("process " + std::to_string(p));
    for (pid_t m : l.masters()) {
      for (const std::string& s : SegmentsOf(m)) what.push_back("segment /dev/shm/" + s);
    }
    return what;
  };
  std::vector<std::string> what = left();
  while (!what.empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds{20});
    what = left();
  }
  std::string list;
  for (const std::string& w : what) list += " " + w;
  EXPECT_TRUE(what.empty()) << "left behind:" << list;
}

// The events of one kind in the launcher's output, each field as its JSON text (a string's
// without quotes): the relaunch event's `lost` is an array.
std::vector<std::map<std::string, std::string>> EventsOf(const ProcResult& r,
                                                         const std::string& kind) {
  std::vector<std::map<std::string, std::string>> out;
  for (const std::string& line : SplitLines(r.out)) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object() || e.value("event", "") != kind) continue;
    std::map<std::string, std::string> fields;
    for (const auto& [key, value] : e.items()) {
      fields[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
    out.push_back(std::move(fields));
  }
  return out;
}

// The model of a job run by the launcher with no fault (cached per job's flags).
const std::string& Undisturbed(const Job& job, TempDir& dir) {
  static std::map<std::vector<std::string>, std::string> models;
  std::vector<std::string> key = job.train;
  key.erase(std::find(key.begin(), key.end(), "--checkpoint"), key.end());
  if (auto it = models.find(key); it != models.end()) return it->second;
  Job quiet = job;
  const std::string model = dir.File("undisturbed" + std::to_string(models.size()) + ".model");
  quiet.train.back() = dir.File("undisturbed.ckpt");  // the jobs end with --checkpoint PATH
  Launch l(quiet, model);
  const ProcResult r = l.Wait();
  EXPECT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
  EXPECT_TRUE(EventsOf(r, "relaunch").empty());
  return models.emplace(key, ReadWholeFile(model)).first->second;
}

// The relaunch event of number n, checked for its fields: the lost hosts, the step it went on
// from (at or after `killed_at`, the step host 0 had logged when the fault came) and the time
// from the loss to training again (within the bound of docs/hosts.md, in the normal build).
void ExpectRelaunch(const ProcResult& r, size_t n, const std::string& reason,
                    const std::string& lost, int64_t killed_at) {
  const auto relaunches = EventsOf(r, "relaunch");
  ASSERT_GE(relaunches.size(), n) << Clip(r.out);
  const auto& e = relaunches[n - 1];
  EXPECT_EQ(e.at("relaunch"), std::to_string(n));
  EXPECT_EQ(e.at("reason"), reason);
  EXPECT_EQ(e.at("lost"), "[\"" + lost + "\"]") << "one host lost, by name";
  EXPECT_GE(std::stoll(e.at("step")), killed_at);
  ASSERT_TRUE(e.count("seconds")) << "relaunch " << n << " never trained";
  std::printf(
      "[ relaunch %zu ] %s lost, continued from step %s, training again %s s after the "
      "loss (the old job's end %s s, the new job's start %s s)\n",
      n, e.at("lost").c_str(), e.at("step").c_str(), e.at("seconds").c_str(),
      e.at("end_seconds").c_str(), e.at("start_seconds").c_str());
  EXPECT_LT(std::stod(e.at("seconds")), UnlessSanitized(5.0, 30.0));
  // The relaunched job was told (SHMTRAIN_RELAUNCH): its host 0 says so, at the same step.
  // (A job lost before its host 0 said so is not counted: the one that trained did.)
  const auto told = EventsOf(r, "relaunched");
  const auto it = std::find_if(told.begin(), told.end(), [&](const auto& t) {
    return t.at("relaunches") == std::to_string(n);
  });
  ASSERT_NE(it, told.end()) << Clip(r.out);
  EXPECT_EQ(it->at("reason"), reason);
  EXPECT_EQ(it->at("step"), e.at("step"));
  EXPECT_EQ(it->at("lost"), e.at("lost"));
}

// Host h as the job names it: "host 1 (node)", every host on this machine.
std::string Named(int h) {
  char node[256] = {};
  gethostname(node, sizeof node - 1);
  return "host " + std::to_string(h) + " (" + node + ")";
}

// ---- a lost host costs nothing.

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
