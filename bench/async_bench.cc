// Async updates per second against sync, and against this machine's single-core GEMM rate.
//
// Prints, in one run: the single-core float GEMM rate (Eigen, the product of the model's
// first layer, median of several), then updates/s and samples/s of the real `shmtrain`
// executable training a 784-1024-256-10 MLP (about one million parameters) on synthetic blobs
// with batch 128, for sync and for each async rule at P = 1 and P = 2 (median of R runs after
// one warm-up run per configuration). Then the ratios against the targets: async P = 2 gives
// at least 1.8x the updates/s of P = 1; a dc-asgd-a update costs at most 1.10x an asgd update.
//
// Usage: async_bench [steps (default 300)] [repetitions (default 3)]
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

constexpr int kBatch = 128;
constexpr const char* kLayers = "784,1024,256,10";
// Weights of the first layer (784 -> 1024): the backward pass computes no input gradient there.
constexpr double kFirstLayerWeights = 784.0 * 1024;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The first line of /proc/loadavg without its newline: other processes may share the cores.
std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string line;
  std::getline(f, line);
  return line.empty() ? "unknown" : line;
}

// Single-core GEMM rate in GFLOP/s: the median over `samples` of `iters` products of a
// 1024 x 784 by 784 x 128 float matrix, the shape of the first layer's forward product at
// batch 128. The build defines EIGEN_DONT_PARALLELIZE, as for the workers, so Eigen uses one
// thread and the same kernels the workers run.
double GemmGflops(int samples, int iters) {
  const Eigen::MatrixXf a = Eigen::MatrixXf::Random(1024, 784);
  const Eigen::MatrixXf b = Eigen::MatrixXf::Random(784, kBatch);
  Eigen::MatrixXf c(1024, kBatch);
  c.noalias() = a * b;  // warm-up: caches, page faults of c
  const double flops = 2.0 * 1024 * 784 * kBatch;
  std::vector<double> rates;
  volatile float sink = 0;
  for (int s = 0; s < samples; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      c.noalias() = a * b;
      sink = sink + c(i % 1024, 0);  // keeps every product observable
    }
    const auto t1 = std::chrono::steady_clock::now();
    rates.push_back(flops * iters / std::chrono::duration<double>(t1 - t0).count() / 1e9);
  }
  return Median(rates);
}

// One benchmarked configuration: a mode, an async rule ("" for sync) and a worker count.
struct Config {
  std::string mode;
  std::string rule;
  int workers;
};

// What one run reports: from the JSON summary line, plus the parameter count of the segment.
struct RunResult {
  double wall_s = 0;
  double steps = 0;
  double us_per_step = 0;
  double params = 0;
};

// Value of a numeric field "key":<number> of a JSON line; exits if the field is absent.
// Value of a string field "key":"value" of a JSON line ("" if absent).
std::string StringField(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\":\"";
  const size_t p = line.find(tag);
  if (p == std::string::npos) return "";
  const size_t b = p + tag.size();
  return line.substr(b, line.find('"', b) - b);
}

// Runs `shmtrain train` on the benchmark model for `steps` updates; returns its summary. Exits
// if the run fails or its summary names another mode or rule than the one asked for.
RunResult Run(const Config& c, int steps) {
  std::string cmd = std::string(SHMTRAIN_BIN) + " train --mode " + c.mode;
  if (!c.rule.empty()) cmd += " --rule " + c.rule;
  cmd += " --workers " + std::to_string(c.workers) +
         " --example blobs --rows 8192 --features 784 --layers " + kLayers +
         " --loss xent --init he --lr 0.01 --batch " + std::to_string(kBatch) + " --steps " +
         std::to_string(steps) + " --log-every 0 --log-format json --no-progress --no-metrics";
  const auto events = shmtrain::bench::RunEvents(cmd, {"summary", "segment"});
  const std::string& summary = events.at("summary");
  const std::string& segment = events.at("segment");
  if (StringField(summary, "mode") != c.mode ||
      (!c.rule.empty() && StringField(summary, "rule") != c.rule)) {
    std::fprintf(stderr, "bench: %s reported another mode or rule: %s", cmd.c_str(),
                 summary.c_str());
    std::exit(1);
  }
  RunResult r;
  r.wall_s = shmtrain::bench::NumberField(summary, "wall_s");
  r.steps = shmtrain::bench::NumberField(summary, "steps");
  r.us_per_step = shmtrain::bench::NumberField(summary, "us_per_step");
  r.params = shmtrain::bench::NumberField(segment, "params");
  return r;
}

std::string Label(const Config& c) {
  return c.rule.empty() ? c.mode : c.mode + " " + c.rule;
}

const char* Verdict(bool met) {
  return met ? "met" : "MISSED";
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  if (steps <= 0 || reps <= 0) {
    std::fprintf(stderr, "usage: async_bench [steps > 0] [repetitions > 0]\n");
    return 2;
  }
  std::printf(
      "async_bench: MLP %s, blobs 8192 x 784, batch %d, %d steps per run, median of %d "
      "runs (after 1 warm-up run each); %ld cores; loadavg at start: %s\n",
      kLayers, kBatch, steps, reps, sysconf(_SC_NPROCESSORS_ONLN), LoadAverage().c_str());

  const int gemm_samples = 7, gemm_iters = 50;
  const double gemm = GemmGflops(gemm_samples, gemm_iters);
  std::printf(
      "single-core GEMM (float 1024x784 * 784x%d, Eigen, 1 thread): %.1f GFLOP/s  "
      "[median of %d x %d]\n",
      kBatch, gemm, gemm_samples, gemm_iters);

  // Rows of the table, each at P = 1 and P = 2: configs[2 * row + (P - 1)].
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"sync", ""}, {"async", "asgd"}, {"async", "dc-asgd-c"}, {"async", "dc-asgd-a"}};
  std::vector<Config> configs;
  for (const auto& [mode, rule] : rows) {
    for (int p : {1, 2}) configs.push_back({mode, rule, p});
  }

  // One short warm-up run per configuration (page cache, executable, CPU frequency), then the
  // repetitions in rounds over all configurations, so that a change of the background load
  // during the benchmark falls on every configuration alike rather than on a few.
  const int warm_steps = std::max(10, steps / 10);
  for (const Config& c : configs) Run(c, warm_steps);
  // A one-step run bounds what start-up adds to wall_s: start-up plus a single update.
  const double one_step_s = Run({"async", "asgd", 2}, 1).wall_s;
  std::vector<std::vector<double>> ups(configs.size()), us(configs.size());
  double params = 0;
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i < configs.size(); ++i) {
      const RunResult res = Run(configs[i], steps);
      ups[i].push_back(res.steps / res.wall_s);
      us[i].push_back(res.us_per_step);
      params = res.params;
    }
  }
  std::vector<double> med(configs.size()), med_us(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    med[i] = Median(ups[i]);
    med_us[i] = Median(us[i]);
  }
  auto at = [&](int row, int p) { return med[2 * row + (p - 1)]; };
  auto us_at = [&](int row, int p) { return med_us[2 * row + (p - 1)]; };

  // us/step is the summary's own figure (wall_s / steps), shown as a cross-check.
  std::printf("\n%-16s %33s   %33s\n", "", "P=1", "P=2");
  std::printf("%-16s %10s %11s %10s   %10s %11s %10s\n", "mode/rule", "updates/s", "samples/s",
              "us/step", "updates/s", "samples/s", "us/step");
  for (int row = 0; row < static_cast<int>(rows.size()); ++row) {
    std::printf("%-16s %10.1f %11.0f %10.0f   %10.1f %11.0f %10.0f\n",
                Label(configs[2 * row]).c_str(), at(row, 1), at(row, 1) * kBatch, us_at(row, 1),
                at(row, 2), at(row, 2) * kBatch, us_at(row, 2));
  }
  // Run-to-run noise: the widest max/min of updates/s over the R runs of one cell.
  double spread = 1;
  size_t widest = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto [lo, hi] = std::minmax_element(ups[i].begin(), ups[i].end());
    if (*hi / *lo > spread) {
      spread = *hi / *lo;
      widest = i;
    }
  }
  std::printf("run-to-run spread: widest max/min of updates/s within a cell = %.2f (%s P=%d)\n",
              spread, Label(configs[widest]).c_str(), configs[widest].workers);
  std::printf(
      "\nAn update is 128 samples in both modes, so updates/s and samples/s rank alike. A sync\n"
      "update is one global batch of 128 split over the P workers (64 each at P=2), all\n"
      "gradients taken at the same parameters. An async update is one worker's whole batch of\n"
      "128, its gradient taken at parameters read before the other worker's latest updates\n"
      "(staleness about P-1), so an async update at P=2 does not buy the same progress per\n"
      "update as a sync one. wall_s includes worker start-up; nothing is subtracted (a\n"
      "1-step async asgd P=2 run has wall_s = %.1f ms, start-up plus one update).\n\n",
      one_step_s * 1e3);

  const int kSync = 0, kAsgd = 1, kDcA = 3;
  for (int row = 1; row < static_cast<int>(rows.size()); ++row) {
    const double x = at(row, 2) / at(row, 1);
    std::printf("%-18s updates/s P=2 / P=1 = %.2f  (target >= 1.8: %s)\n",
                Label(configs[2 * row]).c_str(), x, Verdict(x >= 1.8));
  }
  for (int p : {1, 2}) {
    // Time per update is 1 / updates/s, so the time ratio is the inverse updates/s ratio.
    const double x = at(kAsgd, p) / at(kDcA, p);
    std::printf("dc-asgd-a / asgd time per update at P=%d = %.3f  (target <= 1.10: %s)\n", p, x,
                Verdict(x <= 1.10));
  }
  std::printf("sync updates/s P=2 / P=1 = %.2f  (no target; same 128-sample update split in two)\n",
              at(kSync, 2) / at(kSync, 1));
  std::printf("async asgd / sync updates/s at P=2 = %.2f\n", at(kAsgd, 2) / at(kSync, 2));

  // Machine limit: an update is a forward and a backward pass, about 6 * params * batch FLOPs
  // (2 forward, 4 backward: the gradients of the weights and of the activations).
  const double flops = 6.0 * params * kBatch;
  std::printf(
      "\nmachine limit: %.0f params, ~6 * params * %d = %.3f GFLOP per update; at the "
      "single-core GEMM rate (%.1f GFLOP/s) an update takes %.2f ms\n",
      params, kBatch, flops / 1e9, gemm, flops / gemm / 1e6);
  for (int row : {kAsgd, kSync}) {
    const double rate = at(row, 1) * flops / 1e9;
    std::printf(
        "%s: update at P=1 reaches %.0f%% of the single-core GEMM rate (%.2f ms per "
        "update, %.1f GFLOP/s)\n",
        Label(configs[2 * row]).c_str(), 100 * rate / gemm, 1e3 / at(row, 1), rate);
  }
  // The GEMMs the product actually runs: the nominal count less the first layer's input
  // gradient (2 * 784 * 1024 * batch), which nn::LossAndGrad does not compute.
  const double gemm_flops = flops - 2.0 * kFirstLayerWeights * kBatch;
  std::printf(
      "counting only the GEMMs the product runs (no input gradient for layer 1: %.3f GFLOP per "
      "update), async asgd at P=1 reaches %.0f%% of the single-core GEMM rate\n",
      gemm_flops / 1e9, 100 * at(kAsgd, 1) * gemm_flops / 1e9 / gemm);
  std::printf("loadavg at end: %s\n", LoadAverage().c_str());
  return 0;
}
