// The products of bench/kernel_bench.cc and bench/eigen512_bench.cc: cnn-small's and the
// MLP's as the layers call nn::Gemm (nn/layers/linear.cc, conv2d.cc), and their timing.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

namespace shmtrain::bench {

struct Product {
  const char* what;
  int64_t m, n, k;
  bool ta, tb;
};

inline const std::vector<Product>& Products() {
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

// GFLOP/s of product(a, lda, b, ldb, c) (C = op(A) op(B), column-major, C's ld = m) on random
// operands: one untimed call, then about 2 GFLOP of calls.
template <class F>
double ProductGflops(const Product& p, F&& product) {
  using Clock = std::chrono::steady_clock;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(p.m * p.k), b(p.k * p.n), c(p.m * p.n);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const int64_t lda = p.ta ? p.k : p.m, ldb = p.tb ? p.n : p.k;
  const double flops = 2.0 * p.m * p.n * p.k;
  const int reps = std::max<int>(3, static_cast<int>(2e9 / flops));
  product(a.data(), lda, b.data(), ldb, c.data());
  const auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) product(a.data(), lda, b.data(), ldb, c.data());
  return flops * reps / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
}

}  // namespace shmtrain::bench
