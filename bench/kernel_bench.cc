// The kernels of nn/gemm.h against the core's own limit, measured in the same run.
//
// Prints the float FMA peak of one core (a loop of independent 512-bit FMAs, and of 256-bit
// ones: AVX2's) and the bf16 dot-product peak (vdpbf16ps), then, for each kernel this CPU runs
// (avx2, avx512, and bf16 against the bf16 peak), GFLOP/s of the products of
// cnn-small's second convolution and dense layers and of the benchmarks' 1M-parameter MLP
// (784-1024-256-10), each as the layer computes it (forward, weight gradient, input gradient),
// with the ratio to the path's peak. Medians of interleaved runs.
//
// Usage: kernel_bench [runs=7]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/peak.h"
#include "nn/cpu.h"
#include "nn/gemm.h"

using namespace shmtrain;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Product {
  const char* what;
  int64_t m, n, k;
  bool ta, tb;
};

// As the layers call nn::Gemm (nn/layers/linear.cc, conv2d.cc).
const std::vector<Product>& Products() {
  static const std::vector<Product> p = {
      // cnn-small's conv2 (32 -> 64 channels, 5x5, 14x14 pixels), 8 samples an im2col chunk.
      {"conv2 forward      64 x 1568 x 800", 64, 1568, 800, false, false},
      {"conv2 weight grad  64 x 800 x 1568", 64, 800, 1568, false, true},
      {"conv2 input grad   800 x 1568 x 64", 800, 1568, 64, true, false},
      // cnn-small's linear(128) on 3136 features, batch 64.
      {"linear1 forward    128 x 64 x 3136", 128, 64, 3136, false, false},
      {"linear1 weight grad 128 x 3136 x 64", 128, 3136, 64, false, true},
      {"linear1 input grad 3136 x 64 x 128", 3136, 64, 128, true, false},
      // The MLP 784-1024-256-10 at batch 128: its largest layer.
      {"mlp fc1 forward    1024 x 128 x 784", 1024, 128, 784, false, false},
      {"mlp fc1 weight grad 1024 x 784 x 128", 1024, 784, 128, false, true},
      {"mlp fc2 input grad 1024 x 128 x 256", 1024, 128, 256, true, false},
  };
  return p;
}

using Kernel = void (*)(int64_t, int64_t, int64_t, nn::Operand, nn::Operand, float*, int64_t,
                        bool);

double Gflops(const Product& p, Kernel kernel) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(p.m * p.k), b(p.k * p.n), c(p.m * p.n);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const int64_t lda = p.ta ? p.k : p.m, ldb = p.tb ? p.n : p.k;
  const double flops = 2.0 * p.m * p.n * p.k;
  const int reps = std::max<int>(3, static_cast<int>(2e9 / flops));
  kernel(p.m, p.n, p.k, {a.data(), lda, p.ta}, {b.data(), ldb, p.tb}, c.data(), p.m, false);
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) {
    kernel(p.m, p.n, p.k, {a.data(), lda, p.ta}, {b.data(), ldb, p.tb}, c.data(), p.m, false);
  }
  return flops * reps / Seconds(t0, Clock::now()) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 7;
  const nn::CpuFeatures cpu = nn::DetectedCpu();
  std::printf("CPU: avx512 %s, avx512_bf16 %s; this process's path: %s\n", cpu.avx512 ? "yes" : "no",
              cpu.avx512_bf16 ? "yes" : "no", nn::PathName(nn::UsedPath()));
  struct Path {
    const char* name;
    Kernel kernel;
    double (*peak)();
  };
  std::vector<Path> paths = {{"avx2", nn::GemmAvx2, bench::Fma256Peak}};
  if (cpu.avx512) paths.push_back({"avx512", nn::GemmAvx512, bench::Fma512Peak});
  // bf16 products (--precision bf16) against the vdpbf16ps peak.
  if (cpu.avx512_bf16) paths.push_back({"bf16", nn::GemmAvx512Bf16, bench::Bf16DotPeak});
  // [path][product] rates of every run, and each path's peak per run: interleaved.
  std::vector<std::vector<std::vector<double>>> rate(
      paths.size(), std::vector<std::vector<double>>(Products().size()));
  std::vector<std::vector<double>> peak(paths.size());
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < paths.size(); ++i) {
      peak[i].push_back(paths[i].peak());
      for (size_t j = 0; j < Products().size(); ++j) {
        rate[i][j].push_back(Gflops(Products()[j], paths[i].kernel));
      }
    }
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    const double pk = bench::Median(peak[i]);
    std::printf("\n%s: FMA peak %.1f GFLOP/s (median of %d; %.1f..%.1f)\n", paths[i].name, pk, runs,
                *std::min_element(peak[i].begin(), peak[i].end()),
                *std::max_element(peak[i].begin(), peak[i].end()));
    for (size_t j = 0; j < Products().size(); ++j) {
      const double g = bench::Median(rate[i][j]);
      std::printf("  %-38s %7.1f GFLOP/s  %.2f of the %s peak\n", Products()[j].what, g, g / pk,
                  paths[i].name);
    }
  }
  for (size_t i = 1; i < paths.size(); ++i) {
    std::printf("\n%s / %s per product:", paths[i].name, paths[i - 1].name);
    for (size_t j = 0; j < Products().size(); ++j) {
      std::printf(" %.2f", bench::Median(rate[i][j]) / bench::Median(rate[i - 1][j]));
    }
    std::printf("\n");
  }
  return 0;
}
