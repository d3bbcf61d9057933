// A relaunched job seen from outside (shmtrain/relaunch.h): SHMTRAIN_RELAUNCH read into its
// struct, every malformed value refused by name; then real runs of `shmtrain train` with the
// variable set, resumed from a checkpoint as `shmtrain launch` resumes the survivors: the
// counter on /metrics, the TensorBoard scalar (decoded by tests/tfevents_decode.py), the live
// page's marks in headless chromium (tests/live_page.py), and the log's line.
#include "shmtrain/relaunch.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::Clock;
using test::ProcResult;
using test::Subprocess;
using test::TempDir;

constexpr const char* kMasterBin = SHMTRAIN_BIN;
constexpr const char* kPython = "/usr/bin/python3";
constexpr milliseconds kRunTimeout{120'000};

constexpr const char* kExample =
    R"j({"relaunches":2,"reason":"host_died","reasons":{"host_died":1,"host_silent":1},)j"
    R"j("lost":["host 1 (node-b)"],"step":412})j";

// ---------------------------------------------------------------------------------------------
// The variable's value.

TEST(RelaunchParse, UnsetOrEmptyIsNoRelaunch) {
  Relaunch r;
  r.relaunches = 5;
  ASSERT_TRUE(ParseRelaunch("", &r).ok());
  EXPECT_FALSE(r.active());
  EXPECT_EQ(r.reasons[0] + r.reasons[1], 0);
  test::ScopedEnv unset(kRelaunchEnv, "");
  unsetenv(kRelaunchEnv);
  r.relaunches = 5;
  ASSERT_TRUE(RelaunchFromEnvironment(&r).ok());
  EXPECT_FALSE(r.active());
}

TEST(RelaunchParse, TheLaunchersValueAndItsTexts) {
  Relaunch r;
  const Status s = ParseRelaunch(kExample, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(r.active());
  EXPECT_EQ(r.relaunches, 2);
  EXPECT_EQ(r.reason, RelaunchReason::kHostDied);
  EXPECT_EQ(r.reasons[static_cast<int>(RelaunchReason::kHostDied)], 1);
  EXPECT_EQ(r.reasons[static_cast<int>(RelaunchReason::kHostSilent)], 1);
  EXPECT_EQ(r.lost, std::vector<std::string>{"host 1 (node-b)"});
  EXPECT_EQ(r.step, 412);
  EXPECT_EQ(r.Line(), "relaunch 2 (host_died): host 1 (node-b) lost; continuing from step 412");
  EXPECT_EQ(r.Label(), "relaunch 2: host 1 (node-b) lost");
  // What a launcher writes reads back the same.
  Relaunch back;
  ASSERT_TRUE(ParseRelaunch(RelaunchJson(r), &back).ok()) << RelaunchJson(r);
  EXPECT_EQ(RelaunchJson(back), RelaunchJson(r));
  EXPECT_EQ(nlohmann::json::parse(RelaunchJson(r)), nlohmann::json::parse(kExample));
  // Several hosts lost; a reason left out of "reasons" counts 0; members it does not know
  // are ignored.
  ASSERT_TRUE(ParseRelaunch(R"j({"relaunches":1,"reason":"host_silent","reasons":)j"
                            R"j({"host_silent":1},"lost":["host 1 (b)","host 2 (c)"],)j"
                            R"j("step":0,"by":"launch 0.9"})j",
                            &r)
                  .ok());
  EXPECT_EQ(r.reason, RelaunchReason::kHostSilent);
  EXPECT_EQ(r.reasons[static_cast<int>(RelaunchReason::kHostDied)], 0);
  EXPECT_EQ(r.Line(),
            "relaunch 1 (host_silent): host 1 (b), host 2 (c) lost; continuing from "
            "step 0");
}

// Each malformed value: kUsage (exit 2), naming the variable and what is wrong; the struct
// untouched.
TEST(RelaunchParse, EveryMalformedValueIsRefusedByName) {
  const auto with = [](const std::string& key, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(kExample);
    j[key] = nlohmann::json::parse(value);
    return j.dump();
  };
  const auto without = [](const std::string& key) {
    nlohmann::json j = nlohmann::json::parse(kExample);
    j.erase(key);
    return j.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"relaunches\":2", "not valid JSON"},
      {"relaunch 2", "not valid JSON"},
      {"[1,2]", "must be a JSON object, got [1,2]"},
      {"412", "must be a JSON object"},
      {without("relaunches"), "\"relaunches\" is missing"},
      {without("reason"), "\"reason\" is missing"},
      {without("reasons"), "\"reasons\" is missing"},
      {without("lost"), "\"lost\" is missing"},
      {without("step"), "\"step\" is missing"},
      {with("relaunches", "\"2\""), "\"relaunches\" must be an integer >= 1, got \"2\""},
      {with("relaunches", "2.0"), "\"relaunches\" must be an integer >= 1, got 2.0"},
      {with("relaunches", "0"), "\"relaunches\" must be an integer >= 1, got 0"},
      {with("relaunches", "18446744073709551615"), "\"relaunches\" must be an integer >= 1"},
      {with("reason", "1"), "\"reason\" must be one of host_died, host_silent, got 1"},
      {with("reason", "\"host_gone\""), "\"reason\" must be one of host_died, host_silent"},
      {with("reasons", "[1,1]"), "\"reasons\" must be an object of counts by reason"},
      {with("reasons", R"j({"host_died":1,"host_gone":1})j"), "unknown reason \"host_gone\""},
      {with("reasons", R"j({"host_died":"1","host_silent":1})j"),
       "\"reasons\".host_died must be an integer >= 0, got \"1\""},
      {with("reasons", R"j({"host_died":3,"host_silent":-1})j"),
       "\"reasons\".host_silent must be an integer >= 0, got -1"},
      {with("reasons", R"j({"host_died":1,"host_silent":2})j"),
       "the counts of \"reasons\" sum to 3, not to \"relaunches\" (2)"},
      {with("reasons", R"j({"host_silent":2})j"), "counts no relaunch of this one's reason"},
      {with("lost", "\"host 1 (node-b)\""), "\"lost\" must be a non-empty array of host names"},
      {with("lost", "[]"), "\"lost\" must be a non-empty array of host names, got []"},
      {with("lost", "[1]"), "\"lost\": every entry must be a non-empty string, got 1"},
      {with("lost", "[\"\"]"), "\"lost\": every entry must be a non-empty string"},
      {with("step", "-1"), "\"step\" must be an integer >= 0, got -1"},
      {with("step", "\"412\""), "\"step\" must be an integer >= 0, got \"412\""},
      {with("step", "null"), "\"step\" must be an integer >= 0, got null"},
  };
  for (const auto& [value, why] : cases) {
    Relaunch r;
    r.relaunches = 7;
    const Status s = ParseRelaunch(value, &r);
    EXPECT_EQ(s.code(), Status::Code::kUsage) << value;
    EXPECT_EQ(s.exit_code(), kExitUsage) << value;
    EXPECT_EQ(s.message().rfind(std::string(kRelaunchEnv) + ": ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(why), std::string::npos)
        << value << "\n  said: " << s.message() << "\n  wanted: " << why;
    EXPECT_EQ(r.relaunches, 7) << "a refused value leaves the struct as it was: " << value;
  }
}

// ---------------------------------------------------------------------------------------------
// Real runs.

// A run of 10^8 steps of the parabola example (stopped by the test), json log.
std::vector<std::string> LongRun(std::vector<std::string> extra) {
  std::vector<std::string> a = {
      kMasterBin,     "train", "--example",   "parabola", "--rows",       "5000",      "--layers",
      "1,32,1",       "--lr",  "0.01",        "--steps",  "100000000",    "--workers", "2",
      "--log-format", "json",  "--log-every", "20000",    "--no-progress"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The metrics endpoint's address from the run's "metrics" event; "" when none came.
std::string MetricsAddress(Subprocess& p) {
  std::string line;
  while (p.ReadLine(&line, milliseconds{30'000})) {
    if (const auto ev = test::ParseFlatJson(line); ev && ev->at("event") == "metrics") {
      return ev->at("address");
    }
  }
  return "";
}

// shmtrain_relaunches_total by reason (and its TYPE and HELP lines) from one scrape.
struct RelaunchSeries {
  std::map<std::string, double> by_reason;
  bool typed = false, helped = false;
};

RelaunchSeries ScrapeRelaunches(const std::string& addr) {
  RelaunchSeries out;
  std::string error;
  const auto r = test::HttpGet(addr, "/metrics", milliseconds{5'000}, &error);
  EXPECT_TRUE(r && r->status == 200) << error;
  if (!r) return out;
  for (const std::string& line : test::SplitLines(r->body)) {
    out.typed |= line == "# TYPE shmtrain_relaunches_total counter";
    out.helped |= line.rfind("# HELP shmtrain_relaunches_total ", 0) == 0;
    test::Sample s;
    if (line.empty() || line[0] == '#' || !test::ParseSampleLine(line, &s)) continue;
    if (s.name != "shmtrain_relaunches_total") continue;
    EXPECT_EQ(s.labels.at("host"), "0") << line;
    out.by_reason[s.labels.at("reason")] = s.value;
  }
  return out;
}

// The run's JSON events of kind `event`, parsed whole (their arrays too).
std::vector<nlohmann::json> JsonEvents(const std::string& out, const std::string& event) {
  std::vector<nlohmann::json> found;
  for (const std::string& line : test::SplitLines(out)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("event", "") == event) found.push_back(j);
  }
  return found;
}

// Stops the run with SIGINT and returns how it ended (exit 130).
ProcResult Interrupt(Subprocess& p) {
  EXPECT_TRUE(p.Signal(SIGINT));
  const ProcResult r = p.Wait(kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(r, 130));
  return r;
}

// tests/live_page.py's snapshot of url, taken on a thread while the caller keeps reading the
// trainer's output.
::testing::AssertionResult PageSnapshot(const std::string& url, Subprocess& trainer,
                                        nlohmann::json* out) {
  std::atomic<bool> done{false};
  ProcResult result;
  std::thread shot([&] {
    result = test::RunProcess({kPython, std::string(SHMTRAIN_SOURCE_DIR) + "/tests/live_page.py",
                               url, "--ready-within", "60"},
                              milliseconds{120'000});
    done = true;
  });
  std::string line;
  while (!done) trainer.ReadLine(&line, milliseconds{50});
  shot.join();
  if (!result.exited || result.exit_code != 0) {
    return ::testing::AssertionFailure() << "tests/live_page.py: " << result.Describe();
  }
  *out = nlohmann::json::parse(result.out.substr(0, result.out.rfind('}') + 1));
  return ::testing::AssertionSuccess();
}

// The event file in dir decoded by tests/tfevents_decode.py (as TensorBoard reads it).
::testing::AssertionResult DecodeEvents(const std::string& dir, nlohmann::json* out) {
  const ProcResult files =
      test::RunProcess({"/usr/bin/find", dir, "-maxdepth", "1", "-name", "events.out.tfevents.*"},
                       milliseconds{10'000});
  const std::vector<std::string> paths = test::SplitLines(files.out);
  if (paths.size() != 1) {
    return ::testing::AssertionFailure() << paths.size() << " event files in " << dir;
  }
  const ProcResult r = test::RunProcess(
      {kPython, std::string(SHMTRAIN_SOURCE_DIR) + "/tests/tfevents_decode.py", paths[0]},
      milliseconds{60'000});
  if (!r.exited || r.exit_code != 0) {
    return ::testing::AssertionFailure() << paths[0] << " does not decode: " << r.Describe();
  }
  *out = nlohmann::json::parse(r.out);
  return ::testing::AssertionSuccess();
}

TEST(RelaunchRun, ARunThatIsNoRelaunchServesBothReasonsAtZero) {
  Subprocess p(LongRun({"--metrics-addr", "127.0.0.1:0"}));
  const std::string addr = MetricsAddress(p);
  ASSERT_FALSE(addr.empty()) << p.err();
  const RelaunchSeries got = ScrapeRelaunches(addr);
  EXPECT_TRUE(got.typed);
  EXPECT_TRUE(got.helped);
  EXPECT_EQ(got.by_reason, (std::map<std::string, double>{{"host_died", 0}, {"host_silent", 0}}));
  nlohmann::json snap;
  ASSERT_TRUE(PageSnapshot("http://" + addr + "/", p, &snap)) << p.err();
  EXPECT_EQ(snap["ready"], true) << snap.dump();
  EXPECT_EQ(snap["marks"], nlohmann::json::array()) << "no mark on the charts";
  EXPECT_EQ(snap["header"]["relaunch"], "") << snap.dump();
  const ProcResult r = Interrupt(p);
  EXPECT_EQ(r.out.find("\"event\":\"relaunched\""), std::string::npos) << "not a relaunch";
}

TEST(RelaunchRun, AMalformedValueEndsTheRunBeforeAnythingStarts) {
  TempDir dir;
  test::ScopedEnv env(kRelaunchEnv, R"j({"relaunches":2,"reason":"host_died"})j");
  const std::string tb = dir.File("tb");
  // A short run: were the value taken, it would end at once with 0.
  std::vector<std::string> args =
      LongRun({"--metrics-addr", "127.0.0.1:0", "--tensorboard", tb, "--steps", "50"});
  args.erase(std::find(args.begin(), args.end(), "100000000") - 1,
             std::find(args.begin(), args.end(), "100000000") + 1);
  const ProcResult r = test::RunProcess(args, kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 2));
  EXPECT_FALSE(JsonEvents(r.out, "error").empty()) << r.out;
  EXPECT_NE(r.err.find("SHMTRAIN_RELAUNCH: \"reasons\" is missing"), std::string::npos) << r.err;
  EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << "refused before any worker";
  EXPECT_EQ(r.out.find("\"event\":\"metrics\""), std::string::npos) << "no endpoint either";
  EXPECT_EQ(test::SegmentsOf(r.pid), std::vector<std::string>());
  struct stat st;
  EXPECT_NE(stat(tb.c_str(), &st), 0) << "no event file's directory";
}

// A job stopped at some step (its checkpoint, as a host's stop leaves it), relaunched from
// that checkpoint with SHMTRAIN_RELAUNCH naming its step: every watcher sees the relaunch.
TEST(RelaunchRun, ARelaunchedRunShowsItsRelaunchToEveryWatcher) {
  TempDir dir;
  const std::string ckpt = dir.File("ckpt");
  {
    Subprocess first(LongRun({"--no-metrics", "--checkpoint", ckpt}));
    std::string line;
    ASSERT_TRUE(first.ReadLine(&line, milliseconds{30'000}));
    while (first.ReadLine(&line, milliseconds{30'000})) {
      if (line.find("\"event\":\"step\"") != std::string::npos) break;  // a printed loss
    }
    Interrupt(first);
  }
  const int64_t step = test::CheckpointStep(ckpt);
  ASSERT_GT(step, 0) << "the stop wrote no checkpoint";
  nlohmann::json value = nlohmann::json::parse(kExample);
  value["step"] = step;
  test::ScopedEnv env(kRelaunchEnv, value.dump().c_str());
  const std::string tb = dir.File("tb");
  Subprocess p(LongRun({"--metrics-addr", "127.0.0.1:0", "--resume", ckpt, "--tensorboard", tb}));
  const std::string addr = MetricsAddress(p);
  ASSERT_FALSE(addr.empty()) << p.err();

  // Prometheus: the launcher's counts, a counter with its help.
  const RelaunchSeries got = ScrapeRelaunches(addr);
  EXPECT_TRUE(got.typed);
  EXPECT_TRUE(got.helped);
  EXPECT_EQ(got.by_reason, (std::map<std::string, double>{{"host_died", 1}, {"host_silent", 1}}));

  // The page: a mark at the step in every line chart, drawn where the chart has points, and
  // the header's line.
  const std::string label = "relaunch 2: host 1 (node-b) lost";
  const std::string said =
      "relaunch 2 (host_died): host 1 (node-b) lost; continuing from step " + std::to_string(step);
  nlohmann::json snap;
  const Clock::time_point deadline = Clock::now() + milliseconds{60'000};
  for (;;) {
    ASSERT_TRUE(PageSnapshot("http://" + addr + "/", p, &snap)) << p.err();
    const auto points = [&](const char* s) {
      return snap["series"].contains(s) && snap["series"][s]["points"].get<int>() > 0;
    };
    if (snap["ready"] == true && points("train") && points("rate")) break;
    ASSERT_LT(Clock::now(), deadline) << "the page never drew the curves: " << snap.dump();
  }
  EXPECT_EQ(snap["header"]["relaunch"], said) << snap.dump();
  std::map<std::string, nlohmann::json> marks;
  for (const auto& m : snap["marks"]) marks[m["chart"].get<std::string>()] = m;
  ASSERT_EQ(marks.size(), 3u) << snap["marks"].dump();
  for (const char* chart : {"chart-loss", "chart-metric", "chart-rate"}) {
    const nlohmann::json& m = marks[chart];
    EXPECT_EQ(m["kind"], "relaunch") << chart;
    EXPECT_EQ(m["step"], step) << chart;
    EXPECT_EQ(m["label"], label) << chart;
  }
  EXPECT_EQ(marks["chart-loss"]["drawn"], true);
  EXPECT_EQ(marks["chart-rate"]["drawn"], true);
  EXPECT_GT(snap["series"]["train"]["last"][0].get<int64_t>(), step) << snap.dump();

  // TensorBoard: the scalar at the step, once (the file is flushed every 2 s).
  nlohmann::json events;
  const Clock::time_point tb_deadline = Clock::now() + milliseconds{30'000};
  for (;;) {
    ASSERT_TRUE(DecodeEvents(tb, &events));
    if (events["scalars"].contains("train/loss")) break;  // a flush after the start
    ASSERT_LT(Clock::now(), tb_deadline) << events.dump();
    std::this_thread::sleep_for(milliseconds{300});
  }
  EXPECT_EQ(events["scalars"]["hosts/relaunches"], nlohmann::json::array({{step, 2.0}}))
      << events["scalars"].dump();

  // The log: one event, with the launcher's fields.
  const ProcResult r = Interrupt(p);
  const std::vector<nlohmann::json> lines = JsonEvents(r.out, "relaunched");
  ASSERT_EQ(lines.size(), 1u) << test::Clip(r.out);
  EXPECT_EQ(lines[0]["relaunches"], 2);
  EXPECT_EQ(lines[0]["reason"], "host_died");
  EXPECT_EQ(lines[0]["lost"], nlohmann::json::array({"host 1 (node-b)"}));
  EXPECT_EQ(lines[0]["step"], step);
  ASSERT_TRUE(DecodeEvents(tb, &events));
  EXPECT_EQ(events["scalars"]["hosts/relaunches"].size(), 1u) << "written once";
}

// The text log says it in one line, on stderr as every diagnostic (stdout is the training's log).
TEST(RelaunchRun, TheTextLogSaysItInOneLine) {
  test::ScopedEnv env(kRelaunchEnv, kExample);
  const ProcResult r =
      test::RunProcess({kMasterBin, "train", "--example", "parabola", "--layers", "1,5,1", "--lr",
                        "0.01", "--steps", "50", "--workers", "2", "--no-metrics", "--no-progress"},
                       kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 0));
  int said = 0;
  for (const std::string& line : test::SplitLines(r.err)) {
    said += line == "relaunch 2 (host_died): host 1 (node-b) lost; continuing from step 412";
  }
  EXPECT_EQ(said, 1) << r.err;
  EXPECT_EQ(r.out.find("relaunch"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shmtrain
