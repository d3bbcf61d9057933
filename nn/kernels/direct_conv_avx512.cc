// nn/kernels/direct_conv.h on AVX-512. Compiled for AVX-512 alone (CMakeLists.txt), with no
// header that instantiates templates other files instantiate too (nn/kernels/gemm_avx512.cc
// says why).
//
// Forward: for each block of 32 output channels (16 for a last odd block), the output's pixels,
// row after row, are cut into tiles of up to kTile pixels that may span rows (an 8x8 map: tiles
// of 11 and 10, not 8 a row); a tile's kTile x 2 accumulators start at the bias,
// then each tap (ky, then kx and c as one run) adds input x weight: two loads of W, one
// broadcast of the input per pixel. The weight gradient is the same with taps for pixels: a
// tile of up to kTile taps of one kernel row x the block's channels, summed over the output
// pixels in row order (two loads of dy, one broadcast per tap).
#include "nn/kernels/direct_conv.h"

#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

namespace shmtrain::nn {
namespace {

constexpr int64_t kTile = 12;

// Each of NP pixels' window in `padded`: output pixels p0 .. p0+NP-1, row after row (a tile
// may span rows).
template <int NP, class T>
void Windows(const DirectConv& s, const T* padded, int64_t p0, const T* (&at)[NP]) {
  for (int p = 0; p < NP; ++p) {
    const int64_t oy = (p0 + p) / s.out_w, ox = (p0 + p) % s.out_w;
    at[p] = padded + (oy * s.stride * s.wp + ox * s.stride) * s.c;
  }
}

// A forward step of each kind: float takes one tap (a broadcast of the input, an FMA), bf16 a
// pair of taps (their two bf16 inputs broadcast as one 32-bit value, vdpbf16ps).
struct FloatTaps {
  using In = float;
  using W = float;
  static constexpr int kTaps = 1;
  static __m512 Weights(const float* w) { return _mm512_loadu_ps(w); }
  static __m512 Input(const float* x) { return _mm512_set1_ps(*x); }
  static __m512 Add(__m512 acc, __m512 x, __m512 w) { return _mm512_fmadd_ps(x, w, acc); }
};
struct Bf16Taps {
  using In = uint16_t;
  using W = uint32_t;
  static constexpr int kTaps = 2;
  static __m512bh Weights(const uint32_t* w) {
    return reinterpret_cast<__m512bh>(_mm512_loadu_si512(w));
  }
  static __m512bh Input(const uint16_t* x) {
    int32_t pair;
    std::memcpy(&pair, x, sizeof pair);
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
  }
  static __m512 Add(__m512 acc, __m512bh x, __m512bh w) { return _mm512_dpbf16_ps(acc, x, w); }
};

// Output pixels p0 .. p0+NP-1, channels ob .. ob+16Q-1: the bias, then each kernel row's taps
// in order, T::kTaps at a time (w: kTaps taps x co a step).
template <class T, int NP, int Q>
void ForwardTile(const DirectConv& s, const typename T::In* padded, const typename T::W* w,
                 const float* bias, int64_t ob, int64_t p0, float* y) {
  const int64_t steps = s.k * s.c / T::kTaps;
  const typename T::In* at[NP];
  Windows(s, padded, p0, at);
  __m512 acc[NP][Q];
  for (int q = 0; q < Q; ++q) {
    const __m512 b = _mm512_loadu_ps(bias + ob + 16 * q);
    for (int p = 0; p < NP; ++p) acc[p][q] = b;
  }
  for (int64_t ky = 0; ky < s.k; ++ky) {
    const int64_t row = ky * s.wp * s.c;
    const typename T::W* wk = w + ky * steps * s.co + ob;
    for (int64_t t = 0; t < steps; ++t, wk += s.co) {
      decltype(T::Weights(wk)) wv[Q];
      for (int q = 0; q < Q; ++q) wv[q] = T::Weights(wk + 16 * q);
      for (int p = 0; p < NP; ++p) {
        const auto v = T::Input(at[p] + row + T::kTaps * t);
        for (int q = 0; q < Q; ++q) acc[p][q] = T::Add(acc[p][q], v, wv[q]);
      }
    }
  }
  float* dst = y + p0 * s.co + ob;
  for (int p = 0; p < NP; ++p) {
    for (int q = 0; q < Q; ++q) _mm512_storeu_ps(dst + p * s.co + 16 * q, acc[p][q]);
  }
}

// Taps (ky, j .. j+NT-1) of kernel row ky (j counts (kx, c) pairs), channels ob .. ob+16Q-1.
template <int NT, int Q>
void WeightTile(const DirectConv& s, const float* padded, const float* dy, int64_t ob,
                int64_t ky, int64_t j, float* g) {
  const int64_t run = s.k * s.c;
  float* gt = g + (ky * run + j) * s.co + ob;
  __m512 acc[NT][Q];
  for (int t = 0; t < NT; ++t) {
    for (int q = 0; q < Q; ++q) acc[t][q] = _mm512_loadu_ps(gt + t * s.co + 16 * q);
  }
  for (int64_t oy = 0; oy < s.out_h; ++oy) {
    const float* src = padded + ((oy * s.stride + ky) * s.wp) * s.c + j;
    const float* d = dy + oy * s.out_w * s.co + ob;
    for (int64_t ox = 0; ox < s.out_w; ++ox, src += s.stride * s.c, d += s.co) {
      __m512 dv[Q];
      for (int q = 0; q < Q; ++q) dv[q] = _mm512_loadu_ps(d + 16 * q);
      for (int t = 0; t < NT; ++t) {
        const __m512 v = _mm512_set1_ps(src[t]);
        for (int q = 0; q < Q; ++q) acc[t][q] = _mm512_fmadd_ps(v, dv[q], acc[t][q]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int q = 0; q < Q; ++q) _mm512_storeu_ps(gt + t * s.co + 16 * q, acc[t][q]);
  }
}

// f(integral_constant<Q>, ob) for each block of output channels: 32 (Q = 2), and 16 (Q = 1)
// for a last one.
template <class F>
void ForBlocks(int64_t co, F&& f) {
  int64_t ob = 0;
  for (; ob + 32 <= co; ob += 32) f(std::integral_constant<int, 2>{}, ob);
  if (ob < co) f(std::integral_constant<int, 1>{}, ob);
}

}  // namespace

void DirectConvForwardAvx512(const DirectConv& s, const float* padded, const float* w,
                             const float* bias, float* y) {
  ForBlocks(s.co, [&](auto q, int64_t ob) {
    ForTiles<kTile>(s.out_h * s.out_w, [&](auto np, int64_t p0) {
      ForwardTile<FloatTaps, decltype(np)::value, decltype(q)::value>(s, padded, w, bias, ob,
                                                                      p0, y);
    });
  });
}

void DirectConvWeightGradAvx512(const DirectConv& s, const float* padded, const float* dy,
                                float* g) {
  ForBlocks(s.co, [&](auto q, int64_t ob) {
    for (int64_t ky = 0; ky < s.k; ++ky) {
      ForTiles<kTile>(s.k * s.c, [&](auto nt, int64_t j) {
        WeightTile<decltype(nt)::value, decltype(q)::value>(s, padded, dy, ob, ky, j, g);
      });
    }
  });
}

}  // namespace shmtrain::nn

namespace shmtrain::nn {

void DirectConvForwardBf16(const DirectConv& s, const uint16_t* padded, const uint32_t* pairs,
                           const float* bias, float* y) {
  ForBlocks(s.co, [&](auto q, int64_t ob) {
    ForTiles<kTile>(s.out_h * s.out_w, [&](auto np, int64_t p0) {
      ForwardTile<Bf16Taps, decltype(np)::value, decltype(q)::value>(s, padded, pairs, bias,
                                                                     ob, p0, y);
    });
  });
}

void PackDirectBf16Weights(const DirectConv& s, const float* w, uint32_t* pairs) {
  const __m512i interleave = _mm512_set_epi16(
      31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
      19, 3, 18, 2, 17, 1, 16, 0);
  const int64_t taps = s.k * s.k * s.c;
  for (int64_t t = 0; t + 1 < taps; t += 2) {
    for (int64_t o = 0; o < s.co; o += 16) {
      const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(w + (t + 1) * s.co + o),
                                                _mm512_loadu_ps(w + t * s.co + o));
      _mm512_storeu_si512(pairs + t / 2 * s.co + o,
                          _mm512_permutexvar_epi16(interleave, reinterpret_cast<__m512i>(both)));
    }
  }
}

}  // namespace shmtrain::nn
