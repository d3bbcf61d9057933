// Outputs that block, fill the disk, or are left behind (master/files/output_path.h,
// master/files/output_write.h, master/run/signals.h), through the real CLI:
//  - a write into a FIFO whose reader opened it and does not read ends on a stop signal, like
//    any stopped run (its exit code, no segment, no worker); a log on such a FIFO holds up
//    neither the run loop nor the stop;
//  - a checkpoint is a regular file: a FIFO, a device or a descriptor is refused at start;
//  - a character device that cannot be opened (/dev/tty without a terminal) is refused at start;
//  - --save and --checkpoint reserve their bytes at start: a full disk is refused before
//    training;
//  - a temporary file left by a SIGKILL is removed by the next run on that output; a lock file
//    that is a symbolic link is refused, saying so;
//  - the files registered for removal go with a process that a stop or crash signal ends.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/run/signals.h"
#include "tests/proc_util.h"

namespace shmtrain {
namespace {

using std::chrono::milliseconds;
using test::ProcResult;
using test::Subprocess;
using test::TempDir;

constexpr const char* kBin = SHMTRAIN_BIN;
// Generous: sanitizer builds under ctest -j3 are many times slower. A hang still fails.
constexpr milliseconds kRunTimeout{120'000};

// A short run on 200 blobs whose model is 4-256-3 by default (2051 parameters, about 8 KiB in
// a file).
std::vector<std::string> ShortRun(const std::vector<std::string>& extra,
                                  const std::string& layers = "4,256,3") {
  std::vector<std::string> a = {
      kBin,      "train",    "--example", "blobs",  "--rows",       "200",          "--features",
      "4",       "--layers", layers,      "--loss", "xent",         "--lr",         "0.1",
      "--steps", "20",       "--workers", "2",      "--no-metrics", "--log-format", "json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A sync run that goes on far longer than any test waits for.
std::vector<std::string> LongRun(const std::vector<std::string>& extra) {
  std::vector<std::string> a = ShortRun(extra);
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    if (a[i] == "--steps") a[i + 1] = "1000000000";
  }
  return a;
}

// A FIFO that this test opens for reading and never reads, its buffer shrunk to one page, so
// that a writer blocks after 4 KiB.
class StuckReader {
 public:
  explicit StuckReader(const std::string& path) : path_(path) {
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
    fd_ = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
    capacity_ = fcntl(fd_, F_SETPIPE_SZ, 4096);
    EXPECT_GT(capacity_, 0) << std::strerror(errno);
  }
  ~StuckReader() { close(fd_); }
  StuckReader(const StuckReader&) = delete;
  StuckReader& operator=(const StuckReader&) = delete;
  // Whether a writer has filled the buffer (and so waits for room) within timeout. A writer of
  // lines waits with up to a line's bytes free (a write of at most PIPE_BUF bytes goes in
  // whole): `slack` is that line's length at most.
  bool Full(milliseconds timeout, int slack = 0) const {
    const auto deadline = test::Clock::now() + timeout;
    for (;;) {
      int queued = 0;
      if (ioctl(fd_, FIONREAD, &queued) == 0 && queued >= capacity_ - slack) return true;
      if (test::Clock::now() > deadline) return false;
      usleep(10'000);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  int capacity_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Writes that block end on a stop signal.

// --save into a FIFO whose reader never reads: the master waits for room, and SIGTERM, SIGINT
// and SIGHUP each end it as they end any run (128 + n, nothing left behind).
TEST(BlockingOutputs, ASaveThatCannotBeWrittenEndsOnAStopSignal) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    TempDir dir;
    const std::string fifo = dir.File("model.fifo");
    StuckReader reader(fifo);
    Subprocess p(ShortRun({"--save", fifo}));
    ASSERT_TRUE(reader.Full(kRunTimeout)) << "the run never wrote its model: " << p.err();
    usleep(100'000);  // the master is in its write, waiting for room
    const auto t0 = test::Clock::now();
    ASSERT_TRUE(p.Signal(sig));
    const ProcResult r = p.Wait(milliseconds(30'000));
    const auto took = std::chrono::duration_cast<milliseconds>(r.end - t0).count();
    ASSERT_TRUE(test::ExitedWith(r, 128 + sig)) << sigabbrev_np(sig);
    EXPECT_LT(took, 10'000) << "the stop took " << took << " ms";
    EXPECT_NE(r.err.find(std::string("stopped by SIG") + sigabbrev_np(sig) + " while writing " +
                         fifo),
              std::string::npos)
        << r.err;
    test::ExpectCleanedUp(r);
  }
}

// The training log's stdout read by nobody (a paused pager, a pipe nobody drains): the run loop
// only queues its lines (master/log/output_thread.h), so it goes on writing its checkpoints
// while the log waits, and a stop signal ends the run within the drain's bound, its error on
// stderr, nothing left behind.
TEST(BlockingOutputs, AStdoutNobodyReadsStallsNeitherTheRunLoopNorItsStop) {
  TempDir dir;
  const std::string fifo = dir.File("log.fifo");
  const std::string ckpt = dir.File("run.ckpt");
  StuckReader reader(fifo);
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" > " + fifo};
  for (const std::string& a :
       LongRun({"--log-every", "1", "--checkpoint", ckpt, "--checkpoint-every", "500"})) {
    argv.push_back(a);
  }
  Subprocess p(argv);
  ASSERT_TRUE(reader.Full(kRunTimeout, 1024)) << "the run never filled its log's pipe: " << p.err();
  // Checkpoints go on after the pipe filled: two new ones seen, each a new file (renamed in).
  struct stat first {};
  stat(ckpt.c_str(), &first);
  for (int seen = 0; seen < 2;) {
    struct stat st {};
    const auto deadline = test::Clock::now() + milliseconds(30'000);
    for (;;) {
      if (stat(ckpt.c_str(), &st) == 0 && st.st_ino != first.st_ino) break;
      ASSERT_TRUE(test::Clock::now() < deadline)
          << "no new checkpoint in 30 s while the log waited for its reader: " << p.err();
      usleep(10'000);
    }
    first = st;
    ++seen;
  }
  const auto t0 = test::Clock::now();
  ASSERT_TRUE(p.Signal(SIGTERM));
  const ProcResult r = p.Wait(milliseconds(30'000));
  const auto took = std::chrono::duration_cast<milliseconds>(r.end - t0).count();
  ASSERT_TRUE(test::ExitedWith(r, 143)) << r.Describe();
  EXPECT_LT(took, 10'000) << "the stop took " << took << " ms";
  EXPECT_NE(r.err.find("stopped by SIGTERM at step"), std::string::npos) << r.err;
  test::ExpectCleanedUp(r);
}

// predict --out into such a FIFO: the command holds no workers, and a stop signal ends it at
// once, by that signal.
TEST(BlockingOutputs, APredictOutThatCannotBeWrittenEndsOnAStopSignal) {
  TempDir dir;
  const std::string model = dir.File("m.bin");
  ASSERT_TRUE(test::ExitedWith(test::RunProcess(ShortRun({"--save", model}), kRunTimeout), 0));
  std::string rows = "a,b,c,d\n";
  for (int i = 0; i < 400; ++i) rows += "0.1,0.2,0.3,0.4\n";  // about 12 KiB of predictions
  const std::string data = dir.Write("x.csv", rows);
  const std::string fifo = dir.File("p.fifo");
  StuckReader reader(fifo);
  Subprocess p({kBin, "predict", "--model", model, "--data", data, "--out", fifo});
  ASSERT_TRUE(reader.Full(kRunTimeout)) << "predict never wrote: " << p.err();
  usleep(100'000);
  ASSERT_TRUE(p.Signal(SIGTERM));
  const ProcResult r = p.Wait(milliseconds(30'000));
  EXPECT_EQ(r.term_signal, SIGTERM) << r.Describe();
}

// ---------------------------------------------------------------------------------------------
// What an output may be, found at the start.

// A checkpoint must be durable and read back: a FIFO (which made every checkpoint wait 10 s for
// a reader), a device and a descriptor are refused before anything runs.
TEST(OutputKinds, ACheckpointMustBeARegularFile) {
  TempDir dir;
  const std::string fifo = dir.File("ck.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [path, what] :
       std::vector<std::pair<std::string, std::string>>{{fifo, "is a FIFO"},
                                                        {"/dev/null", "is a character device"},
                                                        {"/dev/stdout", "is an open descriptor"}}) {
    const auto t0 = test::Clock::now();
    const ProcResult r = test::RunProcess(LongRun({"--checkpoint", path}), milliseconds(30'000));
    const auto took = std::chrono::duration_cast<milliseconds>(r.end - t0).count();
    EXPECT_TRUE(test::ExitedWith(r, 2)) << path;
    EXPECT_NE(
        r.err.find("--checkpoint " + path + ": " + what + "; a checkpoint must be a regular file"),
        std::string::npos)
        << r.err;
    EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << path << ": workers were started";
    EXPECT_LT(took, 10'000) << path;
  }
}

// /dev/tty in a process without a controlling terminal cannot be opened: found at the start,
// not after the training.
TEST(OutputKinds, ADeviceThatCannotBeOpenedIsRefusedAtTheStart) {
  std::vector<std::string> argv = {"/usr/bin/setsid", "--wait"};
  for (const std::string& a : LongRun({"--save", "/dev/tty"})) argv.push_back(a);
  const ProcResult r = test::RunProcess(argv, milliseconds(30'000));
  EXPECT_TRUE(test::ExitedWith(r, 2));
  EXPECT_NE(r.err.find("--save /dev/tty: the character device /dev/tty cannot be opened for "
                       "writing (No such device or address)"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << "workers were started";
}

// ---------------------------------------------------------------------------------------------
// A full disk, found at the start.

// Runs `shmtrain ARGS...` with a 64 KiB tmpfs mounted at `dir` in a mount namespace of its own
// (root only: GTEST_SKIP otherwise).
ProcResult OnATinyDisk(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> a = {"mount -t tmpfs -o size=64k tmpfs \"$0\" && exec \"$@\"", dir};
  a.insert(a.end(), args.begin(), args.end());
  std::vector<std::string> argv = {"/usr/bin/unshare", "--mount", "--propagation",
                                   "private",          "/bin/sh", "-c"};
  argv.insert(argv.end(), a.begin(), a.end());
  return test::RunProcess(argv, kRunTimeout);
}

TEST(FullDisk, SaveAndCheckpointReserveTheirBytesBeforeTraining) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small file system needs root";
  TempDir dir;
  const std::string disk = dir.File("disk");
  ASSERT_EQ(mkdir(disk.c_str(), 0700), 0);
  // A 4-1024-1024-3 model is 4.2 MB; the file system holds 64 KiB.
  for (const std::string flag : {"--save", "--checkpoint"}) {
    std::vector<std::string> run = ShortRun({flag, disk + "/out.bin"}, "4,1024,1024,3");
    const ProcResult r = OnATinyDisk(disk, run);
    if (r.exited && r.exit_code != 4 && r.err.find("mount") != std::string::npos) {
      GTEST_SKIP() << "cannot mount a tmpfs here: " << r.err;
    }
    EXPECT_TRUE(test::ExitedWith(r, 4)) << flag;
    EXPECT_NE(r.err.find(flag + " " + disk + "/out.bin: cannot reserve the "), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
    EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << flag << ": it trained before refusing";
    EXPECT_TRUE(test::SegmentsOf(r.pid).empty());
  }
  // The same run with room trains and writes its model where the reservation was.
  const ProcResult ok = test::RunProcess(ShortRun({"--save", dir.File("m.bin")}), kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(ok, 0));
  EXPECT_EQ(test::ReadWholeFile(dir.File("m.bin")).substr(0, 8), "SHMTMODL");
  EXPECT_FALSE(test::FileExists(dir.File("m.bin.tmp." + std::to_string(ok.pid))));
}

// A --tensorboard directory on a full disk: its directory can be made, its file's first
// record cannot be written, and the refusal removes what the run made (the file and `sub`),
// not what was there (`kept`). The listing is taken inside the mount namespace, before the
// tiny file system goes with it.
TEST(FullDisk, ARefusedTensorboardDirectoryIsRemovedAgain) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small file system needs root";
  TempDir dir;
  const std::string disk = dir.File("disk");
  ASSERT_EQ(mkdir(disk.c_str(), 0700), 0);
  const std::string script =
      "mount -t tmpfs -o size=64k tmpfs \"$0\" || exit 99; mkdir \"$0/kept\"; "
      "dd if=/dev/zero of=\"$0/fill\" bs=4k 2>/dev/null; \"$@\"; rc=$?; "
      "echo listing:; ls -A \"$0\" \"$0/kept\"; exit $rc";
  std::vector<std::string> argv = {"/usr/bin/unshare", "--mount", "--propagation", "private",
                                   "/bin/sh", "-c", script, disk};
  for (const std::string& a : ShortRun({"--tensorboard", disk + "/kept/sub/deeper"})) {
    argv.push_back(a);
  }
  const ProcResult r = test::RunProcess(argv, kRunTimeout);
  if (r.exited && r.exit_code == 99) GTEST_SKIP() << "cannot mount a tmpfs here: " << r.err;
  EXPECT_TRUE(test::ExitedWith(r, 2)) << r.err;
  EXPECT_NE(r.err.find("--tensorboard " + disk + "/kept/sub/deeper: cannot create "),
            std::string::npos) << r.err;
  EXPECT_TRUE(test::StartedWorkers(r.out).empty()) << "workers were started";
  const size_t at = r.out.find("listing:");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(at), "listing:\n" + disk + ":\nfill\nkept\n\n" + disk + "/kept:\n") << r.out;
}

// ---------------------------------------------------------------------------------------------
// What a killed run leaves, and what the next one does with it.

// A SIGKILLed run leaves its reserved temporary file (no handler runs); the next run that
// locks the same output removes it.
TEST(Leftovers, AKilledRunsTemporaryFileIsRemovedByTheNextRun) {
  TempDir dir;
  const std::string model = dir.File("m.bin");
  Subprocess first(LongRun({"--save", model}));
  std::string line;
  while (first.ReadLine(&line, kRunTimeout) && test::JsonField(line, "event") != "worker_started") {
  }
  const std::string tmp = model + ".tmp." + std::to_string(first.pid());
  EXPECT_TRUE(test::FileExists(tmp)) << "no reservation while the run trains";
  ASSERT_TRUE(first.Signal(SIGKILL));
  const ProcResult killed = first.Wait(kRunTimeout);
  ASSERT_EQ(killed.term_signal, SIGKILL) << killed.Describe();
  ASSERT_TRUE(test::FileExists(tmp)) << "a SIGKILLed run cannot remove it";
  // Another run's temporary file of another output is not this output's to remove.
  const std::string other = dir.Write("other.bin.tmp.1", "x");
  const ProcResult r = test::RunProcess(ShortRun({"--save", model}), kRunTimeout);
  EXPECT_TRUE(test::ExitedWith(r, 0));
  EXPECT_FALSE(test::FileExists(tmp)) << "the killed run's temporary file is still there";
  EXPECT_TRUE(test::FileExists(other));
  for (const pid_t w : test::StartedWorkers(killed.out)) test::WaitPidGone(w, milliseconds(5000));
  for (const std::string& name : test::SegmentsOf(killed.pid)) shm_unlink(name.c_str());
}

// A lock file is never followed through a symbolic link (a planted one would have the run
// truncate what it leads to): refused, and the message says what it is, not ELOOP's text.
TEST(Leftovers, ALockFileThatIsASymbolicLinkIsRefusedSayingSo) {
  TempDir dir;
  const std::string model = dir.File("m.bin"), victim = dir.Write("victim", "keep me");
  ASSERT_EQ(symlink(victim.c_str(), (model + ".lock").c_str()), 0);
  const ProcResult r = test::RunProcess(LongRun({"--save", model}), milliseconds(30'000));
  EXPECT_TRUE(test::ExitedWith(r, 2));
  EXPECT_NE(r.err.find("--save " + model + ": its lock file " + model +
                       ".lock is a symbolic link, which shmtrain never follows there"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("Too many levels"), std::string::npos) << r.err;
  EXPECT_EQ(test::ReadWholeFile(victim), "keep me");
}

// What a process registers for removal goes with it when a stop signal (in the commands
// without workers) or a crash signal ends it; what it has forgotten stays.
TEST(Leftovers, RegisteredFilesGoWithAProcessThatASignalEnds) {
  std::vector<std::pair<master::StopAction, int>> cases = {
      {master::StopAction::kRemoveAndDie, SIGTERM}};
#ifndef SHMTRAIN_SANITIZED  // sanitized builds keep the sanitizers' own crash handlers
  cases.insert(cases.end(), {{master::StopAction::kRaiseFlag, SIGSEGV},
                             {master::StopAction::kRemoveAndDie, SIGABRT}});
#endif
  for (const auto& [stop, sig] : cases) {
    TempDir dir;
    const std::string gone = dir.Write("gone", ""), kept = dir.Write("kept", "");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      master::InstallSignalHandlers(stop);
      master::RemovedOnDeath a(gone), b(kept);
      b.Forget();
      kill(getpid(), sig);
      _exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    EXPECT_FALSE(test::FileExists(gone)) << "SIG" << sigabbrev_np(sig);
    EXPECT_TRUE(test::FileExists(kept)) << "SIG" << sigabbrev_np(sig);
  }
}

}  // namespace
}  // namespace shmtrain
