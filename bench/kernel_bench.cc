// The kernels of nn/gemm.h against the core's own limit, measured in the same run.
//
// Prints the float FMA peak of one core (a loop of independent 512-bit FMAs, and of 256-bit
// ones: AVX2's) and the bf16 dot-product peak (vdpbf16ps), then, for each kernel this CPU runs
// (Eigen's product compiled for x86-64-v3 as the yardstick of the AVX2 path, our avx2 and
// avx512 kernels, and bf16 against the bf16 peak), GFLOP/s of the products of
// cnn-small's second convolution and dense layers and of the benchmarks' 1M-parameter MLP
// (784-1024-256-10), each as the layer computes it (forward, weight gradient, input gradient),
// with the ratio to the path's peak; and, on AVX-512 CPUs, Eigen's own product compiled for
// AVX-512 (bench/eigen512_bench, run once a run) on the same products, against our kernel.
// Medians of interleaved runs.
//
// Usage: kernel_bench [runs=7]
#include <immintrin.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/peak.h"
#include "bench/products.h"
#include "nn/cpu.h"
#include "nn/gemm.h"

using namespace shmtrain;

namespace {

using bench::Product;
using bench::Products;

using Kernel = void (*)(int64_t, int64_t, int64_t, nn::Operand, nn::Operand, float*, int64_t,
                        bool);

// Eigen's product over the operands as maps, compiled for the build's x86-64-v3: the AVX2
// path's kernel before nn/kernels/gemm_avx2.cc, kept here as its yardstick alone (its order
// of summation depends on n, so no layer may run it).
using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using Map = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;

template <class A, class B>
void EigenProduct(const A& a, const B& b, int64_t m, int64_t n, float* c, int64_t ldc,
                  bool accumulate) {
  Eigen::Map<Mat, 0, Eigen::OuterStride<>> out(c, m, n, Eigen::OuterStride<>(ldc));
  if (accumulate) {
    out.noalias() += a * b;
  } else {
    out.noalias() = a * b;
  }
}

void GemmEigen(int64_t m, int64_t n, int64_t k, nn::Operand a, nn::Operand b, float* c,
               int64_t ldc, bool accumulate) {
  const Map am(a.p, a.t ? k : m, a.t ? m : k, Eigen::OuterStride<>(a.ld));
  const Map bm(b.p, b.t ? n : k, b.t ? k : n, Eigen::OuterStride<>(b.ld));
  if (!a.t && !b.t) return EigenProduct(am, bm, m, n, c, ldc, accumulate);
  if (!a.t) return EigenProduct(am, bm.transpose(), m, n, c, ldc, accumulate);
  if (!b.t) return EigenProduct(am.transpose(), bm, m, n, c, ldc, accumulate);
  EigenProduct(am.transpose(), bm.transpose(), m, n, c, ldc, accumulate);
}

double Gflops(const Product& p, Kernel kernel) {
  return bench::ProductGflops(p, [&](const float* a, int64_t lda, const float* b, int64_t ldb,
                                     float* c) {
    kernel(p.m, p.n, p.k, {a, lda, p.ta}, {b, ldb, p.tb}, c, p.m, false);
  });
}

// One pass of bench/eigen512_bench (Eigen's product compiled for AVX-512, a binary of its own):
// a rate per product, or none when it does not run.
std::vector<double> EigenAvx512Rates() {
  FILE* f = popen(EIGEN512_BENCH_BIN " 2>/dev/null", "r");
  if (f == nullptr) return {};
  std::vector<double> r;
  double g = 0;
  while (std::fscanf(f, "%lf", &g) == 1) r.push_back(g);
  if (pclose(f) != 0 || r.size() != Products().size()) return {};
  return r;
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
  std::vector<Path> paths = {{"eigen-avx2", GemmEigen, bench::Fma256Peak},
                             {"avx2", nn::GemmAvx2, bench::Fma256Peak}};
  if (cpu.avx512) paths.push_back({"avx512", nn::GemmAvx512, bench::Fma512Peak});
  // bf16 products (--precision bf16) against the vdpbf16ps peak.
  if (cpu.avx512_bf16) paths.push_back({"bf16", nn::GemmAvx512Bf16, bench::Bf16DotPeak});
  // [path][product] rates of every run, and each path's peak per run: interleaved.
  std::vector<std::vector<std::vector<double>>> rate(
      paths.size(), std::vector<std::vector<double>>(Products().size()));
  std::vector<std::vector<double>> peak(paths.size());
  // Eigen compiled for AVX-512 (the other way to use the AVX-512 units): [product] rates.
  std::vector<std::vector<double>> eigen512(Products().size());
  for (int r = 0; r < runs; ++r) {
    for (size_t i = 0; i < paths.size(); ++i) {
      peak[i].push_back(paths[i].peak());
      for (size_t j = 0; j < Products().size(); ++j) {
        rate[i][j].push_back(Gflops(Products()[j], paths[i].kernel));
      }
    }
    if (cpu.avx512) {
      const std::vector<double> e = EigenAvx512Rates();
      for (size_t j = 0; j < e.size(); ++j) eigen512[j].push_back(e[j]);
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
  if (cpu.avx512 && !eigen512[0].empty()) {
    const double pk = bench::Median(peak[2]);
    std::printf("\nEigen 3.4's product compiled for AVX-512 (bench/eigen512_bench):\n");
    for (size_t j = 0; j < Products().size(); ++j) {
      const double g = bench::Median(eigen512[j]), ours = bench::Median(rate[2][j]);
      std::printf("  %-38s %7.1f GFLOP/s  %.2f of the avx512 peak; avx512 kernel / it %.2f\n",
                  Products()[j].what, g, g / pk, ours / g);
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
