// How fast a sync run makes progress again after a worker dies, and what chaos costs it.
//
// Prints, in one run of the real `shmtrain` executable (blobs 8192x64, 64-256-10 xent, batch
// 256, sync, P = 2):
//   1. recovery time, target: a median under 100 ms, measured two ways:
//      a. as the master reports it: a run under --chaos-kill-every 100ms with at least KILLS
//         chaos kills; its summary's restarts, recoveries, recovery_median_s and
//         recovery_max_s (the master measures from reaping the dead worker to the run's step
//         counter moving on);
//      b. end to end, from outside: a run without chaos in which this benchmark SIGKILLs a
//         random worker KILLS times (the newest pid of each rank, from the worker_started
//         events), each time timing from kill() to the first poll of shmtrain_steps_total
//         (HTTP over loopback, every ~1 ms) that shows the counter above its value once the
//         worker is dead; median, 90th percentile and worst. Again counting only progress
//         after the replacement's worker_started event (the counter can move once without it,
//         when the surviving peer was a phase behind). A kill after which the counter does not
//         move for 10 s counts as never recovered, and a fresh run takes the remaining kills;
//   2. throughput: the same run of STEPS steps, R times clean and R times under
//      --chaos-kill-every 1s, interleaved (clean, chaos, clean, ...) so that load drift hits
//      both alike: samples/s medians, their ratio, the run-to-run spread of each side and the
//      kills per chaos run.
// The chaos run of 1a has CHAOS_STEPS steps; it is run again, longer, if it saw fewer than
// KILLS recoveries.
//
// usage: recovery_bench [KILLS [R [STEPS [CHAOS_STEPS]]]]
//        (defaults: KILLS = 50, R = 7 runs per side, STEPS = 30000 (about 5 s a run on a
//        2-core machine), CHAOS_STEPS = 50000; about 1.5 min)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
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

constexpr int kWorkers = 2;
constexpr int kBatch = 256;
constexpr double kTargetMs = 100;
constexpr milliseconds kPollEvery{1};
constexpr milliseconds kScrapeTimeout{5'000};
constexpr milliseconds kEventTimeout{30'000};
constexpr milliseconds kStuckAfter{10'000};  // a kill with no progress this long never recovered
constexpr int kMaxStuck = 3;                 // kills from outside stop after this many
constexpr milliseconds kRunTimeout{300'000};
constexpr int kMinGapMs = 50;  // kills from outside: 50..150 ms after the last recovery
constexpr int kMaxGapMs = 150;

// The `shmtrain` processes running now: Die() stops them (SIGINT, then SIGKILL), since exit()
// runs no destructors and a master left behind would go on training.
std::vector<pid_t>& LiveRuns() {
  static std::vector<pid_t> pids;
  return pids;
}

void Forget(pid_t pid) {
  std::vector<pid_t>& v = LiveRuns();
  v.erase(std::remove(v.begin(), v.end(), pid), v.end());
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "recovery_bench: %s\n", what.c_str());
  for (const pid_t pid : LiveRuns()) {
    kill(pid, SIGINT);
    const Clock::time_point deadline = Clock::now() + milliseconds{3'000};
    while (waitpid(pid, nullptr, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(milliseconds{10});
    }
  }
  std::exit(1);
}

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// GET /metrics; the value of shmtrain_steps_total, or -1 on any failure (refused, timeout,
// not 200, no counter).
int64_t ScrapeSteps(const std::string& addr, milliseconds timeout) {
  const std::string raw = HttpGet(addr, "/metrics", timeout);
  if (raw.rfind("HTTP/1.1 200", 0) != 0) return -1;
  const std::string tag = "\nshmtrain_steps_total{host=\"0\"} ";
  const size_t p = raw.find(tag);
  if (p == std::string::npos) return -1;
  return static_cast<int64_t>(std::strtod(raw.c_str() + p + tag.size(), nullptr));
}

// One `shmtrain train` child: stdout on a pipe read line by line with deadlines, stderr in a
// temporary file shown (its first lines) only when a run goes wrong.
class Trainer {
 public:
  explicit Trainer(const std::vector<std::string>& args) {
    char err_path[] = "/tmp/recovery_bench_stderr.XXXXXX";
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
    LiveRuns().push_back(pid_);
    close(out[1]);
    out_fd_ = out[0];
    fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  }
  ~Trainer() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      Forget(pid_);
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

  // Reads lines until one holds `"event":"<event>"`, handing every line read to `seen`; dies
  // (showing stderr) otherwise.
  template <typename F>
  std::string WaitFor(const std::string& event, F seen) {
    const std::string tag = "\"event\":\"" + event + "\"";
    const Clock::time_point deadline = Clock::now() + kEventTimeout;
    std::string line;
    while (ReadLine(&line, deadline)) {
      seen(line);
      if (line.find(tag) != std::string::npos) return line;
    }
    Fail("no " + event + " event");
  }

  // Drains stdout until the process ends (SIGKILL past the deadline); its wait status.
  int Finish(milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    int st = 0;
    for (;;) {
      std::string line;
      if (!ReadLine(&line, Clock::now() + milliseconds{10})) {
        std::this_thread::sleep_for(milliseconds{2});
      }
      if (waitpid(pid_, &st, WNOHANG) == pid_) break;
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        break;
      }
    }
    reaped_ = true;
    Forget(pid_);
    return st;
  }

  void Interrupt() { kill(pid_, SIGINT); }

  // The first `lines` lines of stderr (no trailing newline), and how many there were in all.
  std::string StderrHead(int lines, long* total = nullptr) {
    std::string err;
    char chunk[4096];
    lseek(err_fd_, 0, SEEK_SET);
    for (ssize_t n; (n = read(err_fd_, chunk, sizeof chunk)) > 0;) err.append(chunk, n);
    if (total != nullptr) *total = std::count(err.begin(), err.end(), '\n');
    size_t cut = 0;
    for (int i = 0; i < lines && cut < err.size(); ++i) {
      const size_t nl = err.find('\n', cut);
      cut = nl == std::string::npos ? err.size() : nl + 1;
    }
    std::string head = err.substr(0, cut);
    while (!head.empty() && head.back() == '\n') head.pop_back();
    return head;
  }

  [[noreturn]] void Fail(const std::string& what) {
    long total = 0;
    const std::string head = StderrHead(10, &total);
    Die("shmtrain (pid " + std::to_string(pid_) + "): " + what + "; stderr (" +
        std::to_string(total) + " lines):\n" + head);
  }

 private:
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

double Num(const std::string& line, const std::string& key) {
  const std::string v = Field(line, key);
  return v == "null" ? NAN : std::atof(v.c_str());
}

std::vector<std::string> TrainArgs(int64_t steps, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {SHMTRAIN_BIN,   "train",
                                "--example",    "blobs",
                                "--rows",       "8192",
                                "--features",   "64",
                                "--layers",     "64,256,10",
                                "--loss",       "xent",
                                "--lr",         "0.01",
                                "--batch",      std::to_string(kBatch),
                                "--workers",    std::to_string(kWorkers),
                                "--steps",      std::to_string(steps),
                                "--log-format", "json",
                                "--log-every",  "0",
                                "--no-progress"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

double Max(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}
double Min(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

const char* Verdict(double median_ms) {
  return median_ms < kTargetMs ? "met" : "MISSED";
}

// Milliseconds, or "never" for a kill the run did not recover from.
std::string FmtMs(double ms) {
  if (!std::isfinite(ms)) return "never";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", ms);
  return buf;
}

// A fixed-length run: its summary, or why it did not produce one.
struct Outcome {
  bool ok = false;
  std::string summary;
  std::string error;  // the master's error event and the first stderr lines
  int crash_restarts = 0;
};

// Runs to the end. Restarts for reason "crash" are a crash loop when nothing but chaos kills
// workers: at `crash_limit` of them the run is stopped (SIGINT) and reported as failed.
Outcome RunFixed(const std::vector<std::string>& args, int crash_limit) {
  Trainer t(args);
  Outcome o;
  const Clock::time_point deadline = Clock::now() + kRunTimeout;
  bool stopped = false;
  std::string line;
  while (t.ReadLine(&line, deadline)) {
    if (line.find("\"event\":\"summary\"") != std::string::npos) o.summary = line;
    if (line.find("\"event\":\"error\"") != std::string::npos) o.error = Field(line, "message");
    if (line.find("\"event\":\"worker_restart\"") != std::string::npos &&
        Field(line, "reason") == "crash" && ++o.crash_restarts >= crash_limit && !stopped) {
      t.Interrupt();
      stopped = true;
    }
  }
  const int st = t.Finish(milliseconds{10'000});
  o.ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && !o.summary.empty();
  if (!o.ok) {
    if (stopped) {
      o.error = "stopped by the benchmark after " + std::to_string(o.crash_restarts) +
                " crash restarts (" + o.error + ")";
    }
    if (o.error.empty()) o.error = "ended with wait status " + std::to_string(st);
    long total = 0;
    std::string head = t.StderrHead(2, &total);
    for (size_t p; (p = head.find('\n')) != std::string::npos;) head.replace(p, 1, " | ");
    o.error += "; stderr (" + std::to_string(total) + " lines): " + head;
  }
  return o;
}

// ---- 1a: the master's own figures under --chaos-kill-every 100ms.
void MasterReported(int kills, int64_t steps) {
  Outcome o;
  int failed = 0;
  int64_t ran = steps;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ran = steps;
    o = RunFixed(TrainArgs(steps, {"--chaos-kill-every", "100ms", "--max-restarts", "100000",
                                   "--no-metrics"}),
                 10);
    if (!o.ok) {
      ++failed;
      std::printf("    (a %lld-step chaos run FAILED: %s)\n", static_cast<long long>(steps),
                  o.error.c_str());
      continue;
    }
    const double rec = Num(o.summary, "recoveries");
    if (rec >= kills) break;
    // Chaos fires 0.5..1.5 x 100 ms apart: kills grow with the run's wall time.
    std::printf("    (%lld steps gave only %.0f recoveries; running again, longer)\n",
                static_cast<long long>(steps), rec);
    steps = static_cast<int64_t>(steps * 1.3 * kills / std::max(1.0, rec));
  }
  if (!o.ok) {
    std::printf("1a. recovery as the master reports it: no chaos run completed (%d failed)\n",
                failed);
    return;
  }
  const double rec = Num(o.summary, "recoveries");
  const double med = 1e3 * Num(o.summary, "recovery_median_s");
  const double worst = 1e3 * Num(o.summary, "recovery_max_s");
  std::printf(
      "1a. recovery as the master reports it (--chaos-kill-every 100ms, %lld steps, wall %.2f "
      "s%s):\n",
      static_cast<long long>(ran), Num(o.summary, "wall_s"),
      failed > 0 ? (", after " + std::to_string(failed) + " FAILED run(s)").c_str() : "");
  std::printf(
      "    %.0f kills (restarts), %.0f recoveries: median %.2f ms, worst %.2f ms (target: median "
      "< %.0f ms: %s)%s\n",
      Num(o.summary, "restarts"), rec, med, worst, kTargetMs, Verdict(med),
      rec < kills ? "  [FEWER recoveries than asked for]" : "");
  std::printf(
      "    (from the master reaping the dead worker to its step counter moving on; it looks at "
      "the counter once per supervisor tick, which sleeps up to 5 ms in poll())\n");
}

// ---- 1b: kills from outside, progress read from the metrics endpoint.
struct WorkerPid {
  pid_t pid = -1;
  int incarnation = -1;
};

// One endless clean run that the benchmark kills workers of.
struct Session {
  std::unique_ptr<Trainer> t;
  std::string addr;
  std::vector<WorkerPid> workers = std::vector<WorkerPid>(kWorkers);
  int restarts = 0;  // worker_restart events

  void Seen(const std::string& line) {
    if (line.find("\"event\":\"worker_restart\"") != std::string::npos) ++restarts;
    if (line.find("\"event\":\"worker_started\"") == std::string::npos) return;
    const int r = std::atoi(Field(line, "rank").c_str());
    const int inc = std::atoi(Field(line, "incarnation").c_str());
    if (r < 0 || r >= kWorkers) Die("worker_started with rank " + std::to_string(r));
    if (inc > workers[r].incarnation) {
      workers[r].pid = static_cast<pid_t>(std::atol(Field(line, "pid").c_str()));
      workers[r].incarnation = inc;
    }
  }
  void Drain() {
    std::string line;
    while (t->ReadLine(&line, Clock::now())) Seen(line);
  }
  // Starts the run and waits until every rank runs and the step counter is past 0.
  void Start() {
    // The kills are crashes to the master: lift the crash-loop budget out of the way.
    t = std::make_unique<Trainer>(
        TrainArgs(1'000'000'000, {"--metrics-addr=127.0.0.1:0", "--max-restarts", "100000"}));
    addr = Field(t->WaitFor("metrics", [&](const std::string& l) { Seen(l); }), "address");
    const Clock::time_point deadline = Clock::now() + kEventTimeout;
    for (;;) {
      Drain();
      const bool all =
          std::all_of(workers.begin(), workers.end(), [](const WorkerPid& w) { return w.pid > 0; });
      if (all && ScrapeSteps(addr, kScrapeTimeout) > 0) return;
      if (Clock::now() > deadline) t->Fail("no progress after start");
      std::this_thread::sleep_for(milliseconds{5});
    }
  }
  void Stop() {
    t->Interrupt();
    const int st = t->Finish(milliseconds{30'000});
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 130) {
      std::printf("    (the run ended with wait status %d after SIGINT, expected exit 130)\n", st);
    }
  }
};

void EndToEnd(int kills) {
  Session s;
  s.Start();
  std::mt19937_64 rng(12345);
  std::vector<double> total_ms, strict_ms, dead_ms, started_ms, poll_ms;
  int early = 0;       // kills after which the counter moved before any replacement existed
  int unexpected = 0;  // restarts beyond the one each kill causes
  int stuck = 0;
  std::vector<std::string> stuck_why;
  int restarts_before = 0;
  for (int k = 0; k < kills; ++k) {
    std::this_thread::sleep_for(
        milliseconds{std::uniform_int_distribution<int>(kMinGapMs, kMaxGapMs)(rng)});
    s.Drain();
    const int r = std::uniform_int_distribution<int>(0, kWorkers - 1)(rng);
    const WorkerPid victim = s.workers[r];
    restarts_before = s.restarts;
    // The master reaps (and so frees the pid) only after the process is dead, and only we kill.
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, victim.pid, 0));
    if (pidfd < 0) Die("pidfd_open(" + std::to_string(victim.pid) + "): " + std::strerror(errno));
    const Clock::time_point t0 = Clock::now();
    if (kill(victim.pid, SIGKILL) != 0) Die("kill: " + std::string(std::strerror(errno)));
    if (!PollUntil(pidfd, POLLIN, t0 + kEventTimeout)) Die("killed worker did not die");
    const Clock::time_point t_dead = Clock::now();
    close(pidfd);
    // The counter once the victim is dead: it cannot move again before a replacement redoes
    // the victim's unfinished phase (except once if its peer was a phase behind).
    const int64_t frozen = ScrapeSteps(s.addr, kScrapeTimeout);
    if (frozen < 0) Die("scrape of " + s.addr + " failed");
    Clock::time_point t_started{}, t_first{}, t_progress{};
    int64_t base = frozen;
    bool moved_early = false;
    bool recovered = false;
    Clock::time_point next = Clock::now();
    for (;;) {
      s.Drain();
      if (t_started == Clock::time_point{} && s.workers[r].incarnation > victim.incarnation) {
        t_started = Clock::now();
      }
      const bool announced = t_started != Clock::time_point{};
      const Clock::time_point s0 = Clock::now();
      const int64_t v = ScrapeSteps(s.addr, kScrapeTimeout);
      const Clock::time_point s1 = Clock::now();
      if (v < 0) Die("scrape of " + s.addr + " failed");
      poll_ms.push_back(Ms(s1 - s0));
      if (v > base) {
        if (t_first == Clock::time_point{}) t_first = s1;
        if (announced) {
          t_progress = s1;
          recovered = true;
          break;
        }
        // Moved before any replacement existed: the peer finishing the phase it was behind
        // in. The run is still stalled; wait for progress past this value.
        moved_early = true;
        base = v;
      }
      if (s1 - t0 > kStuckAfter) break;
      next += kPollEvery;
      std::this_thread::sleep_until(next);
    }
    early += moved_early ? 1 : 0;
    dead_ms.push_back(Ms(t_dead - t0));
    if (!recovered) {
      // Never made progress again: counted as an unbounded recovery; a fresh run goes on.
      ++stuck;
      total_ms.push_back(INFINITY);
      strict_ms.push_back(INFINITY);
      long lines = 0;
      const std::string head = s.t->StderrHead(1, &lines);
      char what[512];
      std::snprintf(
          what, sizeof what,
          "kill %d (rank %d, incarnation %d, counter %lld): no progress in %lld s, "
          "%d restarts meanwhile; stderr: %s",
          k + 1, r, victim.incarnation, static_cast<long long>(base),
          static_cast<long long>(kStuckAfter.count() / 1000), s.restarts - restarts_before,
          lines == 0 ? "empty" : ("(" + std::to_string(lines) + " lines) " + head).c_str());
      stuck_why.push_back(what);
      s.Stop();
      if (stuck >= kMaxStuck) break;
      s = Session();
      s.Start();
      continue;
    }
    unexpected += s.restarts - restarts_before - 1;
    total_ms.push_back(Ms(t_first - t0));
    strict_ms.push_back(Ms(t_progress - t0));
    started_ms.push_back(Ms(t_started - t0));
  }
  if (stuck < kMaxStuck) s.Stop();

  const int done = static_cast<int>(total_ms.size());
  const double med = Median(total_ms);
  std::printf(
      "1b. recovery end to end (%d SIGKILLs of a random worker from outside, %d..%d ms after the "
      "previous recovery; no chaos):\n",
      done, kMinGapMs, kMaxGapMs);
  std::printf(
      "    kill() -> shmtrain_steps_total above its value at the death: median %s, p90 %s, worst "
      "%s, best %s (target: median < %.0f ms: %s)\n",
      FmtMs(med).c_str(), FmtMs(Percentile(total_ms, 0.9)).c_str(), FmtMs(Max(total_ms)).c_str(),
      FmtMs(Min(total_ms)).c_str(), kTargetMs, Verdict(med));
  const double strict = Median(strict_ms);
  std::printf(
      "    counting only progress after the replacement was announced (in %d of %d kills the "
      "counter first moved once without it: the peer finishing the phase it was behind in): "
      "median %s, p90 %s, worst %s (target: median < %.0f ms: %s)\n",
      early, done, FmtMs(strict).c_str(), FmtMs(Percentile(strict_ms, 0.9)).c_str(),
      FmtMs(Max(strict_ms)).c_str(), kTargetMs, Verdict(strict));
  if (!started_ms.empty()) {
    std::printf(
        "    parts: kill() -> exit seen (pidfd) median %.3f ms, worst %.3f ms; kill() -> the "
        "replacement's worker_started read median %.2f ms, worst %.2f ms\n",
        Median(dead_ms), Max(dead_ms), Median(started_ms), Max(started_ms));
  }
  std::printf(
      "    resolution: a poll every %lld ms, each a fresh HTTP/1.1 GET over loopback taking median "
      "%.3f ms, worst %.3f ms (%zu polls)\n",
      static_cast<long long>(kPollEvery.count()), Median(poll_ms), Max(poll_ms), poll_ms.size());
  std::printf(
      "    never recovered: %d of %d kills%s; restarts beyond one per recovered kill: %d\n", stuck,
      done, stuck >= kMaxStuck && done < kills ? " (kills stopped there: too many stuck runs)" : "",
      unexpected);
  for (const std::string& w : stuck_why) std::printf("      STUCK %s\n", w.c_str());
}

// ---- 2: throughput, clean against --chaos-kill-every 1s.
struct RunResult {
  double samples_per_s = 0;
  double wall_s = 0;
  double us_per_step = 0;
  double restarts = 0;
  double recovery_median_ms = NAN;
  double counted_over_steps = 0;  // samples counted / (steps x batch)
};

// One run; false (with the reason printed) if it did not complete.
bool TimedRun(int64_t steps, bool chaos, RunResult* r) {
  std::vector<std::string> extra = {"--no-metrics"};
  if (chaos) extra.insert(extra.end(), {"--chaos-kill-every", "1s"});
  // Default crash-loop budget: a crash loop ends the run by itself.
  const Outcome o = RunFixed(TrainArgs(steps, extra), 1000);
  if (!o.ok) {
    std::printf("    (a %s run FAILED: %s)\n", chaos ? "chaos" : "clean", o.error.c_str());
    return false;
  }
  r->samples_per_s = Num(o.summary, "samples_per_s");
  r->wall_s = Num(o.summary, "wall_s");
  r->us_per_step = Num(o.summary, "us_per_step");
  r->restarts = Num(o.summary, "restarts");
  r->recovery_median_ms = 1e3 * Num(o.summary, "recovery_median_s");
  r->counted_over_steps = r->samples_per_s * r->wall_s / (static_cast<double>(steps) * kBatch);
  return true;
}

template <typename F>
std::vector<double> Each(const std::vector<RunResult>& runs, F f) {
  std::vector<double> v;
  for (const RunResult& r : runs) v.push_back(f(r));
  return v;
}

void Describe(const char* name, const std::vector<RunResult>& runs) {
  const std::vector<double> v = Each(runs, [](const RunResult& r) { return r.samples_per_s; });
  const double m = Median(v);
  std::string each;
  for (double x : v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.0f", each.empty() ? "" : " ", x);
    each += buf;
  }
  std::printf("    %-10s median %.0f samples/s, spread %.0f..%.0f (%.2f%% of the median)\n", name,
              m, Min(v), Max(v), 100 * (Max(v) - Min(v)) / m);
  std::printf("    %-10s runs: %s\n", "", each.c_str());
}

void Throughput(int runs, int64_t steps) {
  std::vector<RunResult> clean, chaos;  // pairs: both runs completed
  int failed_pairs = 0;
  for (int i = 0; i < runs; ++i) {
    RunResult a, b;
    const bool ok_a = TimedRun(steps, false, &a);
    const bool ok_b = TimedRun(steps, true, &b);
    if (ok_a && ok_b) {
      clean.push_back(a);
      chaos.push_back(b);
    } else {
      ++failed_pairs;
    }
  }
  if (clean.empty()) {
    std::printf("2. throughput: no pair of runs completed (%d failed)\n", failed_pairs);
    return;
  }
  const int n = static_cast<int>(clean.size());
  auto sps = [](const RunResult& r) { return r.samples_per_s; };
  const double m_clean = Median(Each(clean, sps));
  const double m_chaos = Median(Each(chaos, sps));
  std::printf(
      "2. throughput, %lld steps per run (median wall: clean %.2f s, chaos %.2f s; clean %.1f "
      "us/step), %d runs per side, interleaved (clean, chaos, ...)%s:\n",
      static_cast<long long>(steps),
      Median(Each(clean, [](const RunResult& r) { return r.wall_s; })),
      Median(Each(chaos, [](const RunResult& r) { return r.wall_s; })),
      Median(Each(clean, [](const RunResult& r) { return r.us_per_step; })), n,
      failed_pairs > 0
          ? (", " + std::to_string(failed_pairs) + " pair(s) dropped: a run FAILED").c_str()
          : "");
  Describe("clean:", clean);
  Describe("chaos 1s:", chaos);
  const std::vector<double> kills = Each(chaos, [](const RunResult& r) { return r.restarts; });
  std::string each;
  double total = 0;
  for (double k : kills) {
    each += (each.empty() ? "" : " ") + std::to_string(static_cast<int>(k));
    total += k;
  }
  std::vector<double> rec;
  for (const RunResult& r : chaos) {
    if (std::isfinite(r.recovery_median_ms)) rec.push_back(r.recovery_median_ms);
  }
  std::printf("    kills per chaos run: median %.0f (each: %s; %.0f in all)", Median(kills),
              each.c_str(), total);
  if (!rec.empty()) {
    std::printf("; median of the runs' recovery medians %.2f ms", Median(rec));
  }
  std::printf("\n");
  // Paired: chaos run i against the clean run just before it; the extra wall time per kill.
  std::vector<double> per_kill, paired;
  for (int i = 0; i < n; ++i) {
    paired.push_back(100 * (chaos[i].samples_per_s - clean[i].samples_per_s) /
                     clean[i].samples_per_s);
    if (chaos[i].restarts > 0) {
      per_kill.push_back(1e3 * (chaos[i].wall_s - clean[i].wall_s) / chaos[i].restarts);
    }
  }
  std::printf(
      "    chaos/clean = %.4f (%+.2f%%); paired (chaos run i vs the clean run before it): median "
      "%+.2f%%, range %+.2f%% .. %+.2f%%",
      m_chaos / m_clean, 100 * (m_chaos / m_clean - 1), Median(paired), Min(paired), Max(paired));
  if (!per_kill.empty()) {
    std::printf("; extra wall time per kill: median %.1f ms", Median(per_kill));
  }
  std::printf("\n");
  const std::vector<double> counted =
      Each(chaos, [](const RunResult& r) { return r.counted_over_steps; });
  std::printf(
      "    samples counted / (steps x batch) in the chaos runs: median %.5f, worst %.5f (1 = no "
      "redone work counted)\n",
      Median(counted), Max(counted));
  std::printf("    noise: run-to-run spread is %.1f%% (clean) / %.1f%% (chaos) of the medians\n",
              100 * (Max(Each(clean, sps)) - Min(Each(clean, sps))) / m_clean,
              100 * (Max(Each(chaos, sps)) - Min(Each(chaos, sps))) / m_chaos);
}

std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "?";
  return a + " " + b + " " + c;
}

int Nproc() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    return static_cast<int>(std::thread::hardware_concurrency());
  }
  return CPU_COUNT(&set);
}

}  // namespace

int main(int argc, char** argv) {
  const int kills = argc > 1 ? std::atoi(argv[1]) : 50;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 7;
  const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 30000;
  const int64_t chaos_steps = argc > 4 ? std::atoll(argv[4]) : 50000;
  if (argc > 5 || kills < 1 || runs < 1 || steps < 2 || chaos_steps < 2) {
    Die("usage: recovery_bench [KILLS [R [STEPS [CHAOS_STEPS]]]]");
  }
  std::signal(SIGPIPE, SIG_IGN);
  const int cores = Nproc();
  std::printf("machine: nproc %d, loadavg %s; P=%d workers + the master%s\n", cores,
              LoadAvg().c_str(), kWorkers,
              cores < kWorkers + 1 ? " (fewer cores than processes)" : "");
  std::printf("run: blobs 8192x64, 64-256-10 xent, batch %d, sync, P=%d\n", kBatch, kWorkers);
  MasterReported(kills, chaos_steps);
  EndToEnd(kills);
  Throughput(runs, steps);
  std::printf("machine after: loadavg %s\n", LoadAvg().c_str());
  return 0;
}
