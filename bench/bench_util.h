// What the benchmarks share: deadline arithmetic, a loopback HTTP GET with a deadline, and
// order statistics. Header-only; each benchmark is one executable.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace shmtrain::bench {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline int LeftMs(Clock::time_point deadline) {
  const auto d = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, d));
}

// Waits for `events` on fd until the deadline; false on timeout or error.
inline bool PollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, LeftMs(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// GET http://addr/path ("HOST:PORT", IPv4) with Connection: close, read to EOF before the
// deadline. The whole response (status line, headers, body), or "" on any failure.
inline std::string HttpGet(const std::string& addr, const std::string& path,
                           milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return "";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::atoi(addr.c_str() + colon + 1)));
  if (inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS || !PollUntil(fd, POLLOUT, deadline)) return "";
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return "";
  }
  const std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < req.size()) {
    const ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!PollUntil(fd, POLLOUT, deadline)) return "";
    } else {
      return "";
    }
  }
  std::string raw;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      raw.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      return raw;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!PollUntil(fd, POLLIN, deadline)) return "";
    } else {
      return "";
    }
  }
}

// Splits what a non-blocking fd delivers into lines, with a deadline per line.
class LineReader {
 public:
  // Next line (without '\n') before the deadline; false at EOF or timeout.
  bool ReadLine(int fd, std::string* line, Clock::time_point deadline) {
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        *line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return true;
      }
      if (eof_ || !PollUntil(fd, POLLIN, deadline)) return false;
      char chunk[4096];
      const ssize_t n = read(fd, chunk, sizeof chunk);
      if (n > 0) {
        buf_.append(chunk, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        eof_ = true;
      }
    }
  }

 private:
  bool eof_ = false;
  std::string buf_;
};

// Value of a number field "key":X of a JSON line; exits naming the key when it is absent.
inline double NumberField(const std::string& line, const std::string& key) {
  const size_t p = line.find("\"" + key + "\":");
  if (p == std::string::npos) {
    std::fprintf(stderr, "bench: no \"%s\" in %s", key.c_str(), line.c_str());
    std::exit(1);
  }
  return std::atof(line.c_str() + p + key.size() + 3);
}

// Runs the shell command `cmd` (a --log-format json run of shmtrain) and returns the last line
// of each of the JSON `events` it printed, by event name. Exits naming the command when it
// fails or one of the events never came.
inline std::map<std::string, std::string> RunEvents(const std::string& cmd,
                                                    const std::vector<std::string>& events) {
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) std::abort();
  std::map<std::string, std::string> last;
  char line[8192];
  while (std::fgets(line, sizeof line, f)) {
    for (const std::string& e : events) {
      if (std::strstr(line, ("\"event\":\"" + e + "\"").c_str()) != nullptr) last[e] = line;
    }
  }
  if (pclose(f) != 0 || last.size() != events.size()) {
    std::fprintf(stderr, "bench: %s failed\n", cmd.c_str());
    std::exit(1);
  }
  return last;
}

// A sync run's summary event (--log-format json): throughput and the per-step phase split
// (mean over workers), and with several hosts the combine's time per step.
struct SyncSummary {
  double us_per_step = 0, samples_per_s = 0;
  double compute_us = 0, reduce_us = 0, barrier_us = 0;
  double combine_us = 0;  // several hosts only
};
inline SyncSummary ParseSyncSummary(const std::string& line, bool hosts) {
  SyncSummary r;
  r.us_per_step = NumberField(line, "us_per_step");
  r.samples_per_s = NumberField(line, "samples_per_s");
  r.compute_us = NumberField(line, "step_compute_us");
  r.reduce_us = NumberField(line, "step_reduce_us");
  r.barrier_us = NumberField(line, "step_barrier_us");
  if (hosts) r.combine_us = NumberField(line, "step_combine_us");
  return r;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(k, v.size() - 1)];
}

}  // namespace shmtrain::bench
