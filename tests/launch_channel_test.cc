// A host master's channel to `shmtrain launch` (master/log/report.h), against a listening
// socket of the test's own: events from several threads arrive as whole lines, a bad or
// unreachable address is refused by name, and the launcher's `stop` raises SIGTERM in this
// process. Threads: ASan and TSan run it.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "master/log/report.h"
#include "tests/proc_util.h"

namespace shmtrain::master {
namespace {

using test::LoopbackListener;

// Reads from fd until `lines` lines have come or 5 s have passed.
std::vector<std::string> ReadLines(int fd, size_t lines) {
  std::string got;
  std::vector<std::string> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (out.size() < lines && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = got.find('\n')) != std::string::npos; got.erase(0, nl + 1)) {
      out.push_back(got.substr(0, nl));
    }
  }
  return out;
}

TEST(LaunchChannel, EventsFromSeveralThreadsArriveAsWholeLines) {
  LoopbackListener l;
  std::unique_ptr<LaunchChannel> channel;
  ASSERT_TRUE(LaunchChannel::Connect(l.address(), 2.0, &channel).ok());
  const int peer = accept4(l.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(peer, 0);
  constexpr int kEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        channel->Send("{\"event\":\"e\",\"thread\":" + std::to_string(t) +
                      ",\"i\":" + std::to_string(i) + "}");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = ReadLines(peer, 2 * kEach);
  ASSERT_EQ(lines.size(), 2u * kEach);
  int next[2] = {0, 0};
  for (const std::string& line : lines) {
    const int t = line.find("\"thread\":1") != std::string::npos ? 1 : 0;
    // Each thread's lines whole and in its order.
    EXPECT_EQ(line, "{\"event\":\"e\",\"thread\":" + std::to_string(t) +
                        ",\"i\":" + std::to_string(next[t]++) + "}");
  }
  close(peer);
}

TEST(LaunchChannel, ABadOrUnreachableAddressIsRefusedByName) {
  std::unique_ptr<LaunchChannel> channel;
  const Status bad = LaunchChannel::Connect("no-port-here", 1.0, &channel);
  EXPECT_EQ(bad.code(), Status::Code::kUsage);
  EXPECT_NE(bad.message().find("SHMTRAIN_LAUNCH_REPORT=no-port-here: not HOST:PORT"),
            std::string::npos)
      << bad.message();
  int port = 0;
  {
    LoopbackListener closed;  // a port that was just free: nothing listens there once it is closed
    port = closed.port();
  }
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const Status unreachable = LaunchChannel::Connect(address, 1.0, &channel);
  EXPECT_EQ(unreachable.code(), Status::Code::kResource);
  EXPECT_NE(unreachable.message().find(address + ": cannot reach the launcher"), std::string::npos)
      << unreachable.message();
}

std::atomic<int> g_terms{0};

// SIGTERM counted in g_terms (from 0) while it lives, and a channel listening on a connection
// whose launcher's end is `peer`.
struct Listening {
  struct sigaction old {};
  LoopbackListener l;
  std::unique_ptr<LaunchChannel> channel;
  int peer = -1;
  Listening() {
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_terms.fetch_add(1); };
    sigemptyset(&sa.sa_mask);
    EXPECT_EQ(sigaction(SIGTERM, &sa, &old), 0);
    g_terms = 0;
    EXPECT_TRUE(LaunchChannel::Connect(l.address(), 2.0, &channel).ok());
    peer = accept4(l.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(peer, 0);
    if (channel) channel->ListenForStop();
  }
  ~Listening() {
    if (peer >= 0) close(peer);
    channel.reset();
    sigaction(SIGTERM, &old, nullptr);
  }
};

TEST(LaunchChannel, TheLaunchersStopRaisesSigterm) {
  Listening c;
  ASSERT_TRUE(c.channel != nullptr && c.peer >= 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(g_terms.load(), 0) << "SIGTERM before the launcher said stop";
  const std::string stop = "{\"event\":\"stop\"}\n";
  ASSERT_EQ(send(c.peer, stop.data(), stop.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(stop.size()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (g_terms.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(g_terms.load(), 1);
  // The listening thread has returned after the stop: closing the connection now is not taken
  // for the launcher's death (which would end this process a minute later).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

TEST(LaunchChannel, AChannelDestroyedWhileListeningEndsItsThreadQuietly) {
  Listening c;
  ASSERT_TRUE(c.channel != nullptr && c.peer >= 0);
  c.channel.reset();  // the thread's read ends: not the launcher's death
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(g_terms.load(), 0) << "a destroyed channel taken for the launcher's end";
  close(c.peer);
  c.peer = -1;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(g_terms.load(), 0);
}

}  // namespace
}  // namespace shmtrain::master
