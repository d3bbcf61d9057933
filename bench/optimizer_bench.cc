// Optimizers and sync scaling against this machine's memory bandwidth, in one run.
//
// Prints:
//   1. The memory bandwidth: a triad (a = b + s*c over 3 x 64 MiB) in one process, and in P
//      processes at once (their sum), best of several passes.
//   2. For the 1M-parameter MLP 784-1024-256-10 and for 784-256-10 (blobs, 784 features, 20000
//      rows, batch 128): a sync step at P = 2 with sgd, sgd + momentum 0.9 and adam (medians of
//      interleaved runs of the real `shmtrain`), and adam's step / sgd's step (target <= 1.15).
//   3. The reduce + update phase of those runs (from the summary's per-step phase split): the
//      bytes it moves per second, summed over the ranks, as a ratio of the P-process bandwidth
//      (target >= 0.5). Bytes of one rank per step: its slice of every slot, of W and of the K
//      state vectors read, and of W and the K states written: slice * 4 * (P + 2 * (1 + K)).
//   4. Sync P=2 / P=1 throughput (samples/s), median of N interleaved runs each, the spread
//      (max / min) of the P=2 runs, and the phase split (compute, reduce+update, barrier wait
//      per step, mean over workers) of the median runs.
// Usage: optimizer_bench [runs (default 5)] [steps of the 1M MLP (default 200)]
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

using shmtrain::bench::Median;
using shmtrain::bench::RunEvents;

// Bytes per second of a = b + s*c over n floats, best of `passes`, counting the three streams.
double TriadBandwidth(size_t n, int passes) {
  std::vector<float> a(n, 0), b(n, 1), c(n, 2);
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 3.0 * n * sizeof(float) / s);
    b[p % n] = a[(p * 7) % n];  // keep the passes from being folded together
  }
  return best;
}

// The triad in `procs` processes at once; the sum of their rates.
double ParallelBandwidth(int procs, size_t n, int passes) {
  auto* out = static_cast<double*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  std::vector<pid_t> kids;
  for (int p = 0; p < procs; ++p) {
    const pid_t pid = fork();
    if (pid == 0) {
      out[p] = TriadBandwidth(n, passes);
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  double sum = 0;
  for (int p = 0; p < procs; ++p) sum += out[p];
  munmap(out, 4096);
  return sum;
}

using Result = shmtrain::bench::SyncSummary;

Result Run(const std::string& layers, int workers, const std::string& opt, int64_t steps) {
  const std::string cmd = std::string(SHMTRAIN_BIN) +
                          " train --example blobs --features 784 --rows 20000 --loss xent"
                          " --layers " + layers + " --batch 128 --lr 0.01 --steps " +
                          std::to_string(steps) + " --workers " + std::to_string(workers) + " " +
                          opt + " --log-format json --log-every 0 --no-progress --no-metrics";
  return shmtrain::bench::ParseSyncSummary(RunEvents(cmd, {"summary"}).at("summary"), false);
}

int64_t ParamCount(const std::vector<int>& l) {
  int64_t n = 0;
  for (size_t i = 0; i + 1 < l.size(); ++i) n += static_cast<int64_t>(l[i + 1]) * (l[i] + 1);
  return n;
}

std::string Split(const Result& r) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "compute %.0f us, reduce+update %.0f us, barrier wait %.0f us",
                r.compute_us, r.reduce_us, r.barrier_us);
  return buf;
}

struct Model {
  const char* name;
  std::string layers;
  std::vector<int> sizes;
  int64_t steps;
};

void Optimizers(const Model& m, int runs, double bw2) {
  struct Opt {
    const char* name;
    const char* flags;
    int states;
  };
  const Opt opts[] = {{"sgd", "", 0}, {"sgd+momentum", "--momentum 0.9", 1}, {"adam", "--optimizer adam", 2}};
  std::map<std::string, std::vector<Result>> res;
  for (int i = 0; i < runs; ++i) {
    for (const Opt& o : opts) res[o.name].push_back(Run(m.layers, 2, o.flags, m.steps));
  }
  const int64_t n = ParamCount(m.sizes);
  std::map<std::string, double> step;
  for (const Opt& o : opts) {
    std::vector<double> us, red;
    for (const Result& r : res[o.name]) {
      us.push_back(r.us_per_step);
      red.push_back(r.reduce_us);
    }
    step[o.name] = Median(us);
    // Both ranks move their half at once: the phase's bytes over its time, summed over ranks.
    const double bytes = static_cast<double>(n) * 4 * (2 + 2 * (1 + o.states));
    const double rate = bytes / (Median(red) * 1e-6);
    std::printf("  %-13s P=2: %8.0f us/step; reduce+update %6.0f us = %5.2f GB/s = %.2f of the "
                "2-process bandwidth%s\n",
                o.name, step[o.name], Median(red), rate / 1e9, rate / bw2,
                rate / bw2 >= 0.5 ? "" : " (target >= 0.5: MISSED)");
  }
  const double ratio = step["adam"] / step["sgd"];
  std::printf("  adam / sgd step at P=2: %.3f%s; adam / sgd+momentum: %.3f\n", ratio,
              ratio <= 1.15 ? " (target <= 1.15: met)" : " (target <= 1.15: MISSED)",
              step["adam"] / step["sgd+momentum"]);
}

void Scaling(const Model& m, int runs) {
  std::vector<Result> one, two;
  for (int i = 0; i < runs; ++i) {
    one.push_back(Run(m.layers, 1, "--momentum 0.9", m.steps));
    two.push_back(Run(m.layers, 2, "--momentum 0.9", m.steps));
  }
  auto by_rate = [](std::vector<Result> v) {
    std::sort(v.begin(), v.end(),
              [](const Result& a, const Result& b) { return a.samples_per_s < b.samples_per_s; });
    return v;
  };
  const std::vector<Result> s1 = by_rate(one), s2 = by_rate(two);
  const Result& m1 = s1[s1.size() / 2];
  const Result& m2 = s2[s2.size() / 2];
  std::string list;
  for (const Result& r : two) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.0f", list.empty() ? "" : ", ", r.samples_per_s);
    list += b;
  }
  const double scale = m2.samples_per_s / m1.samples_per_s;
  const double spread = s2.back().samples_per_s / s2.front().samples_per_s;
  std::printf("  sync P=2 / P=1 throughput: %.2f (median %.0f / %.0f samples/s)%s\n", scale,
              m2.samples_per_s, m1.samples_per_s, scale >= 1.8 ? " (target >= 1.8: met)" : " (target >= 1.8: MISSED)");
  std::printf("  P=2 runs: %s samples/s; spread max/min %.3f%s\n", list.c_str(), spread,
              spread <= 1.15 ? " (target <= 1.15: met)" : " (target <= 1.15: MISSED)");
  std::printf("  P=1 runs: spread max/min %.3f (the machine's own run-to-run swing, no barrier)\n",
              s1.back().samples_per_s / s1.front().samples_per_s);
  std::printf("  phase split per step, P=1 median run: %s\n", Split(m1).c_str());
  std::printf("  phase split per step, P=2 median run: %s\n", Split(m2).c_str());
  std::printf("  phase split per step, P=2 slowest run: %s\n", Split(s2.front()).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  const int64_t big_steps = argc > 2 ? std::atoll(argv[2]) : 200;
  constexpr size_t kFloats = size_t{16} << 20;  // 64 MiB per array: well past any cache
  const double bw1 = TriadBandwidth(kFloats, 5);
  const double bw2 = ParallelBandwidth(2, kFloats, 5);
  std::printf("memory bandwidth (triad, 3 x 64 MiB): 1 process %.2f GB/s, 2 processes %.2f GB/s "
              "in all\n", bw1 / 1e9, bw2 / 1e9);
  const Model models[] = {
      {"784-1024-256-10 (1M parameters)", "784,1024,256,10", {784, 1024, 256, 10}, big_steps},
      {"784-256-10", "784,256,10", {784, 256, 10}, 1500},
  };
  for (const Model& m : models) {
    std::printf("%s, blobs 20000 x 784, batch 128, %lld steps, %lld parameters:\n", m.name,
                static_cast<long long>(m.steps), static_cast<long long>(ParamCount(m.sizes)));
    Optimizers(m, std::max(3, runs / 2 + 1), bw2);
    Scaling(m, runs);
  }
  return 0;
}
