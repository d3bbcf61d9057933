// Runs that must never be lost or end in silent garbage, through the real CLI.
//
//  - Every stop signal (not only SIGINT/SIGTERM) stops the workers, writes the checkpoint,
//    removes the segment and exits 128 + n.
//  - Output paths (--save, --checkpoint, predict --out) are checked before anything starts:
//    a bad one is exit 2 at once, never after the training it would lose.
//  - A checkpoint that fails mid-run is logged, counted on the metrics endpoint and retried;
//    the run goes on.
//  - Divergence (a non-finite loss or gradient) ends the run with exit 5 naming the step, and
//    writes no model.
//  - An exception in the master goes through the normal cleanup: exit 1 with the message,
//    workers gone, segment removed.
//  - The live progress line (on a terminal) shows the current loss whatever --log-every is.
//  - Early stopping names the model it keeps, and that is the one the summary reports.
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/proc_util.h"
#include "tests/real_data.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::ProcResult;
using test::Subprocess;
using test::TempDir;

constexpr const char* kBin = SHMTRAIN_BIN;
// Generous: sanitizer builds under ctest -j2 are many times slower. A hang still fails.
constexpr milliseconds kRunTimeout{120'000};

// A sync run on the parabola that goes on far longer than any test waits for.
std::vector<std::string> LongRun(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {kBin,           "train",      "--example", "parabola",
                                "--layers",     "1,5,1",      "--lr",      "0.01",
                                "--steps",      "1000000000", "--workers", "2",
                                "--no-metrics", "--log-format", "json",    "--init", "normal"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Reads stdout lines until one is a JSON event `event` (then returns it) or the deadline.
std::string WaitForEvent(Subprocess& p, const std::string& event, milliseconds timeout) {
  const auto deadline = test::Clock::now() + timeout;
  std::string line;
  while (test::Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - test::Clock::now());
    if (!p.ReadLine(&line, left)) break;
    if (test::JsonField(line, "event") == event) return line;
  }
  return "";
}

std::vector<pid_t> WorkerPids(const std::string& out) {
  std::vector<pid_t> pids;
  for (const std::string& l : test::SplitLines(out)) {
    if (test::JsonField(l, "event") == "worker_started") {
      pids.push_back(static_cast<pid_t>(std::stol(*test::JsonField(l, "pid"))));
    }
  }
  return pids;
}

void ExpectCleanedUp(const ProcResult& r) {
  EXPECT_TRUE(test::SegmentsOf(r.pid).empty()) << "segment left behind";
  for (const pid_t w : WorkerPids(r.out)) {
    EXPECT_TRUE(test::WaitPidGone(w, milliseconds(5000))) << "worker " << w << " left behind";
  }
}

// ---------------------------------------------------------------------------------------------
// Stop signals.

class StopSignal : public ::testing::TestWithParam<int> {};

TEST_P(StopSignal, CheckpointsRemovesTheSegmentAndExits128PlusN) {
  const int sig = GetParam();
  TempDir dir;
  const std::string ck = dir.File("ck.bin");
  Subprocess p(LongRun({"--checkpoint", ck, "--log-every", "1000"}));
  // Training is under way once a step is logged.
  ASSERT_FALSE(WaitForEvent(p, "step", kRunTimeout).empty()) << p.err();
  ASSERT_TRUE(p.Signal(sig));
  const ProcResult r = p.Wait(kRunTimeout);
  ASSERT_TRUE(r.exited) << r.Describe();
  EXPECT_EQ(r.exit_code, 128 + sig) << r.Describe();
  EXPECT_NE(r.err.find(std::string("stopped by SIG") + sigabbrev_np(sig)), std::string::npos)
      << r.err;
  EXPECT_TRUE(test::FileExists(ck)) << "no checkpoint written on SIG" << sigabbrev_np(sig);
  ExpectCleanedUp(r);
}

INSTANTIATE_TEST_SUITE_P(EverySignal, StopSignal,
                         ::testing::Values(SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGPIPE,
                                           SIGINT, SIGTERM),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string("SIG") + sigabbrev_np(i.param);
                         });

// ---------------------------------------------------------------------------------------------
// Output paths, checked before anything starts.

struct BadOutput {
  std::string name;
  std::vector<std::string> flags;  // {flag, path-template}; "@" is the temp dir
  std::string message;             // expected in stderr
};

std::string Expand(const std::string& s, const TempDir& dir) {
  std::string out = s;
  for (size_t at; (at = out.find('@')) != std::string::npos;) out.replace(at, 1, dir.path());
  return out;
}

TEST(OutputPaths, BadTrainOutputsAreRefusedBeforeTraining) {
  TempDir dir;
  const std::string data = dir.Write("data.csv", "0.1,1\n0.2,2\n0.3,3\n");
  std::filesystem::create_directory(dir.File("sub"));
  const std::vector<BadOutput> cases = {
      {"missing directory", {"--save", "@/nonexistent/x.bin"}, "does not exist"},
      {"a directory", {"--save", "@/sub"}, "is a directory"},
      {"a directory with slash", {"--save", "@/sub/"}, "directory"},
      {"the data file", {"--save", "@/data.csv"}, "same file as --data"},
      {"checkpoint missing directory", {"--checkpoint", "@/none/ck.bin"}, "does not exist"},
      {"checkpoint is the data", {"--checkpoint", "@/data.csv"}, "same file as --data"},
      {"save equals checkpoint", {"--save", "@/m.bin", "--checkpoint", "@/m.bin"},
       "same file as --checkpoint"},
  };
  for (const BadOutput& c : cases) {
    std::vector<std::string> argv = {kBin,       "train",      "--data",      data,
                                     "--layers", "1,2,1",      "--lr",        "0.01",
                                     "--steps",  "1000000000", "--no-metrics"};
    for (const std::string& f : c.flags) argv.push_back(Expand(f, dir));
    // A run of 10^9 steps would outlive the deadline: only a refusal up front passes.
    const ProcResult r = test::RunProcess(argv, milliseconds(30'000));
    EXPECT_TRUE(r.exited && r.exit_code == 2) << c.name << ": " << r.Describe();
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.name << ": " << r.err;
    EXPECT_TRUE(test::SegmentsOf(r.pid).empty()) << c.name;
  }
}

TEST(OutputPaths, ReadOnlyFileSystemIsRefused) {
  // /proc is read-only for everyone, root included (access() would not tell for root).
  const ProcResult r = test::RunProcess(
      {kBin, "example", "parabola", "--no-metrics", "--save", "/proc/shmtrain-model.bin"},
      milliseconds(30'000));
  EXPECT_TRUE(r.exited && r.exit_code == 2) << r.Describe();
  EXPECT_NE(r.err.find("--save /proc/shmtrain-model.bin: cannot create files"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("done:"), std::string::npos) << "trained before refusing:\n" << r.out;
}

TEST(OutputPaths, PredictNeverOverwritesItsInputs) {
  TempDir dir;
  const std::string data = dir.Write("data.csv", "0.1,1\n0.2,2\n0.3,3\n0.4,4\n");
  const std::string model = dir.File("m.bin");
  const ProcResult t = test::RunProcess({kBin, "train", "--data", data, "--layers", "1,2,1",
                                         "--lr", "0.01", "--steps", "10", "--no-metrics",
                                         "--save", model},
                                        kRunTimeout);
  ASSERT_TRUE(t.exited && t.exit_code == 0) << t.Describe();
  const std::string model_bytes = test::ReadWholeFile(model);
  const std::string data_bytes = test::ReadWholeFile(data);
  struct Case {
    std::string out, message;
  };
  for (const Case& c : {Case{model, "same file as --model"}, Case{data, "same file as --data"},
                        Case{dir.File("none/p.csv"), "does not exist"},
                        Case{dir.path(), "is a directory"}}) {
    const ProcResult r = test::RunProcess(
        {kBin, "predict", "--model", model, "--data", data, "--out", c.out}, kRunTimeout);
    EXPECT_TRUE(r.exited && r.exit_code == 2) << c.out << ": " << r.Describe();
    EXPECT_NE(r.err.find("--out " + c.out + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  EXPECT_EQ(test::ReadWholeFile(model), model_bytes) << "predict overwrote the model";
  EXPECT_EQ(test::ReadWholeFile(data), data_bytes) << "predict overwrote the data";
}

TEST(OutputPaths, PredictQuotesClassNamesAsCsvFields) {
  // Labels the loader accepts quoted ("cat, black") must come out as well-formed CSV.
  TempDir dir;
  const std::string data =
      dir.Write("pets.csv", "x,y\n0.1,\"cat, black\"\n0.2,\"cat, black\"\n0.8,\"say \"\"hi\"\"\"\n"
                            "0.9,\"say \"\"hi\"\"\"\n");
  const std::string model = dir.File("m.bin"), out = dir.File("p.csv");
  const ProcResult t = test::RunProcess({kBin, "train", "--data", data, "--layers", "1,2",
                                         "--task", "classification", "--lr", "0.5", "--steps",
                                         "200", "--no-metrics", "--save", model},
                                        kRunTimeout);
  ASSERT_TRUE(t.exited && t.exit_code == 0) << t.Describe();
  const ProcResult p = test::RunProcess(
      {kBin, "predict", "--model", model, "--data", data, "--out", out}, kRunTimeout);
  ASSERT_TRUE(p.exited && p.exit_code == 0) << p.Describe();
  const std::vector<std::string> lines = test::SplitLines(test::ReadWholeFile(out));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "class,\"p_cat, black\",\"p_say \"\"hi\"\"\"");
  EXPECT_EQ(lines[1].rfind("\"cat, black\",", 0), 0u) << lines[1];
  EXPECT_EQ(lines[4].rfind("\"say \"\"hi\"\"\",", 0), 0u) << lines[4];
}

// ---------------------------------------------------------------------------------------------
// A checkpoint that fails mid-run.

// The value of the sample `name` (labelled with its host only, host="0") in a scrape of
// http://addr/metrics, or NaN.
double ScrapeValue(const std::string& addr, const std::string& name) {
  const ProcResult r = test::RunProcess(
      {"/usr/bin/env", "python3", "-c",
       "import sys, urllib.request\n"
       "print(urllib.request.urlopen('http://' + sys.argv[1] + '/metrics', timeout=5)"
       ".read().decode())",
       addr},
      milliseconds(20'000));
  const std::string tag = name + "{host=\"0\"} ";
  for (const std::string& l : test::SplitLines(r.out)) {
    if (l.rfind(tag, 0) == 0) return std::stod(l.substr(tag.size()));
  }
  return NAN;
}

TEST(Checkpoints, AFailedCheckpointIsCountedAndTheNextOneIsTried) {
  TempDir dir;
  const std::string ckdir = dir.File("ck");
  std::filesystem::create_directory(ckdir);
  const std::string ck = ckdir + "/c.bin";
  std::vector<std::string> argv = LongRun({"--checkpoint", ck, "--checkpoint-every", "20000",
                                           "--log-every", "0"});
  argv.erase(std::find(argv.begin(), argv.end(), "--no-metrics"));
  argv.insert(argv.end(), {"--metrics-addr", "127.0.0.1:0"});
  Subprocess p(argv);
  const std::string metrics = WaitForEvent(p, "metrics", kRunTimeout);
  ASSERT_FALSE(metrics.empty()) << p.err();
  const std::string addr = *test::JsonField(metrics, "address");
  ASSERT_FALSE(WaitForEvent(p, "checkpoint", kRunTimeout).empty()) << p.err();
  // The directory goes away: the next checkpoints fail, the run goes on.
  std::filesystem::remove_all(ckdir);
  const std::string failed = WaitForEvent(p, "checkpoint_failed", kRunTimeout);
  ASSERT_FALSE(failed.empty()) << p.err();
  EXPECT_NE(failed.find("No such file or directory"), std::string::npos) << failed;
  double count = NAN;
  for (int i = 0; i < 200 && !(count >= 1); ++i) {
    count = ScrapeValue(addr, "shmtrain_checkpoint_failures_total");
  }
  EXPECT_GE(count, 1) << "shmtrain_checkpoint_failures_total";
  // The directory is back: a later checkpoint succeeds.
  std::filesystem::create_directory(ckdir);
  ASSERT_FALSE(WaitForEvent(p, "checkpoint", kRunTimeout).empty()) << p.err();
  EXPECT_TRUE(test::FileExists(ck));
  ASSERT_TRUE(p.Signal(SIGTERM));
  const ProcResult r = p.Wait(kRunTimeout);
  EXPECT_TRUE(r.exited && r.exit_code == 143) << r.Describe();
  ExpectCleanedUp(r);
}

// ---------------------------------------------------------------------------------------------
// Divergence.

TEST(Divergence, SyncStopsAtTheStepWithExit5AndSavesNothing) {
  TempDir dir;
  std::string step;
  for (int run = 0; run < 2; ++run) {
    const std::string model = dir.File("m" + std::to_string(run) + ".bin");
    const ProcResult r = test::RunProcess(
        {kBin, "train", "--example", "parabola", "--layers", "1,5,1", "--lr", "1e6", "--steps",
         "1000", "--workers", "2", "--no-metrics", "--init", "normal", "--save", model,
         "--log-format", "json"},
        kRunTimeout);
    ASSERT_TRUE(r.exited) << r.Describe();
    EXPECT_EQ(r.exit_code, 5) << r.Describe();
    const size_t at = r.err.find("training diverged at step ");
    ASSERT_NE(at, std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--lr 1e+06"), std::string::npos) << r.err;
    const std::string here = r.err.substr(at, r.err.find(':', at) - at);
    if (run == 1) {
      EXPECT_EQ(here, step) << "sync names the same step every run";
    }
    step = here;
    EXPECT_FALSE(test::FileExists(model)) << "a diverged run wrote a model";
    EXPECT_EQ(r.out.find("\"summary\""), std::string::npos) << r.out;
    ExpectCleanedUp(r);
  }
}

// ---------------------------------------------------------------------------------------------
// Exceptions in the master.

TEST(MasterException, EndsThroughTheNormalCleanup) {
  const ProcResult r = test::RunProcess(LongRun({"--fault-master-throw", "100"}), kRunTimeout);
  ASSERT_TRUE(r.exited) << r.Describe();
  EXPECT_EQ(r.exit_code, 1) << r.Describe();
  EXPECT_NE(r.err.find("internal error: out of memory (std::bad_alloc)"), std::string::npos)
      << r.err;
  EXPECT_EQ(WorkerPids(r.out).size(), 2u) << r.out;
  ExpectCleanedUp(r);
}

// ---------------------------------------------------------------------------------------------
// The live progress line, on a real terminal.

// The losses shown by the live lines in `out` ("step S/N  loss L  ..."), in order; "?" (before
// the first step) is skipped. A shown loss that is not a finite number fails the test.
std::vector<double> ShownLosses(const std::string& out) {
  std::vector<double> v;
  for (size_t at = 0; (at = out.find("  loss ", at)) != std::string::npos; at += 7) {
    const size_t end = out.find(' ', at + 7);
    if (end == std::string::npos) break;  // a line still being written
    const std::string word = out.substr(at + 7, end - at - 7);
    if (word == "?") continue;
    const double x = std::strtod(word.c_str(), nullptr);
    EXPECT_TRUE(std::isfinite(x)) << "progress line shows loss '" << word << "'";
    v.push_back(x);
  }
  return v;
}

// Runs argv on a pseudo-terminal (stdout and stderr), sends it SIGINT once `lines` live lines
// showed a loss, and returns everything it wrote. Bounded by kRunTimeout (then SIGKILL).
std::string RunOnTerminalUntil(const std::vector<std::string>& argv, size_t lines,
                               int* exit_code) {
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  bool interrupted = false;
  const auto deadline = test::Clock::now() + kRunTimeout;
  for (;;) {
    if (test::Clock::now() > deadline) {
      kill(pid, SIGKILL);
      ADD_FAILURE() << "run on a terminal timed out";
      break;
    }
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = read(master, buf, sizeof buf);  // EIO once the child has gone
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (!interrupted && ShownLosses(out).size() >= lines) {
      kill(pid, SIGINT);
      interrupted = true;
    }
  }
  close(master);
  int status = 0;
  waitpid(pid, &status, 0);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(ProgressLine, ShowsTheCurrentLossWithoutLogLines) {
  // A long run, stopped once four live lines (200 ms apart) showed a loss: as long in every
  // build, however slow its steps.
  int code = -1;
  const std::string out = RunOnTerminalUntil(
      {kBin, "train", "--example", "parabola", "--layers", "1,5,1", "--lr", "0.01", "--steps",
       "1000000000", "--log-every", "0", "--no-metrics", "--init", "normal"},
      4, &code);
  EXPECT_EQ(code, 130) << out;
  // With --log-every 0 no loss was ever logged: what the line shows is the current one.
  const std::vector<double> shown = ShownLosses(out);
  ASSERT_GE(shown.size(), 4u) << "no progress lines with a loss:\n" << out;
  EXPECT_LT(shown.back(), shown.front()) << "the loss shown never moved: it is not the current one";
}

// ---------------------------------------------------------------------------------------------
// Early stopping names the model it keeps.

TEST(EarlyStop, TheModelNamedIsTheModelKept) {
  const std::string fashion8 = test::SmallFashionCsv();
  ASSERT_FALSE(fashion8.empty()) << "no data set: the failure above says why";
  // A large learning rate makes the validation loss jump about, so a patience of 1 ends the
  // run early, and the evaluations after the decision may still beat the best so far (on
  // fashion8 (tests/real_data.h) they do: the stop is decided at best step 70, the model kept
  // is step 100's, and the run ends at step 100 of 9000).
  const ProcResult r = test::RunProcess(
      {kBin, "train", "--data", fashion8, "--layers", "64,32,10", "--task", "classification",
       "--lr", "0.5", "--batch", "32", "--epochs", "200", "--val-split", "0.2", "--eval-every",
       "10", "--early-stop", "1", "--normalize", "standard", "--no-metrics", "--log-every", "0",
       "--log-format", "json"},
      kRunTimeout);
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.Describe();
  std::string decided, kept, summary;
  for (const std::string& l : test::SplitLines(r.out)) {
    const auto e = test::JsonField(l, "event");
    if (e == "early_stop") decided = l;
    if (e == "early_stop_model") kept = l;
    if (e == "summary") summary = l;
  }
  ASSERT_FALSE(decided.empty()) << "the run did not stop early:\n" << r.out;
  ASSERT_FALSE(kept.empty()) << "the kept model is never named:\n" << r.out;
  EXPECT_EQ(test::JsonField(summary, "stopped_early"), "true");
  EXPECT_EQ(test::JsonField(kept, "best_step"), test::JsonField(summary, "best_step")) << r.out;
  EXPECT_EQ(test::JsonField(kept, "best_val_loss"), test::JsonField(summary, "val_loss"))
      << r.out;
}

}  // namespace
}  // namespace shmtrain
