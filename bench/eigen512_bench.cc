// Eigen's product compiled for AVX-512, on bench/products.h's products: one pass, one GFLOP/s
// a line, for bench/kernel_bench (which interleaves it with its own runs and prints it). A
// binary of its own: in one binary with the AVX2 build, the linker would keep one copy of each
// of Eigen's inline functions, compiled for either instruction set, for both. Exit 3 on a CPU
// without AVX-512.
#include <Eigen/Core>
#include <cstdio>

#include "bench/products.h"

using namespace shmtrain::bench;

int main() {
  if (!__builtin_cpu_supports("avx512f")) return 3;
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
  using Map = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;
  for (const Product& p : Products()) {
    const double g = ProductGflops(p, [&](const float* a, int64_t lda, const float* b,
                                          int64_t ldb, float* c) {
      const Map am(a, p.ta ? p.k : p.m, p.ta ? p.m : p.k, Eigen::OuterStride<>(lda));
      const Map bm(b, p.tb ? p.n : p.k, p.tb ? p.k : p.n, Eigen::OuterStride<>(ldb));
      Eigen::Map<Mat> out(c, p.m, p.n);
      if (!p.ta && !p.tb) out.noalias() = am * bm;
      if (!p.ta && p.tb) out.noalias() = am * bm.transpose();
      if (p.ta && !p.tb) out.noalias() = am.transpose() * bm;
      if (p.ta && p.tb) out.noalias() = am.transpose() * bm.transpose();
    });
    std::printf("%.2f\n", g);
  }
  return 0;
}
