// The master's run loop and the units it composes, each alone and without a worker process:
// the loop's order (with units that record what they are shown), the checkpoint policy
// (schedule, copies, writes, failures, resume), the validation protocol (acks, early stop, the
// model kept) and the run summary's lines. A unit that needs the segment gets a real one,
// which the test writes as the workers would.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/signal_name.h"
#include "data/dataset.h"
#include "master/log/log.h"
#include "master/files/checkpoint.h"
#include "master/hosts/exchange_thread.h"
#include "master/hosts/hosts.h"
#include "master/kinds/kind.h"
#include "master/kinds/step_state.h"
#include "master/run/checkpoint_policy.h"
#include "master/run/evaluator.h"
#include "master/run/kind_view.h"
#include "master/run/launcher.h"
#include "master/run/run_loop.h"
#include "master/run/run_summary.h"
#include "master/run/segment_reads.h"
#include "master/run/supervisor.h"
#include "master/run/validation.h"
#include "monitoring/exporter.h"
#include "nn/cpu.h"
#include "nn/layer.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shm/segment.h"
#include "tests/parabola_layout.h"
#include "tests/proc_util.h"

namespace shmtrain::master {
namespace {

namespace fs = std::filesystem;

const ModelSpec kSpec = ModelSpec::Mlp({1, 5, 1}, Activation::kTanh, Loss::kMse);  // 16 parameters
// kSpec resolved, as a run's start hands it to its units (made on first use: the layer
// registry it reads is another file's static).
const nn::ResolvedModel& Model() {
  static const nn::ResolvedModel model = [] {
    nn::ResolvedModel m;
    EXPECT_TRUE(nn::ResolveModel(kSpec, /*flat_input=*/true, &m).ok());
    return m;
  }();
  return model;
}

// A directory of its own under the system's temporary one, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> n{0};
    path_ = fs::temp_directory_path() /
            ("shmtrain-run-units-" + std::to_string(getpid()) + "-" + std::to_string(n++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// The layout of a run of kSpec on the parabola's 50 rows.
shm::Header Layout(Mode mode, int workers, uint32_t states, int64_t eval_every = 0) {
  return test::ParabolaLayout(mode, workers, states, eval_every);
}

shm::Segment MakeSegment(const shm::Header& layout) {
  shm::Segment seg;
  const Status s = shm::Segment::Create(shm::MakeSegmentName(), layout, &seg);
  EXPECT_TRUE(s.ok()) << s.message();
  return seg;
}

std::vector<float> Filled(float first) {
  std::vector<float> v(kSpec.ParamCount());
  for (size_t i = 0; i < v.size(); ++i) v[i] = first + static_cast<float>(i);
  return v;
}

// The steps a schedule checkpoints at when the run's progress takes these values in turn.
std::vector<int64_t> CheckpointedSteps(CheckpointSchedule schedule,
                                       const std::vector<int64_t>& progress) {
  std::vector<int64_t> steps;
  for (int64_t p : progress) {
    if (!schedule.Due(p)) continue;
    steps.push_back(p);
    schedule.Advance(p);
  }
  return steps;
}

std::vector<int64_t> Range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t i = from; i <= to; ++i) v.push_back(i);
  return v;
}

// ---------------------------------------------------------------------------------------------
// The run loop: its order, with units that record each call into one shared log.

class RecordingUnit final : public RunUnit {
 public:
  RecordingUnit(std::string name, std::vector<std::string>* calls)
      : name_(std::move(name)), calls_(calls) {}
  // What the unit does: at its n-th round (from 1) it answers `verdict`; it asks for rounds
  // `poll_ms` apart; it fails to start with start_status; at a good end it turns the run into
  // finish_status when that is not ok, at the Save step of the end.
  int end_at_round = 0;
  Verdict verdict;
  int poll_ms = kPollMs;
  Status start_status, finish_status;

  Status Start() override {
    Record("start");
    return start_status;
  }
  int PollMs() const override { return poll_ms; }
  Verdict Tick(const RunView& view) override {
    Record("tick@" + std::to_string(view.progress));
    return ++rounds_ == end_at_round ? verdict : Verdict::GoOn();
  }
  void Stop(RunEnd& end) override { RecordEnd("stop", end); }
  void Collect(RunEnd& end) override { RecordEnd("collect", end); }
  void Save(RunEnd& end) override {
    RecordEnd("save", end);
    if (!finish_status.ok() && end.status.ok()) end.status = finish_status;
  }
  void Report(RunEnd& end) override { RecordEnd("report", end); }

 private:
  void Record(const std::string& what) { calls_->push_back(name_ + "." + what); }
  void RecordEnd(const std::string& step, const RunEnd& end) {
    Record(step + ":" + (end.status.ok() ? std::string("ok") : end.status.message()));
  }
  std::string name_;
  std::vector<std::string>* calls_;
  int rounds_ = 0;
};

class RunLoopTest : public ::testing::Test {
 protected:
  // Runs the loop over `units` on seg_; every sleep is recorded as "sleep(ms)".
  Status Run(std::vector<RunUnit*> units) {
    RemovedOnDeath name;
    RunLoop loop(seg_, name, KindOf(Mode::kSync, 1));
    return loop.Run([this](int ms) { calls_.push_back("sleep(" + std::to_string(ms) + ")"); },
                    std::move(units));
  }
  std::vector<std::string> calls_;
  shm::Segment seg_ = MakeSegment(Layout(Mode::kSync, 1, 0));
};

// Each step of the end is shown to every unit before the next step begins: nothing is saved
// before everything has stopped, whatever the list order.
TEST_F(RunLoopTest, RoundsShowEveryUnitTheViewInListOrderThenEachStepOfTheEndInTurn) {
  seg_.mutable_block(0)->phase = 6;  // step 3 done
  RecordingUnit a("a", &calls_), b("b", &calls_), c("c", &calls_);
  c.end_at_round = 2;
  c.verdict = Verdict::Done();
  const Status s = Run({&a, nullptr, &b, &c});
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(calls_, (std::vector<std::string>{"a.start",     "b.start",     "c.start",       //
                                              "sleep(5)",    "a.tick@3",    "b.tick@3",      //
                                              "c.tick@3",    "sleep(5)",    "a.tick@3",      //
                                              "b.tick@3",    "c.tick@3",                     //
                                              "a.stop:ok",   "b.stop:ok",   "c.stop:ok",     //
                                              "a.collect:ok", "b.collect:ok", "c.collect:ok",  //
                                              "a.save:ok",   "b.save:ok",   "c.save:ok",     //
                                              "a.report:ok", "b.report:ok", "c.report:ok"}));
}

// The loop ends the segment's life in the run: at the end its name goes before any unit's Stop
// (the mapping stays for every step after it, until its holder destroys it).
TEST_F(RunLoopTest, TheEndRemovesTheSegmentsNameFirstAndKeepsItsMappingForEveryStep) {
  const std::string file = "/dev/shm/" + seg_.name();
  ASSERT_TRUE(fs::exists(file));
  class Looks final : public RunUnit {
   public:
    explicit Looks(std::string file) : file_(std::move(file)) {}
    Verdict Tick(const RunView& /*view*/) override { return Verdict::Done(); }
    void Stop(RunEnd& end) override { name_gone_at_stop = !fs::exists(file_) && end.seg.valid(); }
    void Report(RunEnd& end) override { workers_at_report = end.seg.header()->config.workers; }
    bool name_gone_at_stop = false;
    uint32_t workers_at_report = 0;

   private:
    std::string file_;
  } looks(file);
  EXPECT_TRUE(Run({&looks}).ok());
  EXPECT_TRUE(looks.name_gone_at_stop) << file << " still there at the first unit's Stop";
  EXPECT_EQ(looks.workers_at_report, 1u);
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(RunLoopTest, AUnitThatEndsTheRunIsTheLastToSeeItsRound) {
  RecordingUnit stop("stop", &calls_), after("after", &calls_);
  stop.end_at_round = 1;
  stop.verdict = Verdict::EndIf(Status::Interrupted("stopped by SIGINT"));
  const Status s = Run({&stop, &after});
  EXPECT_EQ(s.code(), Status::Code::kInterrupted);
  const std::string why = ":stopped by SIGINT";
  EXPECT_EQ(calls_, (std::vector<std::string>{
                        "stop.start", "after.start", "sleep(5)", "stop.tick@0",         //
                        "stop.stop" + why, "after.stop" + why,                          //
                        "stop.collect" + why, "after.collect" + why,                    //
                        "stop.save" + why, "after.save" + why,                          //
                        "stop.report" + why, "after.report" + why}));
}

TEST_F(RunLoopTest, AStartThatFailsRunsNoRoundAndEveryUnitSeesTheEnd) {
  RecordingUnit workers("workers", &calls_), after("after", &calls_);
  workers.start_status = Status::Resource("cannot start worker 0");
  const Status s = Run({&workers, &after});
  EXPECT_EQ(s.code(), Status::Code::kResource);
  const std::string why = ":cannot start worker 0";
  EXPECT_EQ(calls_, (std::vector<std::string>{"workers.start",                                  //
                                              "workers.stop" + why, "after.stop" + why,        //
                                              "workers.collect" + why, "after.collect" + why,  //
                                              "workers.save" + why, "after.save" + why,        //
                                              "workers.report" + why, "after.report" + why}));
}

TEST_F(RunLoopTest, AnEndStepThatFailsIsSeenByTheUnitsAndStepsAfterItAndReturned) {
  const std::vector<float> w = Filled(4);
  std::copy(w.begin(), w.end(), seg_.mutable_params(2));
  seg_.mutable_block(0)->phase = 4;  // every worker finished step 1: the run ends at step 2
  RecordingUnit before("before", &calls_), model("model", &calls_), summary("summary", &calls_);
  before.end_at_round = 1;
  before.verdict = Verdict::Done();
  model.finish_status = Status::Diverged("not finite");
  RunEnd seen{seg_, Status::Ok()};
  class Peek final : public RunUnit {
   public:
    explicit Peek(RunEnd* out) : out_(out) {}
    void Collect(RunEnd& end) override {
      out_->end_step = end.end_step;
      out_->params = end.params;
    }

   private:
    RunEnd* out_;
  } peek(&seen);
  const Status s = Run({&peek, &before, &model, &summary});
  EXPECT_EQ(s.code(), Status::Code::kDiverged);
  EXPECT_EQ(calls_.back(), "summary.report:not finite");
  EXPECT_NE(std::find(calls_.begin(), calls_.end(), "summary.save:not finite"), calls_.end())
      << "the units after it in its step see it";
  EXPECT_NE(std::find(calls_.begin(), calls_.end(), "before.report:not finite"), calls_.end())
      << "the steps after it see it";
  EXPECT_EQ(seen.end_step, 2) << "a good end names the step the workers ended at";
  EXPECT_EQ(seen.params, w) << "and the parameters after it";
}

TEST_F(RunLoopTest, ARoundSleepsAsLittleAsAnyUnitAsks) {
  RecordingUnit slow("slow", &calls_), fast("fast", &calls_);
  fast.poll_ms = 1;
  fast.end_at_round = 1;
  fast.verdict = Verdict::Done();
  ASSERT_TRUE(Run({&slow, &fast}).ok());
  EXPECT_EQ(calls_[2], "sleep(1)");
}

// ---------------------------------------------------------------------------------------------
// The checkpoint schedule.

TEST(CheckpointSchedule, SyncEveryMultipleBelowTheLastStep) {
  EXPECT_EQ(CheckpointedSteps({3, KindOf(Mode::kSync, 1), 0, 10}, Range(0, 10)),
            (std::vector<int64_t>{3, 6, 9}));
  // The run's last step is never one: the run ends there anyway.
  EXPECT_EQ(CheckpointedSteps({5, KindOf(Mode::kSync, 1), 0, 10}, Range(0, 10)), (std::vector<int64_t>{5}));
}

TEST(CheckpointSchedule, SyncIsDueOnlyAtTheStepTheRanksPauseBefore) {
  CheckpointSchedule s(4, KindOf(Mode::kSync, 1), 0, 100);
  EXPECT_FALSE(s.Due(3));
  EXPECT_TRUE(s.Due(4));
  EXPECT_FALSE(s.Due(5)) << "sync ranks pause at 4: progress cannot pass it unseen";
}

TEST(CheckpointSchedule, AResumedRunStartsAtTheNextMultipleAboveItsFirstStep) {
  EXPECT_EQ(CheckpointSchedule(3, KindOf(Mode::kSync, 1), 4, 10).next(), 6);
  EXPECT_EQ(CheckpointSchedule(3, KindOf(Mode::kSync, 1), 6, 10).next(), 9)
      << "the step resumed from is not checkpointed again";
  EXPECT_EQ(CheckpointedSteps({3, KindOf(Mode::kSync, 1), 6, 20}, Range(6, 20)),
            (std::vector<int64_t>{9, 12, 15, 18}));
}

TEST(CheckpointSchedule, AsyncIsDueAtEachMultipleWhateverTheVersion) {
  // Async ranks pause before the ticket at each multiple: the policy looks at their phases,
  // not at the version (which a death can leave behind the tickets), and takes every multiple
  // in turn, none skipped.
  CheckpointSchedule s(5, KindOf(Mode::kAsync, 1), 0, 20);
  std::vector<int64_t> taken;
  for (int64_t version : {0, 3, 4, 9, 100}) {
    if (!s.Due(version)) continue;
    taken.push_back(s.next());
    s.Advance(s.next());
  }
  EXPECT_EQ(taken, (std::vector<int64_t>{5, 10, 15}));
  EXPECT_FALSE(s.Due(19)) << "never at the run's last step";
  EXPECT_EQ(CheckpointSchedule(5, KindOf(Mode::kAsync, 1), 12, 40).next(), 15) << "resumed at 12";
}

TEST(CheckpointSchedule, NoneWithoutCheckpointEvery) {
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    CheckpointSchedule s(0, KindOf(mode, 1), 0, 100);
    EXPECT_EQ(s.next(), INT64_MAX);
    EXPECT_EQ(CheckpointedSteps(s, Range(0, 100)), std::vector<int64_t>{});
  }
}

// ---------------------------------------------------------------------------------------------
// The checkpoint policy: writes, failures, copies out of the segment, resume.

class CheckpointPolicyTest : public ::testing::Test {
 protected:
  CheckpointConfig Config(const std::string& path, int64_t every = 0, Mode mode = Mode::kSync) {
    CheckpointConfig c;
    c.path = path;
    c.every = every;
    c.kind = &KindOf(mode, 1);
    c.first_step = 2;
    c.total_steps = 10;
    c.fingerprint = 0xF1F2;
    c.optimizer = "opt A";
    return c;
  }
  // Parameters filled from `first`, and K state vectors from -first, -first - 1, ...
  Checkpoint State(int64_t step, float first, int states) {
    Checkpoint c;
    c.step = step;
    c.params = Filled(first);
    for (int k = 0; k < states; ++k) c.states.push_back(Filled(-first - static_cast<float>(k)));
    return c;
  }

  TempDir dir_;
  Logger log_{LogFormat::kJson, false};
  monitoring::CheckpointStats stats_;
  shm::Segment seg_ = MakeSegment(Layout(Mode::kSync, 1, 0));  // for the policies that only write
  SegmentWrites writes_{seg_};
};

TEST_F(CheckpointPolicyTest, AWrittenCheckpointHoldsTheStateAndTheRun) {
  const std::string path = dir_.File("c.bin");
  CheckpointPolicy policy(Config(path), seg_, writes_, log_, stats_);
  EXPECT_EQ(policy.last_written(), 2);
  ASSERT_TRUE(policy.Write(State(6, 1.5f, 2)).ok());
  EXPECT_EQ(policy.last_written(), 6);
  EXPECT_EQ(stats_.failures(), 0u);
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(path, &back).ok());
  EXPECT_EQ(back.step, 6);
  EXPECT_EQ(back.mode, Mode::kSync);
  EXPECT_EQ(back.fingerprint, 0xF1F2u);
  EXPECT_EQ(back.params, Filled(1.5f));
  EXPECT_EQ(back.states, (std::vector<std::vector<float>>{Filled(-1.5f), Filled(-2.5f)}));
}

TEST_F(CheckpointPolicyTest, FailedWritesAreCountedAndLoggedAndTheRunGoesOn) {
  const std::string sub = dir_.File("gone");
  const std::string path = sub + "/c.bin";
  CheckpointPolicy policy(Config(path), seg_, writes_, log_, stats_);
  testing::internal::CaptureStdout();
  const Status first = policy.Write(State(4, 1, 0));
  const Status second = policy.Write(State(6, 1, 0));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(first.ok());
  EXPECT_FALSE(second.ok());
  EXPECT_EQ(stats_.failures(), 2u);
  EXPECT_EQ(policy.last_written(), 2) << "a failed checkpoint is not the last written";
  EXPECT_NE(out.find("\"event\":\"checkpoint_failed\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"step\":6"), std::string::npos) << out;
  // The directory is back: the next one is written, and the failures stay counted.
  fs::create_directory(sub);
  EXPECT_TRUE(policy.Write(State(8, 1, 0)).ok());
  EXPECT_EQ(policy.last_written(), 8);
  EXPECT_EQ(stats_.failures(), 2u);
}

TEST_F(CheckpointPolicyTest, NonFiniteStateIsNeverWritten) {
  const std::string path = dir_.File("c.bin");
  CheckpointPolicy policy(Config(path), seg_, writes_, log_, stats_);
  ASSERT_TRUE(policy.Write(State(4, 1, 2)).ok());
  Checkpoint bad_params = State(6, 2, 2);
  bad_params.params[3] = NAN;
  Checkpoint bad_state = State(6, 2, 2);
  bad_state.states[1][5] = INFINITY;
  testing::internal::CaptureStdout();
  const Status s1 = policy.Write(bad_params);
  const Status s2 = policy.Write(bad_state);
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(s1.code(), Status::Code::kDiverged);
  EXPECT_EQ(s2.code(), Status::Code::kDiverged) << "the optimizer state is checked too";
  EXPECT_EQ(stats_.failures(), 2u);
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(path, &back).ok());
  EXPECT_EQ(back.step, 4) << "the last finite checkpoint stays";
}

TEST_F(CheckpointPolicyTest, SyncCopiesStepStateOnceEveryRankPausedThenReleases) {
  shm::Segment seg = MakeSegment(Layout(Mode::kSync, 2, 2));
  SegmentWrites writes(seg);
  ASSERT_TRUE(seg.valid());
  // Step 4 reads buffer 0; buffer 1 holds something else.
  const std::vector<float> w = Filled(10), v = Filled(-10), m = Filled(-20);
  std::copy(w.begin(), w.end(), seg.mutable_params(4));
  std::copy(v.begin(), v.end(), seg.mutable_state(0, 4));
  std::copy(m.begin(), m.end(), seg.mutable_state(1, 4));
  std::fill(seg.mutable_params(5), seg.mutable_params(5) + w.size(), 99.f);
  std::fill(seg.mutable_state(0, 5), seg.mutable_state(0, 5) + w.size(), 99.f);
  std::fill(seg.mutable_state(1, 5), seg.mutable_state(1, 5) + w.size(), 99.f);
  const std::string path = dir_.File("c.bin");
  CheckpointPolicy policy(Config(path, 4), seg, writes, log_, stats_);
  ASSERT_EQ(policy.schedule().next(), 4);
  seg.mutable_block(0)->phase = 8;  // paused before step 4
  seg.mutable_block(1)->phase = 7;  // still in step 3's update
  policy.Tick({seg, 4});
  EXPECT_FALSE(fs::exists(path)) << "rank 1 was not paused yet";
  EXPECT_EQ(seg.header()->released_step, 0);
  seg.mutable_block(1)->phase = 8;
  testing::internal::CaptureStdout();
  policy.Tick({seg, 4});
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(seg.header()->released_step, 4) << "the ranks are released";
  EXPECT_EQ(policy.schedule().next(), 8);
  EXPECT_EQ(policy.last_written(), 4);
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(path, &back).ok());
  EXPECT_EQ(back.step, 4);
  EXPECT_EQ(back.params, w);
  EXPECT_EQ(back.states, (std::vector<std::vector<float>>{v, m}));
}

TEST_F(CheckpointPolicyTest, AsyncCopiesOnceEveryRankPausedAtOrPastTheMultipleThenReleases) {
  shm::Segment seg = MakeSegment(Layout(Mode::kAsync, 3, 0));
  SegmentWrites writes(seg);
  ASSERT_TRUE(seg.valid());
  const std::vector<float> w = Filled(3);
  std::copy(w.begin(), w.end(), seg.mutable_params(0));
  seg.mutable_header()->param_version = 5;
  const std::string path = dir_.File("c.bin");
  CheckpointPolicy policy(Config(path, 5, Mode::kAsync), seg, writes, log_, stats_);
  ASSERT_EQ(policy.schedule().next(), 5);
  seg.mutable_block(0)->phase = 10;  // paused before ticket 5 (or a later one, below 10)
  seg.mutable_block(1)->phase = 20;  // no ticket below total_steps (10) left
  seg.mutable_block(2)->phase = 1;   // computing a ticket below 5: may still write W
  policy.Tick({seg, 5});
  EXPECT_FALSE(fs::exists(path)) << "rank 2 may still apply";
  seg.mutable_block(2)->phase = 4;  // released from a pause before 2, computing below 5
  policy.Tick({seg, 5});
  EXPECT_FALSE(fs::exists(path)) << "a pause before 2 is not one before 5";
  seg.mutable_block(2)->phase = 11;  // odd: never an async pause
  policy.Tick({seg, 5});
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(seg.header()->released_step, 0);
  seg.mutable_block(2)->phase = 10;
  testing::internal::CaptureStdout();
  policy.Tick({seg, 5});
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(seg.header()->released_step, 5) << "the ranks are released";
  EXPECT_EQ(policy.schedule().next(), 10);
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(path, &back).ok());
  EXPECT_EQ(back.step, 5) << "the version at the copy";
  EXPECT_EQ(back.mode, Mode::kAsync);
  EXPECT_EQ(back.params, w);
  EXPECT_TRUE(back.states.empty());
}

TEST_F(CheckpointPolicyTest, StopCheckpointOnlyWithACheckpointPath) {
  shm::Segment seg = MakeSegment(Layout(Mode::kSync, 1, 0));
  SegmentWrites writes(seg);
  ASSERT_TRUE(seg.valid());
  seg.mutable_block(0)->phase = 7;  // step 3 done, step 4's gradient computed
  CheckpointPolicy none(Config(""), seg, writes, log_, stats_);
  EXPECT_TRUE(none.WriteOnStop().ok());
  EXPECT_EQ(none.last_written(), 2);
  const std::string path = dir_.File("c.bin");
  CheckpointPolicy policy(Config(path), seg, writes, log_, stats_);
  testing::internal::CaptureStdout();
  ASSERT_TRUE(policy.WriteOnStop().ok());
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("\"event\":\"checkpoint_on_stop\""), std::string::npos) << out;
  Checkpoint back;
  ASSERT_TRUE(LoadCheckpoint(path, &back).ok());
  EXPECT_EQ(back.step, 3);
}

TEST_F(CheckpointPolicyTest, ResumeRestoresTheStateAndTheProtocolWords) {
  const shm::Header layout = Layout(Mode::kSync, 3, 2);
  const std::string path = dir_.File("c.bin");
  CheckpointPolicy policy(Config(path), seg_, writes_, log_, stats_);
  ASSERT_TRUE(policy.Write(State(5, 7, 2)).ok());
  Checkpoint c;
  ASSERT_TRUE(LoadResume(path, Mode::kSync, 0xF1F2, "opt A", layout, 10, {}, &c).ok());
  shm::Segment seg = MakeSegment(layout);
  ASSERT_TRUE(seg.valid());
  KindOf(Mode::kSync, 1).ResumeInto(c, &seg);
  // Step 5 reads buffer 1: the state is there, and CopyStepState gives it back.
  EXPECT_EQ(std::vector<float>(seg.params(5), seg.params(5) + 16), Filled(7));
  EXPECT_EQ(std::vector<float>(seg.state(0, 5), seg.state(0, 5) + 16), Filled(-7));
  EXPECT_EQ(std::vector<float>(seg.state(1, 5), seg.state(1, 5) + 16), Filled(-8));
  const Checkpoint again = CopyStepState(seg, 5);
  EXPECT_EQ(again.params, c.params);
  EXPECT_EQ(again.states, c.states);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(seg.block(r)->phase, 10u) << "rank " << r;
  EXPECT_EQ(seg.header()->released_step, 5);
  EXPECT_EQ(seg.header()->param_version, 0u);
}

TEST_F(CheckpointPolicyTest, ResumeRefusesAnotherRunsCheckpoint) {
  const std::string path = dir_.File("c.bin");
  CheckpointPolicy policy(Config(path), seg_, writes_, log_, stats_);
  ASSERT_TRUE(policy.Write(State(5, 7, 2)).ok());
  Checkpoint c;
  const shm::Header layout = Layout(Mode::kSync, 3, 2);
  EXPECT_EQ(LoadResume(path, Mode::kSync, 0xBAD, "opt A", layout, 10, {}, &c).code(), Status::Code::kUsage);
  const Status other = LoadResume(path, Mode::kSync, 0xF1F2, "opt B", layout, 10, {}, &c);
  EXPECT_EQ(other.code(), Status::Code::kUsage);
  EXPECT_NE(other.message().find("was written with opt A; this run uses opt B"), std::string::npos)
      << other.message();
  EXPECT_EQ(LoadResume(path, Mode::kAsync, 0xF1F2, "opt A", layout, 10, {}, &c).code(), Status::Code::kUsage);
  EXPECT_EQ(LoadResume(path, Mode::kSync, 0xF1F2, "opt A", Layout(Mode::kSync, 3, 0), 10, {}, &c).code(),
            Status::Code::kUsage)
      << "a run without optimizer state cannot take one";
  EXPECT_EQ(LoadResume(path, Mode::kSync, 0xF1F2, "opt A", Layout(Mode::kSync, 3, 1), 10, {}, &c).code(),
            Status::Code::kUsage)
      << "nor one with another number of state vectors";
  // What the run can say of the checkpoint's fingerprint (another count of hosts) is said.
  const Status hosts = LoadResume(path, Mode::kSync, 0xBAD, "opt A", layout, 10,
                                  [](uint64_t f) {
                                    return f == 0xF1F2 ? std::string("written on 2 hosts") : "";
                                  },
                                  &c);
  EXPECT_EQ(hosts.code(), Status::Code::kUsage);
  EXPECT_NE(hosts.message().find("belongs to another run: written on 2 hosts; resume with"),
            std::string::npos)
      << hosts.message();
  const Status past = LoadResume(path, Mode::kSync, 0xF1F2, "opt A", layout, 4, {}, &c);
  EXPECT_EQ(past.code(), Status::Code::kUsage);
  EXPECT_NE(past.message().find("the run has only 4"), std::string::npos) << past.message();
  // A checkpoint at the run's last step (a host lost after it, before the model was saved)
  // resumes: a run of no step that saves the model.
  EXPECT_TRUE(LoadResume(path, Mode::kSync, 0xF1F2, "opt A", layout, 5, {}, &c).ok());
  EXPECT_EQ(LoadResume(dir_.File("none.bin"), Mode::kSync, 0xF1F2, "opt A", layout, 10, {}, &c).code(),
            Status::Code::kData);
}

// ---------------------------------------------------------------------------------------------
// The validation protocol, sync: snapshots published by the "ranks" (the test).

class ValidationTest : public ::testing::Test {
 protected:
  const RunKind& kSyncKind = KindOf(Mode::kSync, 1);
  void SetUp() override {
    val_ = data::MakeParabola(50);
    good_.resize(kSpec.ParamCount());
    nn::InitParams(kSpec, Init::kTorch, 1, good_.data());
    bad_.assign(kSpec.ParamCount(), 100.f);
    // Finite, but hidden unit 0 is tanh(x), the others 0, and the output FLT_MAX * tanh(x) +
    // FLT_MAX: +inf on the 25 rows with x > 0 (rows 25 to 49), finite on the others.
    huge_.assign(kSpec.ParamCount(), 0.f);
    huge_[0] = 1;
    huge_[10] = huge_[15] = std::numeric_limits<float>::max();
  }
  // Every rank has copied `params` into snapshot k.
  static void Publish(shm::Segment& seg, int64_t k, const std::vector<float>& params) {
    std::copy(params.begin(), params.end(), seg.mutable_snapshot(k));
    for (uint32_t r = 0; r < seg.header()->config.workers; ++r) seg.mutable_block(r)->snap_eval = k;
  }
  double Loss(const std::vector<float>& p) const {
    return nn::Evaluate(kSpec, p.data(), val_.x.data(), val_.y.data(), val_.rows).loss;
  }

  data::Dataset val_;
  std::vector<float> good_, bad_, huge_;
  Logger log_{LogFormat::kJson, false};
  monitoring::RunHistory history_;
  monitoring::ValidationStats stats_{history_};
};

TEST_F(ValidationTest, WithoutEarlyStopASnapshotIsAckedOnceCopied) {
  shm::Segment seg = MakeSegment(Layout(Mode::kSync, 2, 0, 2));
  SegmentWrites writes(seg);
  ASSERT_TRUE(seg.valid());
  testing::internal::CaptureStdout();
  ValidationProtocol v(kSyncKind, {.eval_every = 2, .first_step = 2, .total_steps = 10}, Model(),
                       val_, seg, writes, log_, stats_);
  EXPECT_EQ(seg.header()->eval_ack, 1) << "a run resumed at step 2 has passed eval 1";
  EXPECT_TRUE(v.wants_fast_poll());
  seg.mutable_block(0)->snap_eval = 2;
  ASSERT_TRUE(v.Poll().ok());
  EXPECT_EQ(seg.header()->eval_ack, 1) << "rank 1 has not copied its slice yet";
  Publish(seg, 2, good_);
  ASSERT_TRUE(v.Poll().ok());
  EXPECT_EQ(seg.header()->eval_ack, 2);
  std::vector<float> params = bad_;
  nn::Metrics m;
  ASSERT_TRUE(v.FinalEvaluation(6, &params, &m).ok());
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(params, bad_) << "without --early-stop the last parameters are kept";
  EXPECT_DOUBLE_EQ(m.loss, Loss(bad_));
  EXPECT_NE(out.find("\"event\":\"validation\",\"step\":4"), std::string::npos) << out;
  EXPECT_NE(out.find("\"event\":\"validation\",\"step\":6"), std::string::npos) << out;
  EXPECT_EQ(stats_.validations(), 2u);
  EXPECT_FALSE(v.stop_requested());
}

// An evaluation that fails on the evaluator's thread (out of memory there) is a Status on
// the run loop's thread, naming the step, from Take and from Finish: no exception crosses.
TEST_F(ValidationTest, AFailedEvaluationIsAStatusOnTheRunLoopsThread) {
  Evaluator ev(Model(), val_,
               [](const nn::ResolvedModel&, const float*, const data::Dataset&) -> nn::Metrics {
    throw std::bad_alloc();
  });
  ev.Submit(1, 4, good_);
  std::vector<Evaluator::Result> done;
  const Status finish = ev.Finish(&done);
  EXPECT_EQ(finish.code(), Status::Code::kInternal);
  EXPECT_EQ(finish.message(),
            "internal error: the validation of step 4: out of memory (std::bad_alloc)");
  EXPECT_TRUE(done.empty());
  const Status take = ev.Take(&done);
  EXPECT_EQ(take.code(), Status::Code::kInternal) << "the failure stays until the run ends";
  // A good evaluation is handed back.
  Evaluator fine(Model(), val_);
  fine.Submit(1, 2, good_);
  ASSERT_TRUE(fine.Finish(&done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].step, 2);
}

TEST_F(ValidationTest, EarlyStopNamesEvalKPlus2BeforeAckingKAndKeepsTheBest) {
  shm::Segment seg = MakeSegment(Layout(Mode::kSync, 2, 0, 2));
  SegmentWrites writes(seg);
  ASSERT_TRUE(seg.valid());
  testing::internal::CaptureStdout();
  ValidationProtocol v(kSyncKind, {.eval_every = 2, .early_stop = 1, .total_steps = 10}, Model(),
                       val_, seg, writes, log_, stats_);
  Publish(seg, 1, good_);
  ASSERT_TRUE(v.Poll().ok());
  Publish(seg, 2, bad_);  // no better: with patience 1, eval 2 decides
  ASSERT_TRUE(v.Poll().ok());
  std::vector<float> params = bad_;
  nn::Metrics m;
  ASSERT_TRUE(v.FinalEvaluation(6, &params, &m).ok());
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(v.stop_requested());
  EXPECT_EQ(seg.header()->stop_eval, 4) << "the ranks stop right before step (2 + 2) * 2";
  EXPECT_EQ(seg.header()->eval_ack, 2) << "acked once evaluated";
  EXPECT_EQ(v.best_step(), 2);
  EXPECT_EQ(params, good_) << "the model kept is the best evaluated";
  EXPECT_DOUBLE_EQ(m.loss, Loss(good_));
  EXPECT_NE(out.find("\"event\":\"early_stop\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"event\":\"early_stop_model\",\"best_step\":2"), std::string::npos) << out;
}

// NaN is lower than nothing and nothing is lower than NaN: a first evaluation at NaN stayed
// "the best" whatever came after, and early stopping kept that model. A non-finite evaluation
// is never the best; it counts as one without improvement.
TEST(EarlyStop, ANonFiniteEvaluationIsNeverTheBest) {
  nn::Metrics nan, inf, fine;
  nan.loss = std::nan("");
  inf.loss = INFINITY;
  fine.loss = 7;
  EarlyStop es(2);
  EXPECT_FALSE(es.Observe(2, nan, {1}));
  EXPECT_FALSE(es.has_best());
  EXPECT_FALSE(es.Observe(4, fine, {2}));
  EXPECT_EQ(es.step(), 4);
  EXPECT_FALSE(es.Observe(6, inf, {3}));
  EXPECT_TRUE(es.Observe(8, nan, {4})) << "two evaluations without a lower loss";
  EXPECT_EQ(es.step(), 4);
  EXPECT_EQ(es.params(), std::vector<float>{2});
}

// The run's model is never one whose validation loss is not finite: early stopping keeps the
// best finite evaluation; with none (or without early stopping, a final evaluation that is not
// finite) the run ends as a divergence, naming the rows. Each such evaluation is logged.
TEST_F(ValidationTest, AModelWithANonFiniteValidationLossIsNeverKept) {
  for (const int64_t patience : {0, 2}) {
    shm::Segment seg = MakeSegment(Layout(Mode::kSync, 2, 0, 2));
    SegmentWrites writes(seg);
    ASSERT_TRUE(seg.valid());
    testing::internal::CaptureStdout();
    ValidationProtocol v(kSyncKind,
                         {.eval_every = 2, .early_stop = patience, .total_steps = 10}, Model(), val_,
                         seg, writes, log_, stats_);
    Publish(seg, 1, huge_);
    ASSERT_TRUE(v.Poll().ok());
    Publish(seg, 2, good_);
    ASSERT_TRUE(v.Poll().ok());
    std::vector<float> params = huge_;
    nn::Metrics m;
    const Status s = v.FinalEvaluation(6, &params, &m);
    const std::string out = testing::internal::GetCapturedStdout();
    EXPECT_NE(out.find("{\"event\":\"validation_nonfinite\",\"step\":2,\"rows\":25,"
                       "\"first_rows\":[25,26,27]}"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("{\"event\":\"validation_nonfinite\",\"step\":6,"), std::string::npos)
        << out;
    if (patience == 0) {
      EXPECT_EQ(s.code(), Status::Code::kDiverged) << s.message();
      EXPECT_EQ(s.message(),
                "validation: the model after step 6 gives outputs that are not finite (NaN or "
                "infinite) in 25 rows, the first 25, 26 and 27 (0-based) of the held-out rows; "
                "no model was saved");
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(v.best_step(), 4);
    EXPECT_EQ(params, good_) << "the best finite evaluation is kept";
    EXPECT_DOUBLE_EQ(m.loss, Loss(good_));
  }
  // No finite evaluation at all: the early stop names none, and the run keeps no model.
  shm::Segment seg = MakeSegment(Layout(Mode::kSync, 2, 0, 2));
  SegmentWrites writes(seg);
  testing::internal::CaptureStdout();
  ValidationProtocol v(kSyncKind, {.eval_every = 2, .early_stop = 2, .total_steps = 10}, Model(),
                       val_, seg, writes, log_, stats_);
  Publish(seg, 1, huge_);
  ASSERT_TRUE(v.Poll().ok());
  Publish(seg, 2, huge_);
  ASSERT_TRUE(v.Poll().ok());
  std::vector<float> params = huge_;
  nn::Metrics m;
  const Status s = v.FinalEvaluation(6, &params, &m);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_TRUE(v.stop_requested());
  EXPECT_NE(out.find("{\"event\":\"early_stop\",\"best_step\":-1,\"best_val_loss\":null}"),
            std::string::npos)
      << out;
  EXPECT_EQ(s.code(), Status::Code::kDiverged) << s.message();
  EXPECT_NE(s.message().find("no evaluated model had a finite validation loss"), std::string::npos)
      << s.message();
}

// ---------------------------------------------------------------------------------------------
// A JSON log line (master/log/log.h).

// Keys and strings are escaped, and the line is valid UTF-8 whatever bytes they hold (a data
// file's cell or path may hold any): each ill-formed sequence becomes one U+FFFD.
TEST(JsonLine, StringsAreEscapedAndValidUtf8WhateverTheBytes) {
  const std::string bytes =
      std::string("q\"b\\s/\n\r\t\b\f\x01\x1f\x7f.") +
      "caf\xc3\xa9 \xff x\xe2\x82 \xc0\xaf \xed\xa0\x80 \xf0\x9f\x90\x88 end\xe2";
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(JsonLine("e\xc3").Str("k\n", bytes).Done(),
            "{\"event\":\"e" + fffd +
                "\",\"k\\n\":\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\u0001\\u001f\x7f." + "caf\xc3\xa9 " +
                fffd + " x" + fffd + " " + fffd + fffd + " " + fffd + fffd + fffd +
                " \xf0\x9f\x90\x88 end" + fffd + "\"}");
}

// Numbers are the shortest text that reads back as the same double (std::to_chars), where
// nlohmann::json would print 8.0, 100000.0 and 0.40624729672619603.
TEST(JsonLine, NumbersAreTheShortestTextOfTheirDouble) {
  const double d = std::strtod("0.406247296726196", nullptr);
  const std::string line = JsonLine("n")
                               .Num("a", 8)
                               .Num("b", 0.1)
                               .Num("c", 1e5)
                               .Num("d", d)
                               .Num("e", NAN)
                               .Num("f", -INFINITY)
                               .Int("g", -3)
                               .Bool("h", true)
                               .Ints("i", {1, 2})
                               .Ints("j", {})
                               .Done();
  EXPECT_EQ(line,
            "{\"event\":\"n\",\"a\":8,\"b\":0.1,\"c\":1e+05,\"d\":0.406247296726196,\"e\":null,"
            "\"f\":null,\"g\":-3,\"h\":true,\"i\":[1,2],\"j\":[]}");
}

// ---------------------------------------------------------------------------------------------
// The run summary.

const RunKind& kSync = KindOf(Mode::kSync, 1);
const RunKind& kAsync = KindOf(Mode::kAsync, 1);

RunSummary SyncSummary() {
  RunSummary s;
  s.workers = 2;
  s.end_step = 2000;
  s.final_loss = 0.0123456789;
  s.wall_s = 1.5;
  s.samples = 100000;
  s.step1_end_ns = 1'000'000'000;
  s.last_end_ns = 1'000'000'000 + 1999 * 12'500;  // 12.5 us per step after the first
  s.restarts = 3;
  s.recoveries = {0.5, 0.1, 0.25};
  // Per step and worker: compute 8 us, reduce+update 1 us, barrier wait 1 us (2000 steps, 2
  // workers).
  s.compute_ns = 2000 * 2 * 8000;
  s.reduce_ns = 2000 * 2 * 1000;
  s.barrier_ns = 2000 * 2 * 1000;
  return s;
}

TEST(RunSummary, SyncText) {
  EXPECT_EQ(SummaryText(kSync, SyncSummary()),
            "done: 2000 steps, final loss 0.0123456789, 1.500 s, 66667 samples/s, 2 workers, "
            "12.50 us/step");
}

TEST(RunSummary, SyncJsonFieldsInOrder) {
  EXPECT_EQ(SummaryJson(kSync, SyncSummary()).Done(),
            "{\"event\":\"summary\",\"steps\":2000,\"final_loss\":0.0123456789,\"wall_s\":1.5,"
            "\"samples_per_s\":66666.66666666667,\"workers\":2,\"hosts\":1,\"us_per_step\":12.5,"
            "\"mode\":\"sync\",\"kernels\":\"" +
                std::string(nn::PathName(nn::UsedPath())) +
                "\",\"first_step\":0,\"restarts\":3,\"torn_updates\":0,"
                "\"recoveries\":3,\"recovery_median_s\":0.25,\"recovery_max_s\":0.5,"
            "\"step_compute_us\":8,\"step_reduce_us\":1,\"step_barrier_us\":1,"
            "\"step_crossing_us\":0}");
}

TEST(RunSummary, StepSplitPerWorkerAndStep) {
  EXPECT_EQ(SplitText(kSync, SyncSummary()),
            "time per step and worker: compute 8 us (80%), reduce+update 1 us (10%), "
            "barrier wait 1 us (10%)");
  RunSummary resumed = SyncSummary();
  resumed.first_step = 1000;  // half the steps ran: twice the time per step
  EXPECT_EQ(SplitPerStep(kSync, resumed).compute_us, 16);
  EXPECT_EQ(SplitText(kAsync, SyncSummary()), "");
}

TEST(RunSummary, EarlyStopAndValidation) {
  RunSummary s = SyncSummary();
  s.workers = 1;
  s.recoveries.clear();
  s.early_stop = true;
  s.stopped_early = true;
  s.best_step = 1200;
  s.val_rows = 360;
  s.classification = true;
  s.val.loss = 0.21;
  s.val.accuracy = 0.94432;
  EXPECT_EQ(SummaryText(kSync, s),
            "done: 2000 steps, final loss 0.0123456789 (stopped early; model of step 1200), "
            "val loss 0.21, val accuracy 0.9443, 1.500 s, 66667 samples/s, 1 worker, "
            "12.50 us/step");
  const std::string j = SummaryJson(kSync, s).Done();
  // The kind's fields (master/kinds/kind.h: sync's step split) before the validation's.
  EXPECT_NE(j.find("\"recovery_median_s\":null,\"recovery_max_s\":null,\"stopped_early\":true,"
                   "\"best_step\":1200,\"step_compute_us\":16,\"step_reduce_us\":2,"
                   "\"step_barrier_us\":2,\"step_crossing_us\":0,\"val_loss\":0.21,"
                   "\"val_accuracy\":0.94432}"),
            std::string::npos)
      << j;
  s.stopped_early = false;
  s.classification = false;
  s.val.rmse = 0.5;
  EXPECT_NE(SummaryText(kSync, s).find("(model of step 1200), val loss 0.21, val rmse 0.5, "),
            std::string::npos)
      << SummaryText(kSync, s);
}

TEST(RunSummary, Async) {
  RunSummary s;
  s.rule = AsyncRule::kDcAsgdA;
  s.workers = 3;
  s.first_step = 100;
  s.end_step = 1100;
  s.final_loss = 0.5;
  s.wall_s = 2;
  s.samples = 8000;
  s.dropped = 3;
  s.staleness_sum = 1650;
  s.worker_updates = {400, 350, 250};
  s.param_version = 1100;
  EXPECT_DOUBLE_EQ(UsPerStep(kAsync, s), 2000.0)
      << "wall time over the 1000 updates this run applied";
  EXPECT_EQ(SummaryText(kAsync, s),
            "done: 1100 updates, final loss 0.5 (dc-asgd-a, mean staleness 1.50, 3 dropped), "
            "2.000 s, 4000 samples/s, 3 workers, 2000.00 us/step");
  const std::string j = SummaryJson(kAsync, s).Done();
  EXPECT_NE(j.find("\"rule\":\"dc-asgd-a\",\"updates\":1100,\"param_version\":1100,"
                   "\"worker_updates\":[400,350,250],\"dropped\":3,\"mean_staleness\":1.5}"),
            std::string::npos)
      << j;
}

TEST(RunSummary, SyncUsPerStepNeedsTwoSteps) {
  RunSummary s = SyncSummary();
  s.end_step = 1;
  EXPECT_TRUE(std::isnan(UsPerStep(kSync, s)));
  EXPECT_NE(SummaryJson(kSync, s).Done().find("\"us_per_step\":null"), std::string::npos);
  s = SyncSummary();
  s.step1_end_ns = 0;  // never recorded
  EXPECT_TRUE(std::isnan(UsPerStep(kSync, s)));
}

TEST(RunSummary, ATimeThatCannotBeMeasuredIsSaidNotPrintedAsNan) {
  RunSummary s = SyncSummary();
  s.end_step = 1;
  const std::string text = SummaryText(kSync, s);
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_NE(text.find(", no time per step (sync steps are timed from the end of the first to "
                      "the end of the last: it takes 2 steps or more)"),
            std::string::npos)
      << text;
  EXPECT_NE(SummaryText(kSync, SyncSummary()).find(" us/step"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Several hosts: the metrics port of each host master on a machine, and the host label.

TEST(HostMetricsAddress, BasePortPlusTheHostLocalRank) {
  const struct {
    const char* addr;
    int host_local;
    const char* want;
  } cases[] = {
      {"127.0.0.1:9464", 0, "127.0.0.1:9464"},
      {"127.0.0.1:9464", 3, "127.0.0.1:9467"},
      {"0.0.0.0:9464", 1, "0.0.0.0:9465"},
      {"localhost:9464", 2, "localhost:9466"},
      {"[::1]:9464", 1, "[::1]:9465"},
      {"127.0.0.1:65530", 5, "127.0.0.1:65535"},
      {"127.0.0.1:65535", 0, "127.0.0.1:65535"},
      {"127.0.0.1:0", 0, "127.0.0.1:0"},
      {"127.0.0.1:0", 7, "127.0.0.1:0"},  // port 0: every host master takes any free port
      {"[::]:0", 1, "[::]:0"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.addr) + " host_local " + std::to_string(c.host_local));
    std::string out = "unset";
    const Status s = monitoring::HostMetricsAddress(c.addr, c.host_local, &out);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(out, c.want);
  }
}

TEST(HostMetricsAddress, APortAbove65535OrAMalformedAddressIsAUsageErrorNamingTheFlag) {
  const struct {
    const char* addr;
    int host_local;
    const char* says;
  } cases[] = {
      {"127.0.0.1:65535", 1, "would listen on port 65536, above 65535"},
      {"127.0.0.1:65530", 6, "would listen on port 65536, above 65535"},
      {"[::1]:65000", 600, "would listen on port 65600, above 65535"},
      {"nonsense", 0, "expected HOST:PORT"},
      {"127.0.0.1:", 1, "port must be a number 0..65535"},
      {"127.0.0.1:99999", 0, "port must be a number 0..65535"},
      {"127.0.0.1:http", 0, "port must be a number 0..65535"},
      {"::1:9464", 0, "an IPv6 address goes in brackets"},
      {"[::1]9464", 0, "expected [IPV6]:PORT"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.addr) + " host_local " + std::to_string(c.host_local));
    std::string out = "unset";
    const Status s = monitoring::HostMetricsAddress(c.addr, c.host_local, &out);
    EXPECT_EQ(s.code(), Status::Code::kUsage);
    EXPECT_EQ(s.message().rfind(std::string("--metrics-addr ") + c.addr + ": ", 0), 0u)
        << s.message();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
    EXPECT_EQ(out, "unset") << "an error leaves *out alone";
  }
  std::string out;
  EXPECT_EQ(monitoring::HostMetricsAddress("127.0.0.1:9464", -1, &out).code(),
            Status::Code::kInternal);
}

TEST(HostMetrics, ATakenPortOfAnotherHostMasterIsExplainedByTheGivenPortPlusItsRank) {
  const test::LoopbackListener taken;
  const int base = taken.port() - 1;  // host master 1 of this machine would listen on taken
  const std::string given = "127.0.0.1:" + std::to_string(base);
  std::unique_ptr<monitoring::Exporter> e;
  const Status s = StartHostMetrics(given, 1, &e);
  EXPECT_EQ(s.code(), Status::Code::kUsage);
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(s.message().rfind("--metrics-addr " + given + ": host master 1 of this machine "
                              "listens on port " + std::to_string(base) + " + 1 = " +
                              std::to_string(taken.port()) +
                              " (under mpirun, host master k of a machine listens on the given "
                              "port + k), and cannot listen there: the port is taken",
                              0),
            0u)
      << s.message();
  // Host master 0 listens on the port given: the message names it, no rule to explain.
  const std::string at = "127.0.0.1:" + std::to_string(taken.port());
  const Status own = StartHostMetrics(at, 0, &e);
  EXPECT_EQ(own.message().rfind("--metrics-addr " + at + ": cannot listen there: the port is taken", 0),
            0u)
      << own.message();
}

// GET http://addr/metrics (HTTP/1.0: the body ends with the connection), each socket call
// bounded by 5 s; "" on any failure.
std::string ScrapeOnce(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))));
  if (inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  const timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string raw;
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + addr + "\r\n\r\n";
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0 &&
      send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
    char buf[65536];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = raw.find("\r\n\r\n");
  return raw.rfind("HTTP/1.", 0) == 0 && body != std::string::npos ? raw.substr(body + 4) : "";
}

// The exporter of host master 2 of 3: every series it serves says host="2" (a label taken from
// the options, not a constant), shmtrain_hosts is 3, and the combine histogram counts the
// combines the run loop observed.
TEST(MetricsHostLabel, EverySeriesNamesTheHostIndexOfItsHostMaster) {
  shm::Segment seg = MakeSegment(Layout(Mode::kSync, 2, 0));
  monitoring::RunStats stats(2);
  stats.combine().Observe(0.003);  // in the bucket le="0.005"
  stats.combine().Observe(0.2);    // in the bucket le="0.25"
  TrainOptions opts;
  opts.workers = 2;
  opts.host_index = 2;
  opts.host_count = 3;
  opts.host_local = 1;
  std::unique_ptr<monitoring::Exporter> exporter;
  const Status started = monitoring::Exporter::Start("127.0.0.1:0", &exporter);
  ASSERT_TRUE(started.ok()) << started.message();
  const KindView kind(KindOf(Mode::kSync, opts.host_count), opts);
  exporter->Attach(&seg, &kind, &stats, opts, {});
  const std::string text = ScrapeOnce(exporter->address());
  exporter->Detach();
  ASSERT_NE(text, "") << "no answer from " << exporter->address();

  int samples = 0;
  std::string line;
  for (size_t pos = 0; pos < text.size(); pos += line.size() + 1) {
    line = text.substr(pos, text.find('\n', pos) - pos);
    if (line.empty() || line[0] == '#' || line.rfind("exposer_", 0) == 0) continue;
    ++samples;
    EXPECT_TRUE(line.find("{host=\"2\"") != std::string::npos ||
                line.find(",host=\"2\"") != std::string::npos)
        << line;
  }
  EXPECT_GT(samples, 100);
  for (const char* want : {
           "\nshmtrain_hosts{host=\"2\"} 3\n",
           "\nshmtrain_workers{host=\"2\"} 2\n",
           "\nshmtrain_worker_up{host=\"2\",worker=\"1\"} 0\n",
           "\nshmtrain_host_combine_seconds_count{host=\"2\"} 2\n",
           "\nshmtrain_host_combine_seconds_sum{host=\"2\"} 0.203",
           "\nshmtrain_host_combine_seconds_bucket{host=\"2\",le=\"0.0025\"} 0\n",
           "\nshmtrain_host_combine_seconds_bucket{host=\"2\",le=\"0.005\"} 1\n",
           "\nshmtrain_host_combine_seconds_bucket{host=\"2\",le=\"0.25\"} 2\n",
           "\nshmtrain_host_combine_seconds_bucket{host=\"2\",le=\"+Inf\"} 2\n",
       }) {
    EXPECT_NE(text.find(want), std::string::npos) << "no '" << want << "' in\n" << text;
  }
}

// A worker that never moves the run: a real process (so that a SIGKILL, the reaping and the
// replacement are real) that only sleeps.
class SleeperLauncher final : public Launcher {
 public:
  Status Spawn(const std::string&, int, uint32_t, pid_t* pid) override {
    char sleep_bin[] = "/bin/sleep";
    char secs[] = "600";
    char* argv[] = {sleep_bin, secs, nullptr};
    if (posix_spawn(pid, sleep_bin, nullptr, nullptr, argv, environ) != 0) {
      return Status::Resource("cannot start /bin/sleep");
    }
    ++spawned;
    pids.push_back(*pid);
    return Status::Ok();
  }
  int spawned = 0;
  std::vector<pid_t> pids;
};

// One round of the run loop for the supervisor alone: its sleep (1 ms at most), then its
// tick. True while the run goes on.
bool Round(Supervisor& sup, const shm::Segment& seg) {
  sup.Wait(1);
  return !sup.Tick({seg, KindOf(seg.header()->config).Progress(seg), shm::MonotonicNs()}).ends;
}

// Chaos never kills twice while the run stands still: on a machine so loaded that no
// replacement gets as far as one update between two kills, kills at every interval would stall
// the run for ever. Here nothing moves the run: one kill, however many intervals pass, and the
// next only once the run has moved.
TEST(SupervisorChaos, KillsOnlyOnceWhileTheRunStandsStill) {
  shm::Segment seg = MakeSegment(Layout(Mode::kAsync, 2, 0));
  SegmentWrites writes(seg);
  SleeperLauncher launcher;
  Logger log(LogFormat::kJson, false);
  monitoring::WorkerStats stats(2);
  SupervisorOptions opts;
  opts.heartbeat_timeout_ns = 3'600'000'000'000;
  opts.chaos_every_ns = 1'000'000;  // 1 ms
  Supervisor sup(KindOf(Mode::kAsync, 1), seg, writes, launcher, log, stats, opts);
  ASSERT_TRUE(sup.Start().ok());
  // Ticks until `done`, for 30 s at most (a loaded machine is slow to reap and restart).
  auto tick_until = [&](const std::function<bool()>& done) {
    const int64_t until = shm::MonotonicNs() + 30'000'000'000;
    while (!done() && shm::MonotonicNs() < until) ASSERT_TRUE(Round(sup, seg));
  };
  // Ticks over at least 100 chaos intervals, and 100 ticks.
  auto tick_on = [&] {
    const int64_t until = shm::MonotonicNs() + 100 * opts.chaos_every_ns;
    for (int n = 0; n < 100 || shm::MonotonicNs() < until; ++n) ASSERT_TRUE(Round(sup, seg));
  };
  tick_until([&] { return sup.restarts() >= 1; });
  tick_on();
  EXPECT_EQ(sup.restarts(), 1) << "chaos killed again while the run had not moved";
  EXPECT_EQ(launcher.spawned, 3);
  shm::StoreRelease<uint64_t>(seg.mutable_header()->param_version, 1);  // the run moves one update
  tick_until([&] { return sup.restarts() >= 2; });
  tick_on();
  EXPECT_EQ(sup.restarts(), 2) << "chaos should kill once more after the run moved";
}


// A cross-host thread stuck in the transport is left behind at a failed end, and with it the
// segment's mapping (ExchangeThread::JoinOrLeave): the steps after it still read the segment,
// the supervisor's among them, which stops the workers through the segment's abort word.
TEST(RunEnd, AThreadLeftBehindLeavesTheSegmentToTheUnitsAfterIt) {
  shm::Segment mapped = MakeSegment(Layout(Mode::kSync, 2, 0));
  RemovedOnDeath name;
  RunLoop loop(mapped, name, KindOf(Mode::kSync, 1));
  const shm::Segment& seg = loop.segment();
  auto release = std::make_shared<std::atomic<bool>>(false);
  // A unit whose thread never returns until released (the test hook of a stuck exchange), and
  // whose round ends the run as a lost host would.
  class Stuck final : public RunUnit {
   public:
    Stuck(shm::Segment& seg, std::shared_ptr<std::atomic<bool>> release)
        : thread_(seg, [release] {
            while (!release->load()) usleep(1000);
          }) {}
    Verdict Tick(const RunView& /*view*/) override {
      return Verdict::EndIf(Status::HostLost("host 1 sent nothing"));
    }
    void Stop(RunEnd& /*end*/) override { thread_.JoinOrLeave(); }

   private:
    ExchangeThread thread_;
  } stuck(loop.writes().ForExchange(), release);
  SleeperLauncher launcher;
  Logger log(LogFormat::kJson, false);
  monitoring::WorkerStats stats(2);
  SupervisorOptions opts;
  opts.heartbeat_timeout_ns = 3'600'000'000'000;
  Supervisor sup(KindOf(Mode::kSync, 1), seg, loop.writes(), launcher, log, stats, opts);
  const Status s = loop.Run([&sup](int ms) { sup.Wait(ms); }, {&stuck, &sup});
  EXPECT_EQ(s.code(), Status::Code::kHostLost) << s.message();
  ASSERT_TRUE(seg.valid());
  EXPECT_GT(shm::LoadRelaxed(seg.header()->abort_epoch), 0u) << "the workers were not aborted";
  for (const pid_t pid : launcher.pids) {
    EXPECT_TRUE(test::WaitPidGone(pid, std::chrono::milliseconds(5000))) << "worker " << pid;
  }
  release->store(true);
}

// Signals in messages (core/signal_name.h): a stop by its name, a death by its number and
// name; a real-time signal has no name and is shown by its number alone.
TEST(SignalNames, ByNameAndByNumber) {
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGHUP), "SIGHUP");
  EXPECT_EQ(SignalText(SIGKILL), "signal 9 (SIGKILL)");
  EXPECT_EQ(SignalText(SIGSEGV), "signal 11 (SIGSEGV)");
  const int rt = SIGRTMIN + 1;
  EXPECT_EQ(SignalName(rt), "signal " + std::to_string(rt));
  EXPECT_EQ(SignalText(rt), "signal " + std::to_string(rt));
}

// The sleeping side of the wake_seq protocol (shm::SleepOnWakeSeq): counted while it looks
// and sleeps, woken by a move of the word whenever the move comes (before the look, during
// it, or during the sleep), looking again after every wake-up, and uncounted at the end.
TEST(SleepOnWakeSeq, AMoveOfTheWordEndsTheSleepAndTheWaitLooksAgain) {
  for (int round = 0; round < 50; ++round) {
    auto h = std::make_unique<shm::Header>();
    std::atomic<bool> ready{false};
    std::thread waker([&] {
      while (shm::LoadSeqCst(h->waiters) == 0) std::this_thread::yield();
      ready.store(true);
      shm::AddSeqCst<uint32_t>(h->wake_seq, 1);
      shm::FutexWake(&h->wake_seq, INT_MAX);
    });
    const int64_t t0 = shm::MonotonicNs();
    int looks = 0, wakes = 0;
    shm::SleepOnWakeSeq(
        h.get(),
        [&]() -> int64_t {
          ++looks;
          return ready.load() ? shm::kWakeDone : t0 + 20'000'000'000;  // 20 s: never reached
        },
        [&] {
          ++wakes;
          return false;
        });
    waker.join();
    ASSERT_LT(shm::MonotonicNs() - t0, 10'000'000'000) << "a wake-up was lost, round " << round;
    EXPECT_EQ(looks, wakes + 1);
    EXPECT_EQ(shm::LoadSeqCst(h->waiters), 0u);
  }
}

// A look's time is the sleep's deadline; awake() ends the wait.
TEST(SleepOnWakeSeq, SleepsUntilTheLooksTimeAndAwakeEndsTheWait) {
  auto h = std::make_unique<shm::Header>();
  int wakes = 0;
  const int64_t t0 = shm::MonotonicNs();
  shm::SleepOnWakeSeq(
      h.get(), [] { return shm::MonotonicNs() + 2'000'000; }, [&] { return ++wakes == 3; });
  EXPECT_EQ(wakes, 3);
  EXPECT_GE(shm::MonotonicNs() - t0, 6'000'000);
  EXPECT_EQ(shm::LoadSeqCst(h->waiters), 0u);
}


// The loss ring's sequence lock (shm/layout.h): a reader racing a writer that rewrites the
// record gets a loss only with the tag it was written under, or learns the record moved on.
TEST(LossRing, AReadGetsALossOnlyWithTheTagItWasWrittenUnder) {
  shm::LossRecord rec{};
  std::atomic<bool> started{false}, done{false};
  std::atomic<int64_t> read{0};
  // At least 400,000 writes, and on until the reader has read 2,000 times (a loaded machine
  // may start it late), within 20 s.
  uint64_t written = 0;
  std::thread writer([&] {
    while (!started.load()) std::this_thread::yield();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (; written < 400'000 || (read.load() < 2'000 && std::chrono::steady_clock::now() < until);
         ++written) {
      shm::PublishLoss(rec, written, static_cast<double>(written));
    }
    done = true;
  });
  int64_t mismatched = 0;
  started = true;
  while (!done.load()) {
    const uint64_t seen = shm::LoadAcquire(rec.tag);
    if (seen == 0) continue;
    double loss = -1;
    if (shm::ReadLoss(rec, seen - 1, &loss) != seen) continue;  // moved on meanwhile
    read.fetch_add(1);
    if (loss != static_cast<double>(seen - 1)) ++mismatched;
  }
  writer.join();
  EXPECT_GE(read.load(), 2'000);
  EXPECT_EQ(mismatched, 0) << "of " << read.load() << " reads";
  double last = -1;
  EXPECT_EQ(shm::ReadLoss(rec, written - 1, &last), written);
  EXPECT_EQ(last, static_cast<double>(written - 1));
  EXPECT_EQ(shm::ReadLoss(rec, written - 2, &last), written) << "an older index is overwritten";
  EXPECT_EQ(shm::ReadLoss(rec, written, &last), written) << "a newer one is not written yet";
}

// The hosts agree on the state they start from (master/run/run.cc, AgreeWithHosts): its
// checksum covers the parameters the workers will read, also in an async run resumed at an
// odd update (async has one parameter buffer, whatever the step).
TEST(StartStateCrc, CoversTheParametersTheRunStartsFrom) {
  for (Mode mode : {Mode::kSync, Mode::kAsync}) {
    shm::Segment seg = MakeSegment(Layout(mode, 2, 0));
    Checkpoint c;
    c.mode = mode;
    c.step = 3;
    c.params = Filled(1);
    const RunKind& kind = KindOf(mode, 1);
    kind.ResumeInto(c, &seg);
    seg.mutable_header()->config.first_step = 3;
    const uint32_t before = StartStateCrc(seg, kind);
    const std::vector<float> read = kind.ParamsAfter(seg, 3);
    ASSERT_EQ(read, c.params) << ToString(mode);
    float* w = mode == Mode::kSync ? seg.mutable_params(3) : seg.mutable_params(0);
    w[0] += 1;
    EXPECT_NE(StartStateCrc(seg, kind), before)
        << ToString(mode) << ": a changed start went unseen";
  }
}

// -------------------------------------------------------------------------------------------
// The kinds of run (master/kinds/kind.h): picked in one place, each with its own rules.

TEST(RunKind, OneKindForEachModeAndCountOfHosts) {
  std::vector<const RunKind*> seen;
  for (const auto& [mode, name] : NameTable(Mode{})) {
    for (int hosts : {1, 2, 5}) {
      const RunKind& k = KindOf(mode, hosts);
      EXPECT_EQ(k.mode(), mode) << name << " x " << hosts;
      EXPECT_EQ(std::string(k.name()).rfind(name, 0), 0u) << k.name();
      EXPECT_EQ(std::string(k.name()).find("across hosts") != std::string::npos, hosts > 1)
          << k.name();
      shm::RunConfig c{};
      c.mode = static_cast<uint32_t>(mode);
      c.hosts = static_cast<uint32_t>(hosts);
      EXPECT_EQ(&KindOf(c), &k);
      if (std::find(seen.begin(), seen.end(), &k) == seen.end()) seen.push_back(&k);
    }
  }
  EXPECT_EQ(seen.size(), 2 * NameTable(Mode{}).size()) << "one kind per mode, on one host or more";
}

TEST(RunKind, AFlagOfOneModeIsRefusedInTheOther) {
  TrainOptions o;
  o.given["--max-staleness"] = "3";
  const Status s = CheckModeFlags(o);
  EXPECT_EQ(s.code(), Status::Code::kUsage);
  EXPECT_EQ(s.message(), "--max-staleness: applies to async mode only (add --mode async); this "
                         "run is sync");
  o.mode = Mode::kAsync;
  EXPECT_TRUE(CheckModeFlags(o).ok());
}

// Async across hosts: each host runs its share of the updates and counts checkpoints in them;
// a checkpoint's step is every host's. Sync across hosts: every host runs every step.
TEST(RunKind, AcrossHostsAsyncSharesTheUpdatesAndSyncDoesNot) {
  Logger log(LogFormat::kJson, false);
  TrainOptions o;
  o.host_count = 3;
  o.host_index = 1;
  o.checkpoint_every = 6;
  HostPlan plan;
  ASSERT_TRUE(KindOf(Mode::kAsync, 3).Plan(o, 99, 9, log, &plan).ok());
  EXPECT_EQ(plan.steps, shm::AsyncHostUpdates(99, 3, 1));
  EXPECT_EQ(plan.checkpoint_every, 2);
  EXPECT_EQ(plan.eval_every, 3);
  EXPECT_EQ(KindOf(Mode::kAsync, 3).HostStep(12, 3), 4);
  EXPECT_EQ(KindOf(Mode::kAsync, 3).RunStep(4, 3), 12);
  EXPECT_EQ(KindOf(Mode::kAsync, 3).Plan(o, 100, 9, log, &plan).code(), Status::Code::kUsage)
      << "the hosts' shares must be equal for their checkpoints' sync points";
  ASSERT_TRUE(KindOf(Mode::kSync, 3).Plan(o, 100, 9, log, &plan).ok());
  EXPECT_EQ(plan.steps, 100);
  EXPECT_EQ(plan.checkpoint_every, 6);
  EXPECT_EQ(plan.eval_every, 9);
  EXPECT_EQ(KindOf(Mode::kSync, 3).HostStep(12, 3), 12);
}

// Async: when every rank has ended with updates still owed (torn by deaths), each owed update
// gets a ticket past the run's last, in a rank's block, and those ranks start again.
TEST(RunKind, AsyncDeathRulesHandOutTicketsForTheUpdatesOwed) {
  shm::Segment seg = MakeSegment(Layout(Mode::kAsync, 3, 0));
  SegmentWrites writes(seg);
  const int64_t total = seg.header()->config.total_steps;
  monitoring::RunStats stats(3);
  std::unique_ptr<DeathRules> rules = KindOf(Mode::kAsync, 1).MakeDeathRules(seg, writes, stats.workers());
  seg.mutable_header()->param_version = static_cast<uint64_t>(total - 2);
  std::vector<int> owed;
  ASSERT_TRUE(rules->AllFinished(&owed).ok());
  EXPECT_EQ(owed, (std::vector<int>{0, 1}));
  EXPECT_EQ(seg.block(0)->ticket, total);
  EXPECT_EQ(seg.block(1)->ticket, total + 1);
  seg.mutable_header()->param_version = static_cast<uint64_t>(total);
  ASSERT_TRUE(rules->AllFinished(&owed).ok());
  EXPECT_TRUE(owed.empty());
  seg.mutable_header()->param_version = static_cast<uint64_t>(total + 1);
  EXPECT_EQ(rules->AllFinished(&owed).code(), Status::Code::kInternal);
}

// Sync: a rank that exits cleanly has finished its part only at the run's last step.
TEST(RunKind, SyncDeathRulesFinishARankOnlyAtTheLastStep) {
  shm::Segment seg = MakeSegment(Layout(Mode::kSync, 2, 0));
  SegmentWrites writes(seg);
  const uint64_t total = static_cast<uint64_t>(seg.header()->config.total_steps);
  monitoring::RunStats stats(2);
  std::unique_ptr<DeathRules> rules = KindOf(Mode::kSync, 1).MakeDeathRules(seg, writes, stats.workers());
  seg.mutable_block(0)->phase = 2 * total - 1;
  seg.mutable_block(1)->phase = 2 * total;
  EXPECT_FALSE(rules->FinishedItsPart(0));
  EXPECT_TRUE(rules->FinishedItsPart(1));
  std::vector<int> owed{7};
  EXPECT_TRUE(rules->AllFinished(&owed).ok());
  EXPECT_TRUE(owed.empty());
}

}  // namespace
}  // namespace shmtrain::master
