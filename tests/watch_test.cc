// Watching a run: TensorBoard event files (--tensorboard, monitoring/tfevents.h), and the live
// page (monitoring/page/live.html) in a real browser.
//
// The files are decoded as TensorBoard reads them by tests/tfevents_decode.py: TensorBoard's
// Event and Summary schema compiled by protoc, every record's two CRC-32C checked by
// python3-crc32c, the first event the file_version. What they hold is checked against the
// run's own JSON log: every printed loss and its rate, every validation, at its step.
//
// The page is loaded during a real run by Debian's chromium, headless (tests/live_page.py reads
// the DOM it rendered); what it shows is checked against the run's JSON log, and a screenshot
// is kept in the build tree (tests/artifacts/live-page.png).
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <functional>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/crc32.h"
#include "gtest/gtest.h"
#include "monitoring/tfevents.h"
#include "tests/proc_util.h"
#include "tests/real_data.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::Clock;
using test::ProcResult;
using test::Subprocess;
using test::TempDir;

constexpr const char* kMasterBin = SHMTRAIN_BIN;
constexpr milliseconds kRunTimeout{120'000};
// Debian's Python, which python3-protobuf and python3-crc32c are installed for.
constexpr const char* kPython = "/usr/bin/python3";

// The event files in dir (names starting "events.out.tfevents.").
std::vector<std::string> EventFiles(const std::string& dir) {
  std::vector<std::string> out;
  const ProcResult r = test::RunProcess({"/usr/bin/find", dir, "-maxdepth", "1", "-name",
                                         "events.out.tfevents.*"}, milliseconds{10'000});
  for (const std::string& line : test::SplitLines(r.out)) out.push_back(line);
  return out;
}

// tests/tfevents_decode.py's verdict on a file: its JSON, or a failure with its stderr.
::testing::AssertionResult Decode(const std::string& path, nlohmann::json* out) {
  const ProcResult r = test::RunProcess(
      {kPython, std::string(SHMTRAIN_SOURCE_DIR) + "/tests/tfevents_decode.py", path},
      milliseconds{60'000});
  if (!r.exited || r.exit_code != 0) {
    return ::testing::AssertionFailure() << path << " does not decode: " << r.Describe();
  }
  *out = nlohmann::json::parse(r.out);
  return ::testing::AssertionSuccess();
}

// The points [step, value] of a tag, as (step -> value); a step twice is a failure.
std::map<int64_t, double> Points(const nlohmann::json& decoded, const std::string& tag) {
  std::map<int64_t, double> out;
  if (!decoded["scalars"].contains(tag)) return out;
  for (const auto& p : decoded["scalars"][tag]) {
    EXPECT_TRUE(out.emplace(p[0].get<int64_t>(), p[1].get<double>()).second)
        << tag << ": step " << p[0] << " twice";
  }
  return out;
}

std::vector<std::string> Fashion8Run(const std::string& data, std::vector<std::string> extra) {
  std::vector<std::string> a = {kMasterBin, "train", "--workers", "2", "--data", data,
                                "--task", "classification", "--layers", "64,64,10",
                                "--normalize", "minmax", "--seed", "7", "--lr", "0.2",
                                "--batch", "32", "--val-split", "0.2", "--log-format", "json",
                                "--no-metrics", "--no-progress"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A run of 10^8 steps (the parabola example): stopped by the test.
std::vector<std::string> LongRun(const std::string& mode, int workers,
                                 std::vector<std::string> extra) {
  std::vector<std::string> a = {kMasterBin, "train", "--example", "parabola", "--rows", "5000",
                                "--layers", "1,32,1", "--lr", "0.01", "--steps", "100000000",
                                "--workers", std::to_string(workers), "--mode", mode,
                                "--log-format", "json", "--log-every", "1000", "--no-progress",
                                "--no-metrics"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Decodes dir's one event file until `ready` holds of it (the run writes it as it goes);
// a failure at the deadline.
void WaitForFile(const std::string& dir, const std::function<bool(const nlohmann::json&)>& ready,
                 nlohmann::json* out) {
  const Clock::time_point deadline = Clock::now() + milliseconds{60'000};
  while (Clock::now() < deadline) {
    const std::vector<std::string> files = EventFiles(dir);
    if (files.size() == 1) {
      ASSERT_TRUE(Decode(files[0], out));
      if (ready(*out)) return;
    }
    std::this_thread::sleep_for(milliseconds{300});
  }
  FAIL() << "the event file in " << dir << " never showed what was waited for: " << out->dump();
}

TEST(EventFileFraming, Crc32cAndTheRecordLayout) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  const std::string data = monitoring::FileVersionEvent(1.5);
  const std::string rec = monitoring::TfRecord(data);
  ASSERT_EQ(rec.size(), data.size() + 16);
  uint64_t len = 0;
  uint32_t len_crc = 0, data_crc = 0;
  std::memcpy(&len, rec.data(), 8);
  std::memcpy(&len_crc, rec.data() + 8, 4);
  std::memcpy(&data_crc, rec.data() + 12 + data.size(), 4);
  EXPECT_EQ(len, data.size());
  EXPECT_EQ(len_crc, monitoring::MaskedCrc32c(rec.substr(0, 8)));
  EXPECT_EQ(data_crc, monitoring::MaskedCrc32c(data));
  EXPECT_EQ(rec.substr(12, data.size()), data);
}

TEST(TensorBoard, TheEventFileHoldsWhatTheLogPrintedAtItsSteps) {
  const std::string fashion8 = test::SmallFashionCsv();
  ASSERT_FALSE(fashion8.empty()) << "no data set: the failure above says why";
  TempDir dir;
  const std::string tb = dir.File("tb/run1");  // made with its parent
  const ProcResult r = test::RunProcess(
      Fashion8Run(fashion8, {"--epochs", "3", "--log-every", "7", "--lr-schedule", "cosine",
                             "--tensorboard", tb}),
      kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 0));
  const std::vector<std::string> files = EventFiles(tb);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].find(tb + "/events.out.tfevents."), 0u) << files[0];
  nlohmann::json d;
  ASSERT_TRUE(Decode(files[0], &d));
  EXPECT_EQ(d["file_version"], "brain.Event:2");
  EXPECT_EQ(d["tail_bytes"], 0);

  const auto loss = Points(d, "train/loss"), lr = Points(d, "train/learning_rate");
  const auto steps = test::Events(r.out, "step");
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(loss.size(), steps.size());
  for (const auto& e : steps) {
    const int64_t step = std::stoll(e.at("step"));
    ASSERT_EQ(loss.count(step), 1u) << "no train/loss at step " << step;
    EXPECT_EQ(loss.at(step), static_cast<float>(std::stod(e.at("loss")))) << step;
    EXPECT_EQ(lr.at(step), static_cast<float>(std::stod(e.at("lr")))) << step;
  }
  const auto val_loss = Points(d, "val/loss"), val_acc = Points(d, "val/accuracy");
  const auto vals = test::Events(r.out, "validation");
  ASSERT_EQ(vals.size(), 3u);  // one an epoch
  EXPECT_EQ(val_loss.size(), vals.size());
  for (const auto& e : vals) {
    const int64_t step = std::stoll(e.at("step"));
    ASSERT_EQ(val_acc.count(step), 1u) << "no val/accuracy at step " << step;
    EXPECT_EQ(val_loss.at(step), static_cast<float>(std::stod(e.at("val_loss"))));
    EXPECT_EQ(val_acc.at(step), static_cast<float>(std::stod(e.at("val_accuracy"))));
  }
  // samples/s at least at the end (a point a second besides), at the run's last step.
  const auto rate = Points(d, "train/samples_per_s");
  ASSERT_FALSE(rate.empty());
  const double summary_steps = test::Num(test::SummaryOf(r), "steps");
  EXPECT_EQ(rate.rbegin()->first, static_cast<int64_t>(summary_steps));
  EXPECT_GT(rate.rbegin()->second, 0);
  EXPECT_EQ(Points(d, "workers/restarts").rbegin()->second, 0);
  EXPECT_FALSE(d["scalars"].contains("async/staleness_mean")) << "a sync run has no staleness";
}

// Async: staleness and dropped updates, restarts as workers are killed, all while the run goes
// (the file is read during the run); a SIGKILL of the master leaves only whole records.
TEST(TensorBoard, AsyncRunIsWrittenAsItGoesAndAKilledRunLeavesWholeRecords) {
  TempDir dir;
  Subprocess p(LongRun("async", 3, {"--chaos-kill-every", "0.5s", "--chaos-seed", "3",
                                    "--tensorboard", dir.path()}));
  nlohmann::json d;
  const auto restarted = [](const nlohmann::json& j) {
    // Two flushes at least: the file grows as the run goes.
    return j["scalars"].contains("workers/restarts") && j["scalars"]["workers/restarts"].size() >= 2 &&
           j["scalars"]["workers/restarts"].back()[1].get<double>() >= 2 &&
           j["scalars"].contains("async/staleness_mean") &&
           j["scalars"].contains("train/loss") && j["scalars"].contains("train/samples_per_s");
  };
  ASSERT_NO_FATAL_FAILURE(WaitForFile(dir.path(), restarted, &d));
  const auto tau = Points(d, "async/staleness_mean");
  EXPECT_GT(tau.rbegin()->second, 0) << "3 async workers: some staleness";
  EXPECT_LT(tau.rbegin()->second, 10);
  EXPECT_TRUE(d["scalars"].contains("async/dropped_updates"));
  // Steps go forward, as TensorBoard plots them.
  const auto restarts = Points(d, "workers/restarts");
  EXPECT_GT(restarts.rbegin()->first, restarts.begin()->first);

  ASSERT_TRUE(p.Signal(SIGKILL));
  const ProcResult r = p.Wait(kRunTimeout);
  EXPECT_EQ(r.term_signal, SIGKILL);
  nlohmann::json after;
  ASSERT_TRUE(Decode(EventFiles(dir.path()).at(0), &after));
  EXPECT_EQ(after["tail_bytes"], 0);
  EXPECT_GE(after["records"].get<int>(), d["records"].get<int>());
}

TEST(TensorBoard, ADirectoryThatCannotBeMadeIsRefusedAndNothingIsLeft) {
  const std::string fashion8 = test::SmallFashionCsv();
  ASSERT_FALSE(fashion8.empty());
  TempDir dir;
  const std::string file = dir.Write("a-file", "x");
  const ProcResult r = test::RunProcess(
      Fashion8Run(fashion8, {"--epochs", "1", "--tensorboard", file + "/tb"}), kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 2));
  EXPECT_NE(r.err.find("--tensorboard " + file + "/tb: cannot create the directory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(test::SegmentsOf(r.pid), std::vector<std::string>());
  EXPECT_TRUE(test::Events(r.out, "worker_started").empty()) << "refused before any worker";

  // A run that cannot start (its data file is missing) makes no directory and no file.
  const std::string tb = dir.File("tb");
  const ProcResult bad = test::RunProcess(
      Fashion8Run(dir.File("missing.csv"), {"--epochs", "1", "--tensorboard", tb}), kRunTimeout);
  EXPECT_NE(bad.exit_code, 0);
  struct stat st;
  EXPECT_NE(stat(tb.c_str(), &st), 0) << tb << " was made by a run that could not start";
}

// tests/live_page.py's snapshot of url (its JSON), run on a thread of its own so that the
// caller keeps reading the trainer's output meanwhile.
class PageSnapshot {
 public:
  PageSnapshot(const std::string& url, const std::string& screenshot) {
    std::vector<std::string> argv = {kPython,
                                     std::string(SHMTRAIN_SOURCE_DIR) + "/tests/live_page.py", url};
    if (!screenshot.empty()) argv.insert(argv.end(), {"--screenshot", screenshot});
    thread_ = std::thread([this, argv] {
      result_ = test::RunProcess(argv, milliseconds{60'000});
      done_ = true;
    });
  }
  bool done() const { return done_; }
  // For a failed snapshot's message: whether the trainer still served the page, and what it
  // printed on stderr (a sanitizer's report ends it).
  static std::string TrainerState(Subprocess& trainer) {
    std::string line;
    trainer.ReadLine(&line, milliseconds{0});
    return std::string("; the trainer ") + (trainer.running() ? "still runs" : "has exited") +
           ", its stderr: " + test::Clip(trainer.err());
  }
  // Reads the trainer's output (so that it never blocks on a full pipe) until the snapshot is
  // taken.
  void PumpUntilDone(Subprocess& trainer) {
    std::string line;
    while (!done_) trainer.ReadLine(&line, milliseconds{50});
  }
  ~PageSnapshot() {
    if (thread_.joinable()) thread_.join();
  }
  // Joins; the snapshot, or a failure.
  ::testing::AssertionResult Get(nlohmann::json* out) {
    thread_.join();
    if (!result_.exited || result_.exit_code != 0) {
      return ::testing::AssertionFailure() << "tests/live_page.py: " << result_.Describe();
    }
    const std::string& o = result_.out;
    *out = nlohmann::json::parse(o.substr(0, o.rfind('}') + 1));
    return ::testing::AssertionSuccess();
  }

 private:
  std::thread thread_;
  ProcResult result_;
  std::atomic<bool> done_{false};
};

bool HasPoints(const nlohmann::json& snap, const std::string& series) {
  return snap["series"].contains(series) && snap["series"][series]["points"].get<int>() > 0;
}

// The event of `kind` at `step` in the JSON log; a failure when there is none.
std::map<std::string, std::string> EventAt(const std::string& out, const std::string& kind,
                                           int64_t step) {
  for (const auto& e : test::Events(out, kind)) {
    if (std::stoll(e.at("step")) == step) return e;
  }
  ADD_FAILURE() << "no '" << kind << "' event at step " << step;
  return {};
}

TEST(LivePage, ChromiumShowsTheRunAsItsLogHasIt) {
  const std::string fashion8 = test::SmallFashionCsv();
  ASSERT_FALSE(fashion8.empty());
  std::vector<std::string> args = Fashion8Run(
      fashion8, {"--epochs", "100000", "--eval-every", "40", "--log-every", "20",
                 "--metrics-addr", "127.0.0.1:0"});
  args.erase(std::find(args.begin(), args.end(), "--no-metrics"));
  Subprocess p(args);
  std::string line, url;
  const Clock::time_point deadline = Clock::now() + milliseconds{90'000};
  while (url.empty() && p.ReadLine(&line, milliseconds{30'000})) {
    if (const auto ev = test::ParseFlatJson(line); ev && ev->at("event") == "metrics") {
      url = "http://" + ev->at("address") + "/";
    }
  }
  ASSERT_FALSE(url.empty()) << "no metrics event: " << p.err();
  // Until the page shows every curve (the run validates every 40 steps).
  nlohmann::json snap;
  for (;;) {
    PageSnapshot page(url, "");
    page.PumpUntilDone(p);
    ASSERT_TRUE(page.Get(&snap)) << PageSnapshot::TrainerState(p);
    if (snap["ready"] == true && HasPoints(snap, "train") && HasPoints(snap, "val") &&
        HasPoints(snap, "rate")) {
      break;
    }
    ASSERT_LT(Clock::now(), deadline) << "the page never showed every curve: " << snap.dump();
  }
  ::mkdir(SHMTRAIN_TEST_ARTIFACTS, 0755);
  const std::string png = std::string(SHMTRAIN_TEST_ARTIFACTS) + "/live-page.png";
  PageSnapshot shot(url, png);
  shot.PumpUntilDone(p);
  nlohmann::json shown;
  ASSERT_TRUE(shot.Get(&shown)) << PageSnapshot::TrainerState(p);
  struct stat st;
  ASSERT_EQ(stat(png.c_str(), &st), 0);
  EXPECT_GT(st.st_size, 10'000) << png;

  ASSERT_TRUE(p.Signal(SIGINT));
  const ProcResult r = p.Wait(kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 130));
  // What the page showed is what the log printed, at the same steps, to the bit.
  EXPECT_EQ(snap["state"], "running");
  EXPECT_EQ(snap["connection"], "live");
  const auto train = snap["series"]["train"]["last"];
  EXPECT_EQ(train[1].get<double>(),
            std::stod(EventAt(r.out, "step", train[0].get<int64_t>())["loss"]));
  const auto val = snap["series"]["val"]["last"], metric = snap["series"]["metric"]["last"];
  const auto v = EventAt(r.out, "validation", val[0].get<int64_t>());
  EXPECT_EQ(val[1].get<double>(), std::stod(v.at("val_loss")));
  EXPECT_EQ(metric[1].get<double>(), std::stod(v.at("val_accuracy")));
  EXPECT_EQ(snap["series"]["val"]["points"], snap["series"]["metric"]["points"]);
  EXPECT_GE(snap["step"].get<int64_t>(), train[0].get<int64_t>());
  // The workers: both up, with the pids the log announced.
  const std::vector<pid_t> pids = test::StartedWorkers(r.out);
  ASSERT_EQ(snap["workers"].size(), 2u) << snap.dump();
  for (const auto& w : snap["workers"]) {
    EXPECT_EQ(w["state"], "up");
    EXPECT_EQ(w["pid"].get<pid_t>(), pids.at(w["worker"].get<size_t>()));
  }
  EXPECT_FALSE(snap["series"].contains("staleness")) << "a sync run has no staleness chart";
}

// ---------------------------------------------------------------------------------------------
// The terminal: under a pseudo-terminal (script(1)) the live line updates in place and each
// epoch's line stays; through a pipe, plain lines only, one per epoch (epochs shorter than a
// second fold into the next line), and the log on stdout as before.

// A run of 4 epochs of a second or more each in the normal build (1.5 s on a quiet Zen 4
// core pair): at least 2 lines stay even on a machine twice as fast.
std::vector<std::string> EpochRun(const std::vector<std::string>& extra,
                                  const std::string& rows = test::UnlessSanitized<std::string>(
                                      "150000", "20000")) {
  std::vector<std::string> a = {kMasterBin, "train", "--example", "parabola", "--rows", rows,
                                "--layers", "1,256,256,1", "--batch", "100", "--lr", "0.001",
                                "--epochs", "4", "--workers", "2", "--log-every", "500",
                                "--no-metrics"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The epochs the lines that stay cover, in order: "epoch 3/4" is {3, 3}, "epochs 1-2/4" {1, 2}.
std::vector<std::pair<int, int>> EpochLines(const std::string& text) {
  std::vector<std::pair<int, int>> out;
  for (std::string line : test::SplitLines(text)) {
    while (!line.empty() && line.back() == '\r') line.pop_back();  // a terminal's "\r\n"
    const size_t cr = line.rfind('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    if (line.rfind("\033[K", 0) == 0) line = line.substr(3);
    int a = 0, b = 0, n = 0;
    if (std::sscanf(line.c_str(), "epochs %d-%d/%d ", &a, &b, &n) == 3 ||
        (std::sscanf(line.c_str(), "epoch %d/%d ", &a, &n) == 2 && (b = a) > 0)) {
      // A line that stays ends with its samples/s and seconds, not an ETA.
      if (line.find("ETA") == std::string::npos) out.emplace_back(a, b);
    }
  }
  return out;
}

void ExpectEveryEpochOnce(const std::vector<std::pair<int, int>>& lines, const std::string& text) {
  ASSERT_FALSE(lines.empty()) << text;
  int next = 1;
  for (const auto& [a, b] : lines) {
    EXPECT_EQ(a, next) << text;
    next = b + 1;
  }
  EXPECT_EQ(next, 5) << "the last line is epoch 4/4:\n" << text;
}

TEST(Terminal, ThroughAPipePlainLinesOnlyOnePerEpoch) {
  const ProcResult r = test::RunProcess(EpochRun({}), kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 0));
  for (const std::string* s : {&r.out, &r.err}) {
    for (char c : *s) {
      ASSERT_TRUE(c == '\n' || (c >= 0x20 && c != 0x7f) || (c & 0x80))
          << "control character " << int(c) << " in a pipe:\n" << *s;
    }
  }
  const auto lines = EpochLines(r.err);
  ExpectEveryEpochOnce(lines, r.err);
  EXPECT_GE(lines.size(), 2u) << "epochs of a second or more each have a line:\n" << r.err;
  // The last line ends the run (alone, or folded with the epoch before it).
  const std::string steps = test::UnlessSanitized<std::string>("6000", "800");  // rows / 100 * 4
  EXPECT_NE(r.err.find("4/4  step " + steps + "/" + steps + "  loss "), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("ETA"), std::string::npos) << "no live line in a pipe:\n" << r.err;
  // The log on stdout is as before: the loss lines.
  EXPECT_NE(r.out.find("step 500 loss "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("epoch"), std::string::npos) << r.out;

  const ProcResult quiet = test::RunProcess(EpochRun({"--no-progress"}, "20000"), kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(quiet, 0));
  EXPECT_TRUE(EpochLines(quiet.err).empty()) << quiet.err;
}

TEST(Terminal, UnderAPseudoTerminalTheLiveLineUpdatesAndEachEpochsLineStays) {
  std::string cmd;
  for (const std::string& a : EpochRun({})) cmd += "'" + a + "' ";
  // script(1) (util-linux, in every Debian) runs the command on a pseudo-terminal: both stdout
  // and stderr are a terminal, as in an interactive shell.
  const ProcResult r = test::RunProcess({"/usr/bin/script", "-qfec", cmd, "/dev/null"}, kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 0));
  // The live line: rewritten in place (carriage return, erase line), with an ETA.
  EXPECT_NE(r.out.find("\r\033[Kepoch 1/4  step "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ETA "), std::string::npos) << r.out;
  ExpectEveryEpochOnce(EpochLines(r.out), r.out);
  // It is cleared before the run's last lines: nothing after the summary's line but its end.
  const size_t last = r.out.rfind("\r\033[K");
  ASSERT_NE(last, std::string::npos);
  EXPECT_NE(r.out.find('\n', last), std::string::npos) << "a live line was left standing";
}

}  // namespace
}  // namespace shmtrain
