// One core's arithmetic peaks, measured by loops of independent vector instructions (16 chains
// of 512-bit, 12 of 256-bit: more than the instructions' latency times their ports, so the
// loop runs at the issue rate). The benchmarks divide their rates by these, measured in the
// same run. Only call a 512-bit loop where nn::DetectedCpu() has the feature. One run of a loop
// moves with what else the machine runs; MeasurePeak gives the median of several, and their
// spread, which is printed beside it.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace shmtrain::bench {

// The loop of one peak, written once: acc[i] = OP over CHAINS accumulators of type V for
// kPeakIters rounds, each OP worth FLOPS; the lanes summed at the end keep it alive. A macro,
// not a template taking lambdas: the intrinsics must be inlined into the function whose
// target attribute allows them.
inline constexpr int64_t kPeakIters = 20'000'000;
#define SHMTRAIN_PEAK_LOOP(V, CHAINS, LANES, INIT, OP, STORE, FLOPS)                        \
  V acc[CHAINS];                                                                             \
  for (int i = 0; i < CHAINS; ++i) acc[i] = INIT(1.0f + i * 1e-3f);                          \
  const auto t0 = std::chrono::steady_clock::now();                                          \
  for (int64_t it = 0; it < kPeakIters; ++it) {                                              \
    _Pragma("GCC unroll 16") for (int i = 0; i < CHAINS; ++i) acc[i] = OP;                   \
  }                                                                                          \
  const double s =                                                                           \
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();          \
  float sink = 0;                                                                            \
  alignas(64) float lanes[LANES];                                                            \
  for (int i = 0; i < CHAINS; ++i) {                                                         \
    STORE(lanes, acc[i]);                                                                    \
    sink += lanes[0];                                                                        \
  }                                                                                          \
  if (sink == 12345.0f) std::puts("");                                                       \
  return double(FLOPS) * CHAINS * kPeakIters / s / 1e9

// 512-bit float FMAs: 32 FLOPs each.
__attribute__((target("avx512f"))) inline double Fma512Peak() {
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  SHMTRAIN_PEAK_LOOP(__m512, 16, 16, _mm512_set1_ps, _mm512_fmadd_ps(acc[i], a, b),
                     _mm512_store_ps, 32);
}

// 256-bit float FMAs (AVX2): 16 FLOPs each.
inline double Fma256Peak() {
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  SHMTRAIN_PEAK_LOOP(__m256, 12, 8, _mm256_set1_ps, _mm256_fmadd_ps(acc[i], a, b),
                     _mm256_store_ps, 16);
}

// 512-bit vdpbf16ps: 16 lanes each adding two bf16 products into float, 64 FLOPs (a multiply
// and an add per product, as an FMA counts).
__attribute__((target("avx512f,avx512bf16"))) inline double Bf16DotPeak() {
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1, 1)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x33d633d6);  // (1e-7, 1e-7)
  SHMTRAIN_PEAK_LOOP(__m512, 16, 16, _mm512_set1_ps, _mm512_dpbf16_ps(acc[i], a, b),
                     _mm512_store_ps, 64);
}

#undef SHMTRAIN_PEAK_LOOP

// A peak over several runs of its loop: the median, which the rates are divided by, and the
// slowest and fastest run.
struct Peak {
  double median = 0, min = 0, max = 0;
  int runs = 0;
  // "262.3 GFLOP/s (median of 7 runs, 255.0..263.1)"
  std::string Text() const {
    char text[96];
    std::snprintf(text, sizeof text, "%.1f GFLOP/s (median of %d runs, %.1f..%.1f)", median,
                  runs, min, max);
    return text;
  }
};

// `loop` (Fma512Peak, Fma256Peak, Bf16DotPeak) run `runs` times, one after another.
inline Peak MeasurePeak(double (*loop)(), int runs = 7) {
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) rates.push_back(loop());
  std::sort(rates.begin(), rates.end());
  const size_t n = rates.size();
  Peak p;
  p.median = n % 2 ? rates[n / 2] : (rates[n / 2 - 1] + rates[n / 2]) / 2;
  p.min = rates.front();
  p.max = rates.back();
  p.runs = runs;
  return p;
}

}  // namespace shmtrain::bench
