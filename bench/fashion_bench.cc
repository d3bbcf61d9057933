// Time to accuracy on real data: Fashion-MNIST from the dataset-fashion-mnist package.
//
// 784-256-10 relu, batch 128, features standardised on the training rows, validated on the
// 10,000 test images every quarter epoch (117 steps). Sync: SGD with momentum 0.9, lr 0.01.
// Async: momentum is not available there (each worker applies its gradient at once by a
// DC-ASGD rule), so plain SGD at lr 0.1, the same effective step as 0.01 with momentum 0.9.
// For each of sync and async at P = 1 and 2, N interleaved runs (default 3); printed:
//   - time to >= 85% test accuracy: the first validation that reaches it, on the run's own
//     clock (elapsed_s of its validation event: from the start of training to the moment the
//     evaluated parameters were taken), median of the runs, and the process's wall time to the
//     end of the run (load, start-up and every epoch);
//   - P = 2 / P = 1: the speed-up of the time to accuracy;
//   - the share of the training time the workers spent computing gradients (summary's
//     step_compute_us), the ceiling that more workers can divide.
// Usage: fashion_bench [runs (default 3)] [epochs at most (default 4)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

using shmtrain::bench::Median;
using shmtrain::bench::NumberField;

const std::string kDir = "/usr/share/datasets/fashion-mnist/";

struct Run {
  double to85 = -1;      // s on the run's clock, -1: never reached
  double epoch85 = -1;   // the epoch of that validation
  double wall = 0;       // the whole process, s
  double best = 0;       // best test accuracy seen
  double compute = 0;    // share of the training time spent computing gradients (sync)
};

Run RunOnce(bool sync, int workers, int epochs) {
  const std::string cmd =
      std::string(SHMTRAIN_BIN) + " train --no-metrics --no-progress --log-format json" +
      " --data " + kDir + "train-images-idx3-ubyte.gz --labels " + kDir +
      "train-labels-idx1-ubyte.gz --val-data " + kDir + "t10k-images-idx3-ubyte.gz --val-labels " +
      kDir + "t10k-labels-idx1-ubyte.gz --layers 784,256,10 --activation relu --loss xent" +
      " --normalize standard --batch 128 --eval-every 117 --log-every 0 --epochs " +
      std::to_string(epochs) + " --workers " + std::to_string(workers) +
      (sync ? " --mode sync --lr 0.01 --momentum 0.9" : " --mode async --lr 0.1");
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) std::abort();
  Run r;
  char line[8192];
  std::string summary;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strstr(line, "\"event\":\"validation\"")) {
      const double acc = NumberField(line, "val_accuracy");
      r.best = std::max(r.best, acc);
      if (acc >= 0.85 && r.to85 < 0) {
        r.to85 = NumberField(line, "elapsed_s");
        r.epoch85 = NumberField(line, "epoch");
      }
    }
    if (std::strstr(line, "\"event\":\"summary\"")) summary = line;
  }
  if (pclose(f) != 0 || summary.empty()) {
    std::fprintf(stderr, "bench: %s failed\n", cmd.c_str());
    std::exit(1);
  }
  r.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sync) {
    const double steps = NumberField(summary, "steps");
    r.compute = NumberField(summary, "step_compute_us") * steps / 1e6 / NumberField(summary, "wall_s");
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 4;
  struct Config {
    bool sync;
    int workers;
    const char* name;
    std::vector<Run> runs;
  };
  std::vector<Config> configs = {{true, 1, "sync  P=1", {}}, {true, 2, "sync  P=2", {}},
                                 {false, 1, "async P=1", {}}, {false, 2, "async P=2", {}}};
  for (int k = 0; k < runs; ++k) {
    for (Config& c : configs) c.runs.push_back(RunOnce(c.sync, c.workers, epochs));
  }
  std::printf("Fashion-MNIST 784-256-10 relu, batch 128, 60000 train / 10000 test rows, "
              "validated every 117 steps; %d interleaved runs each, medians:\n", runs);
  std::vector<double> medians;
  for (const Config& c : configs) {
    std::vector<double> t, e, w, b, comp;
    int reached = 0;
    for (const Run& r : c.runs) {
      if (r.to85 >= 0) {
        ++reached;
        t.push_back(r.to85);
        e.push_back(r.epoch85);
      }
      w.push_back(r.wall);
      b.push_back(r.best);
      comp.push_back(r.compute);
    }
    const double to85 = reached ? Median(t) : -1;
    medians.push_back(to85);
    std::printf("  %s: to 85%% test accuracy %6.2f s (epoch %.2f, %d of %d runs reached it), "
                "whole process %6.2f s, best accuracy %.4f", c.name, to85,
                reached ? Median(e) : -1.0, reached, runs, Median(w), Median(b));
    if (c.sync) std::printf(", gradient compute %.0f%% of the training time", 100 * Median(comp));
    std::printf("\n");
  }
  auto ratio = [](double p1, double p2) { return p1 > 0 && p2 > 0 ? p1 / p2 : -1.0; };
  std::printf("  speed-up of the time to 85%%, P=2 over P=1: sync %.2f, async %.2f\n",
              ratio(medians[0], medians[1]), ratio(medians[2], medians[3]));
  return 0;
}
