// Sync step cost against this machine's raw cross-process futex round trip.
//
// Prints, in one run: the median futex round trip between two processes (one wakes the other,
// which wakes it back: the floor of any two-process handshake), then the seed example's 2000
// steps at P = 1 and P = 2 (median of several runs of the real `shmtrain` executable): wall
// time, us per step, and the ratio of a step to a round trip. Target: a sync step at P = 2
// costs at most 3 round trips.
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

long Futex(uint32_t* w, int op, uint32_t v) {
  return syscall(SYS_futex, w, op, v, nullptr, nullptr, 0);
}

// Waits (sleeping, no spinning) until *w == want.
void WaitFor(uint32_t* w, uint32_t want) {
  std::atomic_ref<uint32_t> a(*w);
  for (uint32_t v = a.load(); v != want; v = a.load()) Futex(w, FUTEX_WAIT, v);
}

void Set(uint32_t* w, uint32_t v) {
  std::atomic_ref<uint32_t>(*w).store(v);
  Futex(w, FUTEX_WAKE, 1);
}

double FutexRoundTripUs(int iters) {
  auto* w = static_cast<uint32_t*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  *w = 0;
  const pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < iters; ++i) {
      WaitFor(w, 2 * i + 1);
      Set(w, 2 * i + 2);
    }
    _exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    Set(w, 2 * i + 1);
    WaitFor(w, 2 * i + 2);
  }
  const auto t1 = std::chrono::steady_clock::now();
  waitpid(pid, nullptr, 0);
  munmap(w, 4096);
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
}

// The same handshake with both sides spinning on the shared word (no syscall): the floor a
// cross-process barrier can reach while each process has a core.
double SpinRoundTripUs(int iters) {
  auto* w = static_cast<uint32_t*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  std::atomic_ref<uint32_t> a(*w);
  a.store(0);
  const pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < iters; ++i) {
      while (a.load() != static_cast<uint32_t>(2 * i + 1)) __builtin_ia32_pause();
      a.store(2 * i + 2);
    }
    _exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    a.store(2 * i + 1);
    while (a.load() != static_cast<uint32_t>(2 * i + 2)) __builtin_ia32_pause();
  }
  const auto t1 = std::chrono::steady_clock::now();
  waitpid(pid, nullptr, 0);
  munmap(w, 4096);
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs the example; returns {us_per_step, wall_s} from its JSON summary.
std::pair<double, double> RunExample(int workers) {
  const std::string cmd = std::string(SHMTRAIN_BIN) + " example parabola --workers " +
                          std::to_string(workers) + " --log-format json --no-progress --no-metrics";
  const std::string summary = shmtrain::bench::RunEvents(cmd, {"summary"}).at("summary");
  return {shmtrain::bench::NumberField(summary, "us_per_step"),
          shmtrain::bench::NumberField(summary, "wall_s")};
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::vector<double> rts;
  for (int i = 0; i < runs; ++i) rts.push_back(FutexRoundTripUs(20000));
  const double rt = Median(rts);
  std::printf("futex round trip (2 processes, sleeping wait): %.2f us  [median of %d x 20000]\n",
              rt, runs);
  std::vector<double> spins;
  for (int i = 0; i < runs; ++i) spins.push_back(SpinRoundTripUs(200000));
  const double spin = Median(spins);
  std::printf("spin round trip  (2 processes, shared cache line): %.3f us  [median of %d x 200000]\n",
              spin, runs);
  for (int p : {1, 2}) {
    std::vector<double> us, wall;
    for (int i = 0; i < runs; ++i) {
      const auto [u, w] = RunExample(p);
      us.push_back(u);
      wall.push_back(w);
    }
    const double u = Median(us);
    std::printf(
        "parabola 2000 steps P=%d: wall %.4f s, %.2f us/step, step/futex-round-trip = %.2f%s, "
        "step/spin-round-trip = %.1f\n",
        p, Median(wall), u, u / rt,
        p == 2 ? (u / rt <= 3 ? " (target <= 3: met)" : " (target <= 3: MISSED)") : "", u / spin);
  }
  return 0;
}
