// Runs that must never be lost or end in silent garbage, through the real CLI.
//
//  - Every stop signal (not only SIGINT/SIGTERM) stops the workers, writes the checkpoint,
//    removes the segment and exits 128 + n.
//  - Output paths (--save, --checkpoint, predict --out) are checked before anything starts:
//    a bad one is exit 2 at once, never after the training it would lose. A symlink's target
//    gets the bytes (the link stays); FIFOs, character devices and /dev/stdout are written in
//    place, never replaced; block devices and sockets are refused.
//  - Two runs never write the same output: the second is refused, naming the first's pid; a
//    killed run's lock does not outlive it.
//  - A model file or checkpoint with a valid checksum but non-finite values is refused; a
//    finite model whose scaled inputs or outputs on some data are not finite is exit 5,
//    naming the rows, with nothing written.
//  - A checkpoint that fails mid-run is logged, counted on the metrics endpoint and retried;
//    the run goes on.
//  - Divergence (a non-finite loss or gradient) ends the run with exit 5 naming the step, and
//    writes no model.
//  - An exception in the master goes through the normal cleanup: exit 1 with the message,
//    workers gone, segment removed.
//  - The live progress line (on a terminal) shows the current loss whatever --log-every is.
//  - Early stopping names the model it keeps, and that is the one the summary reports.
//  - A standard output that cannot be written (full, or a pipe whose reader is gone) is exit 4
//    for every command; train still saves its model first.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32.h"
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
  test::ExpectCleanedUp(r);
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
  test::ExpectCleanedUp(r);
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
    test::ExpectCleanedUp(r);
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
  EXPECT_EQ(test::StartedWorkers(r.out).size(), 2u) << r.out;
  test::ExpectCleanedUp(r);
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

// ---------------------------------------------------------------------------------------------
// Outputs that are not regular files: followed to their target, written in place, or refused;
// never replaced.

// A trained parabola model (1-5-1: 16 parameters), rows to predict, and what predict prints
// for them on stdout.
struct Predictable {
  std::string model, data, predictions;
};

Predictable MakePredictable(const TempDir& dir) {
  Predictable p;
  p.model = dir.File("m.bin");
  p.data = dir.Write("x.csv", "x\n0.1\n0.2\n-0.5\n");
  const ProcResult t = test::RunProcess(
      {kBin, "example", "parabola", "--no-metrics", "--save", p.model}, kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(t, 0));
  const ProcResult r =
      test::RunProcess({kBin, "predict", "--model", p.model, "--data", p.data}, kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(r, 0));
  p.predictions = r.out;
  EXPECT_EQ(test::SplitLines(p.predictions).size(), 4u) << p.predictions;
  return p;
}

ProcResult Predict(const Predictable& p, const std::string& out) {
  return test::RunProcess({kBin, "predict", "--model", p.model, "--data", p.data, "--out", out},
                          kRunTimeout);
}

// ---------------------------------------------------------------------------------------------
// eval and predict under an address-space limit (ulimit -v): refused with a message naming
// the limit, exit 4, whether the memory check sees it coming or an allocation fails later (in
// the CSV loader's second thread too, which used to end in "internal error: out of memory",
// exit 1). A sweep of limits from too small to start with to enough: every run succeeds or
// names the limit; at least one of each.
TEST(MemoryLimit, EvalAndPredictUnderUlimitVNameTheLimit) {
#ifdef SHMTRAIN_SANITIZED
  GTEST_SKIP() << "a sanitized build cannot run under an address-space limit";
#endif
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  std::string csv = "x,y\n";
  for (int i = 0; i < 200'000; ++i) csv += std::to_string(i % 97 * 0.01) + ",0.5\n";
  const std::string data = dir.Write("big.csv", csv);
  int refused = 0, ran = 0;
  for (int mib = 8; mib <= 96; mib += 4) {
    for (const std::string cmd : {"eval", "predict"}) {
      const std::string line = "ulimit -v " + std::to_string(mib * 1024) + "; exec \"$0\" " +
                               cmd + " --model \"$1\" --data \"$2\"" +
                               (cmd == "predict" ? " --out /dev/null" : "");
      const ProcResult r =
          test::RunProcess({"/bin/bash", "-c", line, kBin, p.model, data}, kRunTimeout);
      SCOPED_TRACE(cmd + " under ulimit -v " + std::to_string(mib) + " MiB: " + r.Describe());
      if (r.exited && r.exit_code == 0) {
        ++ran;
        continue;
      }
      // Too small to load the program at all (exit 127) is the loader's say, not ours.
      if (r.err.find("error while loading shared libraries") != std::string::npos) continue;
      EXPECT_TRUE(test::ExitedWith(r, 4));
      EXPECT_NE(r.err.find("under the address-space limit (ulimit -v, RLIMIT_AS) of "),
                std::string::npos);
      ++refused;
    }
  }
  EXPECT_GT(refused, 0) << "no limit in the sweep was small enough";
  EXPECT_GT(ran, 0) << "no limit in the sweep was large enough";
}

struct stat LStat(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st;
}

std::string ReadLink(const std::string& path) {
  std::error_code ec;
  return std::filesystem::read_symlink(path, ec).string();
}

// The names in a directory, sorted.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(OutputKinds, ASymlinkStaysALinkAndItsTargetGetsTheBytes) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  std::filesystem::create_directory(dir.File("real"));
  const std::string target = dir.Write("real/p.csv", "old\n");
  const std::string link = dir.File("p.csv");
  // Relative: resolved from the link's directory, not the run's.
  ASSERT_EQ(symlink("real/p.csv", link.c_str()), 0);
  ASSERT_TRUE(test::ExitedWith(Predict(p, link), 0));
  EXPECT_TRUE(S_ISLNK(LStat(link).st_mode)) << "the link was replaced by a file";
  EXPECT_EQ(ReadLink(link), "real/p.csv");
  EXPECT_TRUE(test::SameBytes(test::ReadWholeFile(target), p.predictions));
  // A link to that link: the end of the chain gets the bytes, both links stay.
  const std::string chain = dir.File("chain.csv");
  ASSERT_EQ(symlink(link.c_str(), chain.c_str()), 0);
  dir.Write("real/p.csv", "old\n");
  ASSERT_TRUE(test::ExitedWith(Predict(p, chain), 0));
  EXPECT_TRUE(S_ISLNK(LStat(chain).st_mode));
  EXPECT_TRUE(S_ISLNK(LStat(link).st_mode));
  EXPECT_TRUE(test::SameBytes(test::ReadWholeFile(target), p.predictions));
  EXPECT_EQ(Entries(dir.File("real")), std::vector<std::string>{"p.csv"})
      << "a temporary, probe or lock file was left beside the target";
}

TEST(OutputKinds, ADanglingSymlinkHasItsTargetCreated) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  std::filesystem::create_directory(dir.File("real"));
  const std::string link = dir.File("p.csv");
  ASSERT_EQ(symlink(dir.File("real/new.csv").c_str(), link.c_str()), 0);
  ASSERT_TRUE(test::ExitedWith(Predict(p, link), 0));
  EXPECT_TRUE(S_ISLNK(LStat(link).st_mode));
  EXPECT_TRUE(test::SameBytes(test::ReadWholeFile(dir.File("real/new.csv")), p.predictions));
  // A link into a directory that does not exist is refused up front, naming the directory.
  const std::string nowhere = dir.File("nowhere.csv");
  ASSERT_EQ(symlink(dir.File("none/x.csv").c_str(), nowhere.c_str()), 0);
  const ProcResult r = Predict(p, nowhere);
  EXPECT_TRUE(test::ExitedWith(r, 2));
  EXPECT_NE(r.err.find("--out " + nowhere + ": directory " + dir.File("none") + " does not exist"),
            std::string::npos)
      << r.err;
}

TEST(OutputKinds, SaveAndCheckpointThroughSymlinks) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("store"));
  const std::string model = dir.File("m.bin"), ck = dir.File("ck.bin");
  ASSERT_EQ(symlink("store/model.bin", model.c_str()), 0);  // dangling
  const std::string ck_target = dir.Write("store/ck.bin", "old");
  ASSERT_EQ(symlink(ck_target.c_str(), ck.c_str()), 0);
  const ProcResult r = test::RunProcess(
      {kBin, "train", "--example", "parabola", "--layers", "1,5,1", "--lr", "0.01", "--steps",
       "300", "--no-metrics", "--save", model, "--checkpoint", ck, "--checkpoint-every", "100"},
      kRunTimeout);
  ASSERT_TRUE(test::ExitedWith(r, 0));
  EXPECT_TRUE(S_ISLNK(LStat(model).st_mode)) << "--save replaced the link";
  EXPECT_TRUE(S_ISLNK(LStat(ck).st_mode)) << "--checkpoint replaced the link";
  EXPECT_EQ(test::ReadWholeFile(dir.File("store/model.bin")).substr(0, 8), "SHMTMODL");
  EXPECT_EQ(test::CheckpointStep(ck_target), 200);
  EXPECT_EQ(Entries(dir.File("store")), (std::vector<std::string>{"ck.bin", "model.bin"}));
}

TEST(OutputKinds, AFifoIsWrittenInPlaceAndStaysAFifo) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  const std::string fifo = dir.File("p.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // The reader is there before the run (opened non-blocking: no wait for a writer), and reads
  // until the writer has come and gone (EOF), or until 2 s after the run ended: a run that
  // replaced the FIFO instead never comes.
  const int fd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string got;
  std::atomic<bool> ended{false};
  std::thread reader([&] {
    auto deadline = test::Clock::time_point::max();
    char buf[4096];
    while (test::Clock::now() < deadline) {
      if (ended && deadline == test::Clock::time_point::max()) {
        deadline = test::Clock::now() + milliseconds(2000);
      }
      pollfd pf{fd, POLLIN, 0};
      if (poll(&pf, 1, 100) <= 0) continue;
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
  });
  const ProcResult r = Predict(p, fifo);
  ended = true;
  reader.join();
  close(fd);
  ASSERT_TRUE(test::ExitedWith(r, 0));
  EXPECT_TRUE(test::SameBytes(got, p.predictions));
  EXPECT_TRUE(S_ISFIFO(LStat(fifo).st_mode)) << "the FIFO was replaced";
  EXPECT_EQ(Entries(dir.path()), (std::vector<std::string>{"m.bin", "p.fifo", "x.csv"}));
}

TEST(OutputKinds, DevNullStaysTheNullDevice) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  // First a node of our own for the null device (root only), so that a regression replaces
  // that one and stops here, not the machine's /dev/null.
  const std::string node = dir.File("null");
  if (mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    const struct stat own = LStat(node);
    EXPECT_TRUE(test::ExitedWith(Predict(p, node), 0));
    ASSERT_TRUE(S_ISCHR(LStat(node).st_mode)) << "the device node was replaced by a file";
    ASSERT_EQ(LStat(node).st_ino, own.st_ino) << "the device node was replaced";
  }
  const struct stat before = LStat("/dev/null");
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  EXPECT_TRUE(test::ExitedWith(Predict(p, "/dev/null"), 0));
  EXPECT_TRUE(test::ExitedWith(
      test::RunProcess({kBin, "export", "--model", p.model, "--out", "/dev/null"}, kRunTimeout),
      0));
  const struct stat after = LStat("/dev/null");
  EXPECT_TRUE(S_ISCHR(after.st_mode)) << "/dev/null is no longer a character device";
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_EQ(after.st_ino, before.st_ino) << "/dev/null was replaced";
  EXPECT_EQ(after.st_mode, before.st_mode);
}

TEST(OutputKinds, DevStdoutIsTheRunsStdout) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  // /dev/stdout last: a regression that replaces these paths fails on the links in /proc
  // first, which cannot be replaced, and stops before it reaches /dev.
  for (const std::string out : {"/proc/self/fd/1", "/dev/fd/1", "/dev/stdout"}) {
    const ProcResult r = Predict(p, out);
    ASSERT_TRUE(test::ExitedWith(r, 0)) << out;
    ASSERT_TRUE(test::SameBytes(r.out, p.predictions)) << out;
  }
  // stdin is open for reading only.
  const ProcResult r = Predict(p, "/dev/stdin");
  EXPECT_TRUE(test::ExitedWith(r, 2));
  EXPECT_NE(r.err.find("--out /dev/stdin: is descriptor 0, which is open for reading only"),
            std::string::npos)
      << r.err;
}

TEST(OutputKinds, SocketsAndBlockDevicesAreRefusedUpFront) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  const std::string sock = dir.File("s.sock");
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  struct Case {
    std::string path, what;
  };
  std::vector<Case> cases = {{sock, "is a socket"}};
  // A block device node (the first loop device; root only): refused without being opened.
  const std::string blk = dir.File("blk");
  if (mknod(blk.c_str(), S_IFBLK | 0600, makedev(7, 0)) == 0) {
    cases.push_back({blk, "is a block device"});
  }
  for (const Case& c : cases) {
    const struct stat before = LStat(c.path);
    const ProcResult r = Predict(p, c.path);
    EXPECT_TRUE(test::ExitedWith(r, 2)) << c.path;
    EXPECT_NE(r.err.find("--out " + c.path + ": " + c.what), std::string::npos) << r.err;
    // --save is refused before any training (a run of 10^9 steps would time out).
    const ProcResult t = test::RunProcess(LongRun({"--save", c.path}), milliseconds(30'000));
    EXPECT_TRUE(test::ExitedWith(t, 2)) << c.path;
    EXPECT_NE(t.err.find("--save " + c.path + ": " + c.what), std::string::npos) << t.err;
    EXPECT_EQ(LStat(c.path).st_ino, before.st_ino) << c.path << " was replaced";
    EXPECT_EQ(LStat(c.path).st_mode, before.st_mode) << c.path << " was replaced";
  }
  close(s);
}

// ---------------------------------------------------------------------------------------------
// Non-finite values behind a valid checksum.

// `bytes` with the float at byte offset `at` set to v and the trailing CRC-32 recomputed:
// damage that no checksum catches.
std::string WithFloat(std::string bytes, size_t at, float v) {
  EXPECT_LE(at + 4 + 4, bytes.size());
  std::memcpy(bytes.data() + at, &v, sizeof v);
  const uint32_t crc = Crc32(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, sizeof crc);
  return bytes;
}

TEST(NonFinite, ModelFilesAreRefusedByEvalPredictAndExport) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  const std::string labelled = dir.Write("xy.csv", "x,y\n0.1,0.01\n0.2,0.04\n-0.5,0.25\n");
  const std::string bytes = test::ReadWholeFile(p.model);
  const size_t params = bytes.size() - 4 - 16 * sizeof(float);  // the parameters come last
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string path, what;
  };
  // 1-5-1: W0 (5 x 1) at 0..4, b0 at 5..9, W1 (1 x 5) at 10..14, b1 at 15.
  const Case cases[] = {
      {dir.Write("nan.bin", WithFloat(bytes, params + 7 * 4, nan)),
       "parameter 7 of 16 is NaN: layer 0 bias 2 (0.bias[2] in an export)"},
      {dir.Write("inf.bin", WithFloat(bytes, params + 12 * 4, inf)),
       "parameter 12 of 16 is +Inf: layer 1 weight row 0, column 2 (2.weight[0, 2] in an "
       "export)"},
  };
  const std::string out = dir.File("out");
  for (const Case& c : cases) {
    const std::vector<std::vector<std::string>> commands = {
        {kBin, "eval", "--model", c.path, "--data", labelled},
        {kBin, "predict", "--model", c.path, "--data", p.data, "--out", out},
        {kBin, "predict", "--model", c.path, "--data", p.data},
        {kBin, "export", "--model", c.path, "--out", out}};
    for (const auto& argv : commands) {
      const ProcResult r = test::RunProcess(argv, kRunTimeout);
      EXPECT_TRUE(test::ExitedWith(r, 2)) << argv[1] << " " << c.path;
      EXPECT_NE(r.err.find(c.path + ": not a usable model file: " + c.what), std::string::npos)
          << argv[1] << ": " << r.err;
      EXPECT_EQ(r.out, "") << argv[1] << " printed results of a broken model";
      EXPECT_FALSE(test::FileExists(out)) << argv[1] << " wrote an output";
    }
  }
}

// A finite model on finite data can still compute values beyond float. Feature 0 of the
// training rows spans 1e-37, so --normalize minmax scales it by 1e37 and a value of 1000 in new
// data scales to inf. eval printed `loss -nan`, predict wrote `-nan` probabilities and a
// validation kept a model "at val loss -nan", all with exit 0: each is exit 5 now, naming the
// rows, the feature and the statistics, and nothing is written.
TEST(NonFinite, InputsThatScaleBeyondFloatAreAnErrorNamingTheRows) {
  TempDir dir;
  std::string train = "f0,f1,y\n";
  for (int i = 0; i < 20; ++i) {
    train += std::string(i % 2 ? "1e-37" : "0") + "," + std::to_string(i / 20.0) + "," +
             (i < 10 ? "a" : "b") + "\n";
  }
  const std::string data = dir.Write("train.csv", train);
  const std::string labelled = dir.Write("new.csv",
                                         "f0,f1,y\n0,0.1,a\n1000,0.2,a\n0,0.9,b\n"
                                         "1000,0.8,b\n");
  const std::string unlabelled = dir.Write("newx.csv", "f0,f1\n0,0.1\n1000,0.2\n0,0.9\n");
  const std::string model = dir.File("m.bin"), out = dir.File("p.csv");
  const std::vector<std::string> run = {
      kBin,    "train",        "--workers", "1",      "--data",      data,          "--layers",
      "2,4,2", "--activation", "relu",      "--loss", "xent",        "--normalize", "minmax",
      "--lr",  "0.1",          "--steps",   "20",     "--no-metrics"};
  std::vector<std::string> save = run;
  save.insert(save.end(), {"--save", model});
  ASSERT_TRUE(test::ExitedWith(test::RunProcess(save, kRunTimeout), 0));
  const std::string how =
      "feature 0 is (1000 - 0) x 1e+37 = inf, where 0 is the training rows' "
      "minimum and 1e+37 is 1 / their range (1e-37, --normalize minmax)";
  const ProcResult e =
      test::RunProcess({kBin, "eval", "--model", model, "--data", labelled}, kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(e, 5)) << e.err;
  EXPECT_NE(e.err.find(labelled +
                       ": the normalised input is not finite (NaN or infinite) in "
                       "rows 1 and 3 (0-based): row 1, " +
                       how),
            std::string::npos)
      << e.err;
  EXPECT_EQ(e.out, "");
  const ProcResult p = test::RunProcess(
      {kBin, "predict", "--model", model, "--data", unlabelled, "--out", out}, kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(p, 5)) << p.err;
  EXPECT_NE(p.err.find(unlabelled +
                       ": the normalised input is not finite (NaN or infinite) in "
                       "row 1 (0-based): its " +
                       how),
            std::string::npos)
      << p.err;
  EXPECT_FALSE(test::FileExists(out));
  // Held-out rows are scaled before training starts: the run starts no worker.
  std::vector<std::string> validated = run;
  validated.insert(validated.end(), {"--val-data", labelled, "--eval-every", "5", "--early-stop",
                                     "2", "--save", dir.File("v.bin"), "--log-format", "json"});
  const ProcResult v = test::RunProcess(validated, kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(v, 5)) << v.err;
  EXPECT_NE(v.err.find(labelled + ": the normalised input is not finite"), std::string::npos)
      << v.err;
  EXPECT_TRUE(test::StartedWorkers(v.out).empty()) << v.out;
  EXPECT_FALSE(test::FileExists(dir.File("v.bin")));
}

// Huge but finite weights: the model file is valid, its outputs on some rows are not finite.
// Hidden unit 0 is tanh(x), the others 0, and the output FLT_MAX * tanh(x) + FLT_MAX, which
// is +inf for x > 0 and finite for x < 0.
TEST(NonFinite, OutputsBeyondFloatAreAnErrorNamingTheRows) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);  // x: 0.1, 0.2, -0.5
  const std::string labelled = dir.Write("xy.csv", "x,y\n0.1,0.01\n0.2,0.04\n-0.5,0.25\n");
  std::string bytes = test::ReadWholeFile(p.model);
  const size_t params = bytes.size() - 4 - 16 * sizeof(float);  // the parameters come last
  const float big = std::numeric_limits<float>::max();
  // 1-5-1: W0 (5 x 1) at 0..4, b0 at 5..9, W1 (1 x 5) at 10..14, b1 at 15.
  for (int i = 0; i < 16; ++i) {
    bytes = WithFloat(bytes, params + i * 4, i == 0 ? 1.0f : i == 10 || i == 15 ? big : 0.0f);
  }
  const std::string model = dir.Write("huge.bin", bytes);
  const std::string out = dir.File("p.csv");
  const ProcResult e =
      test::RunProcess({kBin, "eval", "--model", model, "--data", labelled}, kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(e, 5)) << e.err;
  EXPECT_NE(e.err.find(labelled + ": the model " + model +
                       " gives outputs that are not finite (NaN or infinite) in rows 0 and 1 "
                       "(0-based), so its loss is not finite either"),
            std::string::npos)
      << e.err;
  EXPECT_EQ(e.out, "");
  for (const bool to_file : {true, false}) {
    std::vector<std::string> argv = {kBin, "predict", "--model", model, "--data", p.data};
    if (to_file) argv.insert(argv.end(), {"--out", out});
    const ProcResult r = test::RunProcess(argv, kRunTimeout);
    EXPECT_TRUE(test::ExitedWith(r, 5)) << r.err;
    EXPECT_NE(r.err.find(p.data + ": the model " + model +
                         " gives outputs that are not finite (NaN or infinite) in rows 0 and 1 "
                         "(0-based) (the values); nothing was written"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
    if (to_file) {
      EXPECT_FALSE(test::FileExists(out));
    }
  }
}

// 300 steps of the parabola with momentum at learning rate lr on 2 workers, and `extra`.
std::vector<std::string> MomentumParabola(const std::string& lr,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> a = {kBin,      "train", "--example", "parabola", "--layers",   "1,5,1",
                                "--lr",    lr,      "--steps",   "300",      "--workers",  "2",
                                "--momentum", "0.9", "--no-metrics"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(NonFinite, CheckpointsAreRefusedByResume) {
  TempDir dir;
  const std::string ck = dir.File("ck.bin");
  auto with = [](const std::vector<std::string>& extra) { return MomentumParabola("0.01", extra); };
  ASSERT_TRUE(test::ExitedWith(
      test::RunProcess(with({"--checkpoint", ck, "--checkpoint-every", "100"}), kRunTimeout), 0));
  ASSERT_EQ(test::CheckpointStep(ck), 200);
  const std::string bytes = test::ReadWholeFile(ck);
  // Header (master/files/checkpoint.h): 48 bytes, the optimizer's m at 44, n at 32, K at 40; then
  // the optimizer's name, W[n], S[K][n].
  uint32_t m = 0, k = 0;
  uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 32, 8);
  std::memcpy(&k, bytes.data() + 40, 4);
  std::memcpy(&m, bytes.data() + 44, 4);
  ASSERT_EQ(n, 16u);
  ASSERT_EQ(k, 1u) << "momentum keeps one state vector";
  const size_t w = 48 + m, s0 = w + n * 4;
  struct Case {
    std::string path, what;
  };
  const Case cases[] = {
      {dir.Write("nan.ckpt",
                 WithFloat(bytes, w + 3 * 4, std::numeric_limits<float>::quiet_NaN())),
       "not a usable checkpoint: parameter 3 of 16 is NaN"},
      {dir.Write("inf.ckpt",
                 WithFloat(bytes, s0 + 9 * 4, -std::numeric_limits<float>::infinity())),
       "not a usable checkpoint: optimizer state 0 of 1 (sgd), entry 9 of 16, is -Inf"},
  };
  const std::string model = dir.File("never.bin");
  for (const Case& c : cases) {
    const ProcResult r = test::RunProcess(
        with({"--resume", c.path, "--checkpoint", c.path, "--save", model, "--log-format",
              "json"}),
        kRunTimeout);
    EXPECT_TRUE(test::ExitedWith(r, 2)) << c.path;
    EXPECT_NE(r.err.find(c.path + ": " + c.what), std::string::npos) << r.err;
    EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << "workers were started:\n" << r.out;
    EXPECT_FALSE(test::FileExists(model));
    EXPECT_TRUE(test::SegmentsOf(r.pid).empty());
  }
  // The untouched checkpoint resumes with the same options.
  EXPECT_TRUE(test::ExitedWith(
      test::RunProcess(with({"--resume", ck, "--save", model}), kRunTimeout), 0));
  EXPECT_TRUE(test::FileExists(model));
}

// A checkpoint whose values are finite but huge (a damaged or crafted file, or a run about to
// diverge) makes the resumed run diverge: the message blamed --lr, which the run shares with
// the one that wrote the checkpoint. It names the checkpoint and its largest value instead:
// parameters of 1e38 diverge at the first step after the resume; a momentum of 3e38 (above
// 2^64, whose square float cannot hold) one step later.
TEST(NonFinite, ADivergenceFromTheResumedStateNamesTheCheckpoint) {
  TempDir dir;
  const std::string ck = dir.File("ck.bin");
  auto with = [](const std::vector<std::string>& extra) { return MomentumParabola("0.01", extra); };
  ASSERT_TRUE(test::ExitedWith(
      test::RunProcess(with({"--checkpoint", ck, "--checkpoint-every", "100"}), kRunTimeout), 0));
  ASSERT_EQ(test::CheckpointStep(ck), 200);
  std::string params = test::ReadWholeFile(ck), momentum = params;
  // Header (master/files/checkpoint.h): 48 bytes, the optimizer's m at 44; then its name, W[16],
  // S[16].
  uint32_t m = 0;
  std::memcpy(&m, params.data() + 44, 4);
  const size_t w = 48 + m, s0 = w + 16 * 4;
  for (int i = 0; i < 16; ++i) {
    params = WithFloat(params, w + i * 4, i == 3 ? -1e38f : 1e37f);
    momentum = WithFloat(momentum, s0 + i * 4, i == 9 ? 3e38f : 1e30f);
  }
  struct Case {
    std::string path, what;
  };
  const Case cases[] = {
      {dir.Write("params.ckpt", params),
       "training diverged at step 200: the loss or gradient is not finite (NaN or infinite); "
       "it is the first step after resuming from " +
           dir.File("params.ckpt") +
           ", so the state resumed from it is what went non-finite (its largest value: "
           "parameter 3 of 16 is -1e+38); resume from another checkpoint, or train afresh"},
      {dir.Write("momentum.ckpt", momentum),
       "training diverged at step 201: the loss or gradient is not finite (NaN or infinite); "
       "the state resumed from " +
           dir.File("momentum.ckpt") +
           " holds values beyond what float arithmetic on them survives (optimizer state 0 of "
           "1 (sgd), entry 9 of 16, is 3e+38; the product of two values above 2^64 = 1.8e19 "
           "overflows float); resume from another checkpoint, or train afresh"},
  };
  for (const Case& c : cases) {
    const ProcResult r = test::RunProcess(
        with({"--resume", c.path, "--save", dir.File("m.bin"), "--log-format", "json"}),
        kRunTimeout);
    EXPECT_TRUE(test::ExitedWith(r, 5)) << c.path;
    EXPECT_NE(r.err.find(c.what), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--lr"), std::string::npos) << r.err;
    EXPECT_FALSE(test::FileExists(dir.File("m.bin")));
    test::ExpectCleanedUp(r);
  }
}

// The workers check every step's loss and gradient, but not what the last update makes of the
// parameters: finite parameters whose outputs on the training rows are not finite were saved
// with "final loss inf" and exit 0. A momentum of 3e38 resumed before the last step (of a run at
// --lr 0.5) moves every parameter to about -1.35e38, where each row's output overflows.
TEST(NonFinite, AFinalModelWithOutputsBeyondFloatIsNotSaved) {
  TempDir dir;
  const std::string ck = dir.File("ck.bin"), model = dir.File("m.bin");
  auto with = [](const std::vector<std::string>& extra) { return MomentumParabola("0.5", extra); };
  ASSERT_TRUE(test::ExitedWith(
      test::RunProcess(with({"--checkpoint", ck, "--checkpoint-every", "299"}), kRunTimeout), 0));
  ASSERT_EQ(test::CheckpointStep(ck), 299);
  std::string bytes = test::ReadWholeFile(ck);
  uint32_t m = 0;
  std::memcpy(&m, bytes.data() + 44, 4);
  const size_t s0 = 48 + m + 16 * 4;  // the momentum, after the header, the name and W[16]
  for (int i = 0; i < 16; ++i) bytes = WithFloat(bytes, s0 + i * 4, 3e38f);
  const std::string resumed = dir.Write("huge.ckpt", bytes);
  const ProcResult r = test::RunProcess(with({"--resume", resumed, "--save", model}), kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(r, 5));
  EXPECT_NE(r.err.find("training diverged: the model after step 300 gives outputs that are not "
                       "finite (NaN or infinite) in 50 rows, the first 0, 1 and 2 (0-based) of "
                       "the training rows; "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("resuming from " + resumed), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; no model was saved"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("done:"), std::string::npos) << r.out;
  EXPECT_FALSE(test::FileExists(model));
}

// ---------------------------------------------------------------------------------------------
// One writer per output.

TEST(OutputLocks, ASecondRunOnTheSameOutputIsRefusedNamingTheFirst) {
  TempDir dir;
  const std::string ck = dir.File("ck.bin"), link = dir.File("link.bin");
  ASSERT_EQ(symlink(ck.c_str(), link.c_str()), 0);
  Subprocess first(LongRun({"--checkpoint", ck, "--log-every", "1000"}));
  ASSERT_FALSE(WaitForEvent(first, "step", kRunTimeout).empty()) << first.err();
  const std::string holder = "another shmtrain run (pid " + std::to_string(first.pid()) + ")";
  // The same file as a checkpoint, as a model, and through a symlink.
  const std::vector<std::vector<std::string>> seconds = {
      {"--checkpoint", ck}, {"--save", ck}, {"--checkpoint", link}};
  for (const auto& flags : seconds) {
    const ProcResult r = test::RunProcess(LongRun(flags), milliseconds(30'000));
    EXPECT_TRUE(test::ExitedWith(r, 2)) << flags[0] << " " << flags[1];
    EXPECT_NE(r.err.find(flags[0] + " " + flags[1] + ": " + holder), std::string::npos) << r.err;
    EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << "workers were started:\n" << r.out;
    EXPECT_TRUE(test::SegmentsOf(r.pid).empty());
  }
  ASSERT_TRUE(first.running()) << "the refused runs disturbed the first";
  // The first run goes on and writes its checkpoint when it is stopped; the lock goes with it.
  ASSERT_TRUE(first.Signal(SIGTERM));
  const ProcResult r = first.Wait(kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(r, 143));
  EXPECT_GT(test::CheckpointStep(ck), 0);
  EXPECT_FALSE(test::FileExists(ck + ".lock")) << "the lock file outlived its run";
  test::ExpectCleanedUp(r);
  // One run resuming from and checkpointing to the same file is one writer.
  Subprocess again(LongRun({"--resume", ck, "--checkpoint", ck, "--log-every", "1000"}));
  const std::string segment = WaitForEvent(again, "segment", kRunTimeout);
  ASSERT_FALSE(segment.empty()) << again.err();
  EXPECT_EQ(test::JsonField(segment, "first_step"), std::to_string(test::CheckpointStep(ck)));
  ASSERT_FALSE(WaitForEvent(again, "worker_started", kRunTimeout).empty()) << again.err();
  ASSERT_TRUE(again.Signal(SIGTERM));
  EXPECT_TRUE(test::ExitedWith(again.Wait(kRunTimeout), 143));
}

TEST(OutputLocks, AKilledRunsLockDoesNotOutliveIt) {
  TempDir dir;
  const std::string model = dir.File("m.bin");
  Subprocess first(LongRun({"--save", model, "--log-every", "1000"}));
  ASSERT_FALSE(WaitForEvent(first, "step", kRunTimeout).empty()) << first.err();
  EXPECT_EQ(test::ReadWholeFile(model + ".lock"), std::to_string(first.pid()) + "\n");
  ASSERT_TRUE(first.Signal(SIGKILL));
  const ProcResult killed = first.Wait(kRunTimeout);
  ASSERT_EQ(killed.term_signal, SIGKILL) << killed.Describe();
  // The file stays (nobody removed it), but the kernel released its lock with the process.
  EXPECT_TRUE(test::FileExists(model + ".lock"));
  const ProcResult r = test::RunProcess(
      {kBin, "train", "--example", "parabola", "--layers", "1,5,1", "--lr", "0.01", "--steps",
       "100", "--no-metrics", "--save", model},
      kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(r, 0));
  EXPECT_EQ(test::ReadWholeFile(model).substr(0, 8), "SHMTMODL");
  EXPECT_FALSE(test::FileExists(model + ".lock"));
  // The killed master's workers see it gone and leave; its segment was reclaimed by the run.
  for (const pid_t w : test::StartedWorkers(killed.out)) {
    EXPECT_TRUE(test::WaitPidGone(w, milliseconds(5000))) << "worker " << w << " left behind";
  }
  for (const std::string& name : test::SegmentsOf(killed.pid)) shm_unlink(name.c_str());
}

// ---------------------------------------------------------------------------------------------
// Standard output that cannot be written.

// argv run with stdout on /dev/full ("full": writes fail with ENOSPC) or on a pipe whose reader
// has exited before it starts ("closed", as `| true` that was quicker: writes fail with EPIPE and
// raise SIGPIPE).
ProcResult WithStdout(const std::string& how, const std::vector<std::string>& argv) {
  std::vector<std::string> a = {"/bin/bash", "-c",
                                "if [ \"$0\" = full ]; then exec \"$@\" > /dev/full; fi\n"
                                "exec > >(exit 0)\n"
                                "wait $!\n"
                                "exec \"$@\"\n",
                                how};
  a.insert(a.end(), argv.begin(), argv.end());
  return test::RunProcess(a, kRunTimeout);
}

std::string StdoutError(const std::string& how) {
  return "shmtrain: error: cannot write standard output: " +
         std::string(how == "full" ? "No space left on device" : "Broken pipe");
}

// eval and simulate printed into a full or closed stdout and exited 0 (simulate was killed by
// the SIGPIPE, 141): like predict, each is exit 4 with the reason.
TEST(Stdout, EvalSimulateAndPredictThatCannotWriteItExit4) {
  TempDir dir;
  const Predictable p = MakePredictable(dir);
  const std::string labelled = dir.Write("xy.csv", "x,y\n0.1,0.01\n0.2,0.04\n-0.5,0.25\n");
  const std::vector<std::string> simulate = {
      kBin,       "simulate", "--workers", "2,4",  "--compare", "--example", "parabola",
      "--layers", "1,5,1",    "--lr",      "0.01", "--steps",   "20"};
  std::vector<std::string> simulate_json = simulate;
  simulate_json.insert(simulate_json.end(), {"--log-format", "json"});
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"full", {kBin, "eval", "--model", p.model, "--data", labelled}},
      {"closed", {kBin, "eval", "--model", p.model, "--data", labelled, "--log-format", "json"}},
      {"closed", {kBin, "predict", "--model", p.model, "--data", p.data}},
      {"closed", simulate},
      {"full", simulate_json},
      {"full", {kBin, "cleanup", "--dry-run"}},
      {"closed", {kBin, "cleanup", "--dry-run"}},
      {"full", {kBin, "--help"}},
      {"full", {kBin, "--version"}}};
  for (const auto& [how, argv] : cases) {
    const ProcResult r = WithStdout(how, argv);
    EXPECT_TRUE(test::ExitedWith(r, 4)) << how << ": " << argv[1];
    EXPECT_NE(r.err.find(StdoutError(how)), std::string::npos) << how << ": " << r.err;
  }
}

// A run whose log cannot be written still trains to its end and saves its model, then exits 4
// saying so: a closed terminal pipe must not cost the training. A line every step meets the
// closed pipe at once and then many times.
TEST(Stdout, TrainSavesItsModelThenExits4) {
  TempDir dir;
  const std::string model = dir.File("m.bin");
  const std::vector<std::string> train = {
      kBin,        "train", "--example",    "parabola", "--layers",    "1,5,1",
      "--lr",      "0.01",  "--steps",      "500",      "--log-every", "1",
      "--workers", "2",     "--no-metrics", "--save",   model};
  std::vector<std::string> train_json = train;
  train_json.insert(train_json.end(), {"--log-format", "json"});
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"closed", train},
      {"full", train_json},
      {"closed", {kBin, "example", "parabola", "--no-metrics", "--save", model}}};
  for (const auto& [how, argv] : cases) {
    std::filesystem::remove(model);
    const ProcResult r = WithStdout(how, argv);
    EXPECT_TRUE(test::ExitedWith(r, 4)) << how << ": " << argv[1];
    EXPECT_NE(
        r.err.find(StdoutError(how) + "; the run finished and its model was saved to " + model),
        std::string::npos)
        << how << ": " << r.err;
    EXPECT_EQ(test::ReadWholeFile(model).substr(0, 8), "SHMTMODL") << how;
    EXPECT_TRUE(test::SegmentsOf(r.pid).empty()) << "segment left behind";
  }
}

}  // namespace
}  // namespace shmtrain
