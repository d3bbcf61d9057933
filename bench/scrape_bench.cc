// What the Prometheus endpoint costs a training run at P = 4.
//
// Prints, in one run of the real `shmtrain` executable:
//   1. scrape latency while a sync run trains at P = 4: median, 90th percentile and worst of
//      100 scrapes of /metrics (connect to last byte, over loopback), 50 ms apart;
//   2. training throughput (samples/s from the run's JSON summary) of the same fixed-length run,
//      R times without scrapes and R times with a scrape every 100 ms, interleaved (none,
//      scrape, none, ...) so that load drift hits both alike; the medians, their relative
//      difference against the target (under 1% apart), and the run-to-run spread of each side.
// Both sides serve metrics (--metrics-addr 127.0.0.1:0); only the scraping differs.
//
// usage: scrape_bench [R [STEPS]]   (defaults: R = 9 runs per side, STEPS = 20000; about 1.5 min)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

namespace {

using shmtrain::bench::Clock;
using shmtrain::bench::HttpGet;
using shmtrain::bench::LeftMs;
using shmtrain::bench::Median;
using shmtrain::bench::Percentile;
using shmtrain::bench::PollUntil;
using std::chrono::milliseconds;

constexpr int kWorkers = 4;
constexpr int kLatencyScrapes = 100;
constexpr milliseconds kLatencyGap{50};
constexpr milliseconds kScrapeEvery{100};
constexpr milliseconds kScrapeTimeout{5'000};
constexpr milliseconds kEventTimeout{30'000};
constexpr milliseconds kRunTimeout{120'000};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "scrape_bench: %s\n", what.c_str());
  std::exit(1);
}

// GET /metrics; the body size, or -1 on any failure (refused, timeout, not 200, no counter).
long ScrapeOnce(const std::string& addr, milliseconds timeout) {
  const std::string raw = HttpGet(addr, "/metrics", timeout);
  const size_t head = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 200", 0) != 0 || head == std::string::npos) return -1;
  const long body = static_cast<long>(raw.size() - head - 4);
  return raw.find("shmtrain_steps_total") == std::string::npos ? -1 : body;
}

// One `shmtrain train` child: stdout on a pipe read line by line with deadlines, stderr in a
// temporary file shown only when the run fails.
class Trainer {
 public:
  explicit Trainer(const std::vector<std::string>& args) {
    char err_path[] = "/tmp/scrape_bench_stderr.XXXXXX";
    err_fd_ = mkstemp(err_path);
    if (err_fd_ < 0) Die("mkstemp failed");
    unlink(err_path);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) Die("pipe2 failed");
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) Die("fork failed");
    if (pid_ == 0) {
      const int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      dup2(err_fd_, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    out_fd_ = out[0];
    fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  }
  ~Trainer() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Next stdout line before the deadline; false at EOF or timeout.
  bool ReadLine(std::string* line, Clock::time_point deadline) {
    return lines_.ReadLine(out_fd_, line, deadline);
  }

  // Reads lines until one holds `"event":"<event>"`; dies (showing stderr) otherwise.
  std::string WaitFor(const std::string& event) {
    const std::string tag = "\"event\":\"" + event + "\"";
    const Clock::time_point deadline = Clock::now() + kEventTimeout;
    std::string line;
    while (ReadLine(&line, deadline)) {
      if (line.find(tag) != std::string::npos) return line;
    }
    Fail("no " + event + " event");
  }

  // Waits for the exit status (SIGKILL past the deadline); dies unless it is `want`.
  void ExpectExit(int want) {
    const Clock::time_point deadline = Clock::now() + kRunTimeout;
    int st = 0;
    for (;;) {
      std::string line;
      if (!ReadLine(&line, Clock::now() + milliseconds{10})) {  // keeps the pipe drained
        std::this_thread::sleep_for(milliseconds{2});
      }
      const pid_t p = waitpid(pid_, &st, WNOHANG);
      if (p == pid_) break;
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        reaped_ = true;
        Fail("did not end in time");
      }
    }
    reaped_ = true;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != want) {
      Fail("ended with status " + std::to_string(st) + ", expected exit " + std::to_string(want));
    }
  }

  void Interrupt() { kill(pid_, SIGINT); }

 private:
  [[noreturn]] void Fail(const std::string& what) {
    std::string err;
    char chunk[4096];
    lseek(err_fd_, 0, SEEK_SET);
    for (ssize_t n; (n = read(err_fd_, chunk, sizeof chunk)) > 0;) err.append(chunk, n);
    Die("shmtrain (pid " + std::to_string(pid_) + "): " + what + "; stderr:\n" + err);
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool reaped_ = false;
  shmtrain::bench::LineReader lines_;
};

std::string Field(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\":";
  const size_t p = line.find(tag);
  if (p == std::string::npos) Die("no " + key + " in: " + line);
  size_t b = p + tag.size();
  if (line[b] == '"') {
    const size_t e = line.find('"', b + 1);
    return line.substr(b + 1, e - b - 1);
  }
  const size_t e = line.find_first_of(",}", b);
  return line.substr(b, e - b);
}

std::vector<std::string> TrainArgs(int64_t steps, int64_t log_every) {
  return {SHMTRAIN_BIN,
          "train",
          "--example",
          "blobs",
          "--rows",
          "4096",
          "--features",
          "64",
          "--layers",
          "64,256,10",
          "--loss",
          "xent",
          "--lr",
          "0.01",
          "--batch",
          "256",
          "--steps",
          std::to_string(steps),
          "--workers",
          std::to_string(kWorkers),
          "--metrics-addr=127.0.0.1:0",
          "--log-format",
          "json",
          "--log-every",
          std::to_string(log_every),
          "--no-progress"};
}

// Part 1: latency of scrapes while a long run trains.
void MeasureLatency() {
  Trainer t(TrainArgs(100'000'000, 1000));
  const std::string addr = Field(t.WaitFor("metrics"), "address");
  t.WaitFor("step");
  std::vector<double> ms;
  long bytes = 0;
  for (int i = 0; i < kLatencyScrapes; ++i) {
    std::this_thread::sleep_for(kLatencyGap);
    const auto t0 = Clock::now();
    bytes = ScrapeOnce(addr, kScrapeTimeout);
    const auto t1 = Clock::now();
    if (bytes < 0) Die("scrape " + std::to_string(i) + " of " + addr + " failed");
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    std::string line;
    while (t.ReadLine(&line, Clock::now())) {
    }
  }
  t.Interrupt();
  t.ExpectExit(130);
  std::printf(
      "scrape latency at P=%d while training: median %.3f ms, p90 %.3f ms, worst %.3f ms, best "
      "%.3f ms  [%d scrapes %lld ms apart, %ld-byte body]\n",
      kWorkers, Median(ms), Percentile(ms, 0.9), *std::max_element(ms.begin(), ms.end()),
      *std::min_element(ms.begin(), ms.end()), kLatencyScrapes,
      static_cast<long long>(kLatencyGap.count()), bytes);
}

struct RunResult {
  double samples_per_s = 0;
  double wall_s = 0;
  int scrapes = 0;
};

// Part 2: one fixed-length run, with or without a scrape every 100 ms.
RunResult TimedRun(int64_t steps, bool scrape) {
  Trainer t(TrainArgs(steps, 0));
  const std::string addr = Field(t.WaitFor("metrics"), "address");
  // The scraper sleeps until its next scrape (or the end of the run) and wakes for nothing
  // else, so the only extra activity on the machine is the scrapes themselves.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::atomic<int> ok{0};
  std::thread scraper;
  if (scrape) {
    scraper = std::thread([&] {
      Clock::time_point next = Clock::now();
      std::unique_lock<std::mutex> lock(mu);
      while (!stop) {
        lock.unlock();
        if (ScrapeOnce(addr, kScrapeTimeout) >= 0) ok.fetch_add(1);
        lock.lock();
        next += kScrapeEvery;
        cv.wait_until(lock, next, [&] { return stop; });
      }
    });
  }
  const std::string summary = t.WaitFor("summary");
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  if (scraper.joinable()) scraper.join();
  t.ExpectExit(0);
  RunResult r;
  r.samples_per_s = std::atof(Field(summary, "samples_per_s").c_str());
  r.wall_s = std::atof(Field(summary, "wall_s").c_str());
  r.scrapes = ok.load();
  return r;
}

double Spread(const std::vector<RunResult>& runs) {
  double lo = INFINITY, hi = 0;
  for (const RunResult& r : runs) {
    lo = std::min(lo, r.samples_per_s);
    hi = std::max(hi, r.samples_per_s);
  }
  return hi - lo;
}

void Describe(const char* name, const std::vector<RunResult>& runs, double median) {
  std::vector<double> v;
  std::string each;
  for (const RunResult& r : runs) {
    v.push_back(r.samples_per_s);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.0f", each.empty() ? "" : " ", r.samples_per_s);
    each += buf;
  }
  const double lo = *std::min_element(v.begin(), v.end());
  const double hi = *std::max_element(v.begin(), v.end());
  std::printf("  %-22s median %.0f samples/s, spread %.0f..%.0f (%.2f%% of the median)\n", name,
              median, lo, hi, 100 * (hi - lo) / median);
  std::printf("  %-22s runs: %s\n", "", each.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 9;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 20000;
  if (runs < 1 || steps < 1) Die("usage: scrape_bench [R [STEPS]]");
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("machine: %u cores; P=%d workers + the master%s\n", cores, kWorkers,
              cores < static_cast<unsigned>(kWorkers)
                  ? " -> oversubscribed: workers share cores and sleep in barriers (no spinning)"
                  : "");
  std::printf("run: blobs 4096x64, 64-256-10 xent, batch 256, sync, P=%d\n", kWorkers);

  MeasureLatency();

  std::vector<RunResult> none, scraped;
  for (int i = 0; i < runs; ++i) {
    none.push_back(TimedRun(steps, false));
    scraped.push_back(TimedRun(steps, true));
  }
  auto median_of = [](const std::vector<RunResult>& rs) {
    std::vector<double> v;
    for (const RunResult& r : rs) v.push_back(r.samples_per_s);
    return Median(v);
  };
  std::vector<double> walls, counts;
  for (const RunResult& r : scraped) {
    walls.push_back(r.wall_s);
    counts.push_back(r.scrapes);
  }
  const double m_none = median_of(none);
  const double m_scraped = median_of(scraped);
  const double diff = 100 * (m_scraped - m_none) / m_none;
  std::printf(
      "throughput, %lld steps per run, %d runs per side, interleaved (both sides serve metrics; "
      "only the scraping differs):\n",
      static_cast<long long>(steps), runs);
  Describe("no scrapes:", none, m_none);
  Describe("scrape every 100 ms:", scraped, m_scraped);
  std::printf("  (scraped runs: median wall %.2f s, median %.0f successful scrapes per run)\n",
              Median(walls), Median(counts));
  // Paired: run i with scrapes against run i without (they ran back to back), which cancels
  // slow drift; the standard error of their mean says how small a difference this run can see.
  std::vector<double> paired;
  double mean = 0;
  for (int i = 0; i < runs; ++i) {
    paired.push_back(100 * (scraped[i].samples_per_s - none[i].samples_per_s) /
                     none[i].samples_per_s);
    mean += paired.back() / runs;
  }
  double var = 0;
  for (double d : paired) var += (d - mean) * (d - mean) / std::max(1, runs - 1);
  const double se = std::sqrt(var / runs);
  std::printf(
      "  paired (scrape run i vs the run before it): median %+.2f%%, mean %+.2f%%, range %+.2f%% "
      ".. %+.2f%%, standard error of the mean %.2f%%\n",
      Median(paired), mean, *std::min_element(paired.begin(), paired.end()),
      *std::max_element(paired.begin(), paired.end()), se);
  std::printf("throughput with a scrape every 100 ms vs none: %+.2f%%%s (target < 1%%: %s)\n", diff,
              diff > 0 ? " (the scraped runs were faster)" : "",
              std::fabs(diff) < 1.0 ? "met" : "MISSED");
  std::printf(
      "noise: run-to-run spread is %.1f%% / %.1f%% of the medians on this %u-core machine; a "
      "difference below about %.1f%% (2 standard errors) cannot be told from zero here\n",
      100 * Spread(none) / m_none, 100 * Spread(scraped) / m_scraped, cores, 2 * se);
  return 0;
}
