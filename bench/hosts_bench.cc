// Several hosts, in one run on this machine (each "host" an MPI rank over TCP on loopback):
//   1. The combine of the host masters (master/hosts/hosts.h) against a raw MPI_Allreduce of the
//   same
//      bytes (the 1M-parameter MLP's gradient, 1068810 floats), both timed inside one mpirun
//      job by bench/combine_probe.cc: medians, and their ratio.
//   2. Sync throughput of 2 hosts x 1 worker against 1 host x 2 workers on 784-1024-256-10
//      (blobs, 784 features, 20000 rows, batch 128): medians of N interleaved runs of the real
//      `shmtrain`, the ratio, and the combine's mean time per step inside the 2-host runs.
//   3. The step time to expect at 8 hosts x 16 workers on 10 and 100 Gbit/s, computed from the
//      per-sample compute cost and the in-host reduce rate measured in (2) and the combine's
//      byte count; the network's rate is the link's, which a loopback cannot measure.
// Usage: hosts_bench [runs (default 5)] [steps (default 200)]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

using shmtrain::bench::Median;
using shmtrain::bench::RunEvents;

const std::string kMpirun = std::string(MPIRUN_BIN) +
                            " --allow-run-as-root --oversubscribe --mca btl self,tcp"
                            " --mca btl_tcp_if_include lo";
constexpr int64_t kParams = 1068810;  // 784-1024-256-10
constexpr int kBatch = 128;

using Run = shmtrain::bench::SyncSummary;

Run Train(int hosts, int workers, int64_t steps) {
  std::string cmd = std::string(SHMTRAIN_BIN) +
                    " train --example blobs --features 784 --rows 20000 --loss xent"
                    " --layers 784,1024,256,10 --batch 128 --lr 0.01 --steps " +
                    std::to_string(steps) + " --workers " + std::to_string(workers) +
                    " --log-format json --log-every 0 --no-progress --no-metrics";
  if (hosts > 1) cmd = kMpirun + " -np " + std::to_string(hosts) + " " + cmd;
  return shmtrain::bench::ParseSyncSummary(RunEvents(cmd + " 2>/dev/null", {"summary"}).at("summary"),
                                           hosts > 1);
}

double Field(const std::string& line, const std::string& key) {
  const size_t p = line.find(key + " ");
  if (p == std::string::npos) {
    std::fprintf(stderr, "hosts_bench: no %s in %s\n", key.c_str(), line.c_str());
    std::exit(1);
  }
  return std::atof(line.c_str() + p + key.size() + 1);
}

std::string Probe(int64_t floats) {
  const std::string cmd = kMpirun + " -np 2 " + COMBINE_PROBE_BIN + " " + std::to_string(floats) + " 5";
  FILE* f = popen(cmd.c_str(), "r");
  char line[512] = {};
  std::string out;
  while (f && std::fgets(line, sizeof line, f)) out += line;
  if (f == nullptr || pclose(f) != 0 || out.find("combine_us") == std::string::npos) {
    std::fprintf(stderr, "hosts_bench: %s failed:\n%s", cmd.c_str(), out.c_str());
    std::exit(1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 200;

  // ---- 1. the combine against MPI_Allreduce, same bytes, same job.
  const std::string probe = Probe(kParams);
  const double combine_us = Field(probe, "combine_us"), allreduce_us = Field(probe, "allreduce_us");
  const double bytes = kParams * 4.0;
  std::printf("combine of %lld floats (%.2f MB) between 2 host masters on loopback TCP:\n",
              static_cast<long long>(kParams), bytes / 1e6);
  std::printf("  host combine %8.0f us   raw MPI_Allreduce %8.0f us   combine / allreduce %.2f"
              "   identical floats: %s\n",
              combine_us, allreduce_us, combine_us / allreduce_us,
              Field(probe, "same_bits") == 1 ? "yes" : "NO");
  // Each host sends (H-1)/H of the vector twice.
  std::printf("  bytes each host sends per combine: %.2f MB = %.2f GB/s at the combine's time\n",
              bytes / 1e6, bytes / (combine_us * 1e-6) / 1e9);

  // ---- 2. 2 hosts x 1 worker against 1 host x 2 workers, interleaved.
  std::vector<Run> two_hosts, one_host;
  for (int i = 0; i < runs; ++i) {
    two_hosts.push_back(Train(2, 1, steps));
    one_host.push_back(Train(1, 2, steps));
  }
  auto med = [](const std::vector<Run>& v, double Run::*f) {
    std::vector<double> x;
    for (const Run& r : v) x.push_back(r.*f);
    return Median(x);
  };
  const double s2 = med(two_hosts, &Run::samples_per_s), s1 = med(one_host, &Run::samples_per_s);
  std::printf("784-1024-256-10, blobs 20000 x 784, batch %d, %lld steps, %d interleaved runs each:\n",
              kBatch, static_cast<long long>(steps), runs);
  std::printf("  1 host  x 2 workers: %8.0f samples/s, %7.0f us/step (compute %.0f, reduce+update "
              "%.0f, barrier wait %.0f us)\n",
              s1, med(one_host, &Run::us_per_step), med(one_host, &Run::compute_us),
              med(one_host, &Run::reduce_us), med(one_host, &Run::barrier_us));
  std::printf("  2 hosts x 1 worker : %8.0f samples/s, %7.0f us/step (compute %.0f, reduce+update "
              "%.0f, wait incl. combine %.0f us; combine %.0f us/step)\n",
              s2, med(two_hosts, &Run::us_per_step), med(two_hosts, &Run::compute_us),
              med(two_hosts, &Run::reduce_us), med(two_hosts, &Run::barrier_us),
              med(two_hosts, &Run::combine_us));
  std::printf("  2 hosts x 1 / 1 host x 2 throughput: %.2f\n", s2 / s1);

  // ---- 3. on paper: 8 hosts x 16 workers, batch 128.
  const int H = 8, P = 16;
  // Per-sample compute: a worker of the 1-host run computes batch / 2 samples per step.
  const double us_per_sample = med(one_host, &Run::compute_us) / (kBatch / 2.0);
  // In-host reduce: the 1-host run's reduce+update moves (P + 2) vectors per step (2 slots
  // read, W read and written) over its 2 ranks; scale to 16 slots at the same bytes per us.
  const double reduce_bytes_2 = (2 + 2) * bytes;
  const double reduce_rate = reduce_bytes_2 / med(one_host, &Run::reduce_us);  // bytes/us, 2 ranks
  // 16 ranks share a host's memory bus: assume the 2-rank rate is the bus's (no more).
  const double reduce_us_16 = (P + 2) * bytes / reduce_rate;
  const double compute_us_16 = us_per_sample * kBatch / (H * P);
  const double wire_bytes = 2.0 * (H - 1) / H * bytes;
  std::printf("on paper, 8 hosts x 16 workers, batch %d (%d samples per worker):\n", kBatch,
              kBatch / (H * P));
  std::printf("  compute %.0f us (%.1f us/sample measured, at batch 1 GEMM is less efficient), "
              "in-host reduce of 16 slots %.0f us (%.2f GB/s measured)\n",
              compute_us_16, us_per_sample, reduce_us_16, reduce_rate * 1e-3);
  for (double gbit : {10.0, 100.0}) {
    const double wire_us = wire_bytes * 8 / (gbit * 1e3);
    std::printf("  %3.0f Gbit/s: combine sends %.2f MB per host = %.0f us; step ~ %.0f us "
                "(compute + in-host reduce + combine), %.0f samples/s\n",
                gbit, wire_bytes / 1e6, wire_us, compute_us_16 + reduce_us_16 + wire_us,
                kBatch / ((compute_us_16 + reduce_us_16 + wire_us) * 1e-6));
  }
  return 0;
}
