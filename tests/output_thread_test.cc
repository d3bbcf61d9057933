// The master's output written by a thread of its own (master/log/output_thread.h), on pipes:
// both streams in the order they were queued; a reader that does not read never blocks Put,
// and a stopped run's drain gives up on it and still writes the stderr lines; lines past the
// bound are dropped, counted and named on stderr; a failed stdout is the status and takes no
// more lines.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "master/log/output_thread.h"

namespace shmtrain::master {
namespace {

using Stream = OutputThread::Stream;
using Clock = std::chrono::steady_clock;

bool Never() { return false; }
bool Always() { return true; }

// A pipe whose read end does not block (ReadAvailable), its buffer one page.
struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    r = fds[0];
    w = fds[1];
    EXPECT_EQ(fcntl(r, F_SETFL, O_NONBLOCK), 0);
    EXPECT_GT(fcntl(w, F_SETPIPE_SZ, 4096), 0);
  }
  ~Pipe() {
    if (r >= 0) close(r);
    close(w);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  // What the pipe holds now.
  std::string ReadAvailable() const {
    std::string s;
    char buf[4096];
    for (ssize_t n; (n = read(r, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
    return s;
  }
};

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(OutputThread, WritesBothStreamsInTheOrderTheyWereQueued) {
  Pipe both;
  {
    OutputThread t(both.w, both.w);
    t.Put(Stream::kOut, "log 1\n");
    t.Put(Stream::kErr, "\r\033[K");
    t.Put(Stream::kOut, "log 2\n");
    t.Put(Stream::kErr, "");
    t.Put(Stream::kErr, "epoch 1/2\n");
    EXPECT_TRUE(t.Drain(Never));
    EXPECT_TRUE(t.stdout_status().ok());
  }
  EXPECT_EQ(both.ReadAvailable(), "log 1\n\r\033[Klog 2\nepoch 1/2\n");
}

// 200 KB for a 4 KiB pipe nobody reads: Put returns at once; a drain that was never stopped
// would wait for the reader, a stopped one gives up after kStoppingStall without a write and
// still writes the error to stderr.
TEST(OutputThread, AReaderThatDoesNotReadBlocksNeitherPutNorAStoppedDrain) {
  Pipe out, err;
  OutputThread t(out.w, err.w);
  std::future<void> put = std::async(std::launch::async, [&] {
    for (int i = 0; i < 2000; ++i) t.Put(Stream::kOut, std::string(99, 'x') + "\n");
    t.Put(Stream::kErr, "shmtrain: error: stopped by SIGTERM at step 7\n");
  });
  ASSERT_EQ(put.wait_for(std::chrono::seconds{30}), std::future_status::ready)
      << "Put blocked on a reader that does not read";
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(t.Drain(Always));
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, OutputThread::kStoppingStall);
  EXPECT_LT(waited, std::chrono::seconds{30});
  EXPECT_EQ(err.ReadAvailable(), "shmtrain: error: stopped by SIGTERM at step 7\n");
  // What the pipe took: whole lines, the first ones.
  const std::string got = out.ReadAvailable();
  EXPECT_EQ(got.size() % 100, 0u);
  EXPECT_EQ(got.substr(0, 100), std::string(99, 'x') + "\n");
  // The writer's last line goes in now that there is room; the destructor drains it.
}

// A 1,000-byte bound, a reader that starts late: what was written plus what was dropped is
// every line, and stderr names the dropped ones each time the queue has emptied.
TEST(OutputThread, LinesPastTheBoundAreDroppedCountedAndNamedOnStderr) {
  Pipe out, err;
  OutputThread t(out.w, err.w, 1000);
  for (int i = 0; i < 100; ++i) t.Put(Stream::kOut, std::string(99, 'y') + "\n");
  std::string got;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      got += out.ReadAvailable();
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
    got += out.ReadAvailable();
  });
  EXPECT_TRUE(t.Drain(Never));
  done = true;
  reader.join();
  // A note each time the queue emptied with lines dropped since the last.
  const std::string notes = err.ReadAvailable();
  const std::string head = "shmtrain: warning: ";
  const std::string tail =
      " lines of output were dropped: more than 1000 bytes waited for their reader";
  int dropped = 0;
  size_t at = 0;
  for (size_t end; (end = notes.find('\n', at)) != std::string::npos; at = end + 1) {
    const std::string note = notes.substr(at, end - at);
    ASSERT_EQ(note.rfind(head, 0), 0u) << notes;
    ASSERT_GT(note.size(), head.size() + tail.size()) << notes;
    ASSERT_EQ(note.substr(note.size() - tail.size()), tail) << notes;
    dropped += std::stoi(note.substr(head.size()));
  }
  EXPECT_EQ(at, notes.size()) << "a note without its line break: " << notes;
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(Lines(got) + dropped, 100) << "written " << Lines(got) << ", dropped " << dropped;
}

TEST(OutputThread, AFailedStdoutIsTheStatusAndTakesNoMoreLines) {
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  {
    Pipe out, err;
    close(out.r);
    out.r = -1;
    OutputThread t(out.w, err.w);
    t.Put(Stream::kOut, "lost\n");
    t.Put(Stream::kErr, "said\n");
    EXPECT_TRUE(t.Drain(Never));
    EXPECT_EQ(t.stdout_status().message(), "cannot write standard output: Broken pipe");
    t.Put(Stream::kOut, "not tried\n");
    t.Put(Stream::kErr, "said again\n");
    EXPECT_TRUE(t.Drain(Never));
    EXPECT_EQ(err.ReadAvailable(), "said\nsaid again\n");
  }
  sigaction(SIGPIPE, &old, nullptr);
}

}  // namespace
}  // namespace shmtrain::master
