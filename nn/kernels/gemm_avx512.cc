// Gemm's AVX-512 path (nn/gemm.h). This file alone is compiled for AVX-512 (CMakeLists.txt) and
// includes nothing that instantiates templates other files instantiate too (no Eigen): an
// inline function compiled here for AVX-512 must never be the copy the linker keeps for code
// that runs on AVX2 machines.
//
// The loops of BLIS (Van Zee and van de Geijn, 2015): n in blocks of kNc columns, k in blocks
// of equal length, at most K::kKc (op(B)'s block packed into panels of kNr columns, k-major),
// m in blocks of kMc (op(A)'s block packed into panels of kMr rows, k-major), then a
// micro-kernel per kMr x kNr tile of C that keeps the tile in 24 ZMM registers over the block's
// k: per k, two loads of A, kNr broadcasts of B and 2 kNr FMAs. Panels are zero-padded, so the
// micro-kernel always runs a whole tile and stores only C's part of it. Each C element is its k
// products summed in k order, block after block: the bits depend on m, n, k and the operands alone.
#include <immintrin.h>

// GCC 12 reports its own intrinsics' "undefined" vectors (`__m512 __Y = __Y;` in
// _mm512_undefined_ps, behind the unpacks and lane shuffles) as maybe uninitialised once
// they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "nn/gemm.h"

namespace shmtrain::nn {
namespace {

constexpr int64_t kMr = 32, kNr = 12;
constexpr int64_t kMc = 128, kNc = 768;  // kMc % kMr == 0, kNc % kNr == 0 (k: K::kKc)

// A scratch buffer of 64-byte aligned floats, kept between calls (workers are one thread).
// The standard library's aligned operator new allocates it: its failure is std::bad_alloc,
// the old buffer kept, unwinding as nn/gemm.cc's SameA says (docs/errors.md): this file throws
// nothing of its own and catches nothing.
class Scratch {
 public:
  float* Get(int64_t n) {
    if (n > size_) {
      buf_.reset(static_cast<float*>(
          ::operator new(static_cast<size_t>(n) * sizeof(float), std::align_val_t{64})));
      size_ = n;
    }
    return buf_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<float, Free> buf_;
  int64_t size_ = 0;
};

thread_local Scratch packed_a, packed_b;

// The masks of a panel's two 16-row halves with `rows` of its rows in C.
__mmask16 LowMask(int64_t rows) {
  return rows >= 16 ? 0xffff : static_cast<__mmask16>((1u << rows) - 1);
}
__mmask16 HighMask(int64_t rows) {
  return rows <= 16 ? 0 : rows >= 32 ? 0xffff : static_cast<__mmask16>((1u << (rows - 16)) - 1);
}

// r[i] (row i of a 16 x 16 block) becomes column i: unpacks, then in-lane shuffles, then two
// rounds of 128-bit lane shuffles.
inline void Transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 4; ++k) {
      t[8 * i + k] = _mm512_shuffle_f32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
      t[8 * i + 4 + k] = _mm512_shuffle_f32x4(r[8 * i + k], r[8 * i + 4 + k], 0xdd);
    }
  }
  for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
  }
}

// 16 consecutive k values of `count` (<= 16) vectors stored at src + v * ld (zeros for the
// others), transposed: r[q] holds the vectors' k value q.
inline void LoadTransposed(const float* src, int64_t ld, int64_t count, __m512 (&r)[16]) {
  for (int v = 0; v < 16; ++v) {
    r[v] = v < count ? _mm512_loadu_ps(src + v * ld) : _mm512_setzero_ps();
  }
  Transpose16(r);
}

// op(A)'s rows [i0, i0+mc) x k [p0, p0+kc) into panels of kMr rows: panel r holds, for each p,
// kMr consecutive floats (zeros past m).
void PackFloatA(Operand a, int64_t m, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t r = 0; r < mc; r += kMr, dst += kMr * kc) {
    const int64_t rows = std::min(kMr, m - (i0 + r));
    if (!a.t) {
      const __mmask16 m0 = LowMask(rows), m1 = HighMask(rows);
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = a.p + (i0 + r) + (p0 + p) * a.ld;
        _mm512_store_ps(dst + p * kMr, _mm512_maskz_loadu_ps(m0, src));
        _mm512_store_ps(dst + p * kMr + 16, _mm512_maskz_loadu_ps(m1, src + 16));
      }
    } else {
      // Rows are contiguous in k: 16 x 16 blocks transposed, then the rest element by element.
      int64_t p = 0;
      for (; p + 16 <= kc; p += 16) {
        for (int64_t h = 0; h < kMr; h += 16) {
          __m512 t[16];
          LoadTransposed(a.p + p0 + p + (i0 + r + h) * a.ld, a.ld,
                         std::clamp<int64_t>(rows - h, 0, 16), t);
          for (int q = 0; q < 16; ++q) _mm512_store_ps(dst + (p + q) * kMr + h, t[q]);
        }
      }
      if (p < kc && rows < kMr) std::memset(dst + p * kMr, 0, sizeof(float) * kMr * (kc - p));
      for (int64_t i = 0; i < rows; ++i) {
        const float* src = a.p + p0 + (i0 + r + i) * a.ld;
        for (int64_t q = p; q < kc; ++q) dst[q * kMr + i] = src[q];
      }
    }
  }
}

// op(B)'s k [p0, p0+kc) x columns [j0, j0+nc) into panels of kNr columns: panel s holds, for
// each p, kNr consecutive floats (zeros past n).
void PackFloatB(Operand b, int64_t n, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  for (int64_t s = 0; s < nc; s += kNr, dst += kNr * kc) {
    const int64_t cols = std::min(kNr, n - (j0 + s));
    if (b.t) {
      const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
      for (int64_t p = 0; p < kc; ++p) {
        // kNr = 12 floats: a masked 16-lane load, a 12-lane store (the panel's next row
        // follows).
        const __m512 v = _mm512_maskz_loadu_ps(mask, b.p + (j0 + s) + (p0 + p) * b.ld);
        _mm512_mask_storeu_ps(dst + p * kNr, 0x0fff, v);
      }
    } else {
      // Columns are contiguous in k: 16 x 16 blocks transposed (12 of their columns kept),
      // then the rest element by element.
      int64_t p = 0;
      for (; p + 16 <= kc; p += 16) {
        __m512 t[16];
        LoadTransposed(b.p + p0 + p + (j0 + s) * b.ld, b.ld, cols, t);
        for (int q = 0; q < 16; ++q) _mm512_mask_storeu_ps(dst + (p + q) * kNr, 0x0fff, t[q]);
      }
      if (p < kc && cols < kNr) std::memset(dst + p * kNr, 0, sizeof(float) * kNr * (kc - p));
      for (int64_t j = 0; j < cols; ++j) {
        const float* src = b.p + p0 + (j0 + s + j) * b.ld;
        for (int64_t q = p; q < kc; ++q) dst[q * kNr + j] = src[q];
      }
    }
  }
}

// C's tile (rows x cols of at most kMr x kNr at c) = [C +] acc.
void StoreTile(const __m512 (&acc)[kNr][2], float* c, int64_t ldc, int64_t rows, int64_t cols,
               bool add) {
  const __mmask16 m0 = LowMask(rows), m1 = HighMask(rows);
  for (int64_t j = 0; j < cols; ++j) {
    float* cj = c + j * ldc;
    __m512 v0 = acc[j][0], v1 = acc[j][1];
    if (add) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cj), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cj + 16), v1);
    }
    _mm512_mask_storeu_ps(cj, m0, v0);
    _mm512_mask_storeu_ps(cj + 16, m1, v1);
  }
}

// C's tile (rows x cols of at most kMr x kNr at c) = [C +] the panels' product over kc.
void MicroKernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows,
                 int64_t cols, bool add) {
  __m512 acc[kNr][2];
#pragma GCC unroll 12
  for (int j = 0; j < kNr; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p, a += kMr, b += kNr) {
    const __m512 a0 = _mm512_load_ps(a), a1 = _mm512_load_ps(a + 16);
#pragma GCC unroll 12
    for (int j = 0; j < kNr; ++j) {
      const __m512 bj = _mm512_set1_ps(b[j]);
      acc[j][0] = _mm512_fmadd_ps(a0, bj, acc[j][0]);
      acc[j][1] = _mm512_fmadd_ps(a1, bj, acc[j][1]);
    }
  }
  StoreTile(acc, c, ldc, rows, cols, add);
}

// The loops over blocks, for the float kernel (F32) or the bf16 one (Bf16): K::Elems(kc) is
// the packed size of one panel row of kc k values, K::PackA/PackB/Micro do the rest.
// Where `kept` is given (SameA, nn/gemm.h), op(A)'s packed blocks live in kept->buf, one slot
// of K::Floats(kc_len) * kMc floats per (m block, k block), packed by the first product and
// read by the later ones; the packing is the same, so are the bits.
template <class K>
void Blocked(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
             bool accumulate, KeptA* kept = nullptr) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int64_t j = 0; j < n; ++j) std::fill(c + j * ldc, c + j * ldc + m, 0.0f);
    }
    return;
  }
  const int64_t nc_max = std::min(kNc, (n + kNr - 1) / kNr * kNr);
  const int64_t mc_max = std::min(kMc, (m + kMr - 1) / kMr * kMr);
  // k in blocks of equal length, at most K::kKc (rounded up to even: no block but the last has
  // an odd length, whose pair the bf16 kernel would pad): no short last block, whose tiles
  // would load and store C for a few k alone.
  const int64_t blocks = (k + K::kKc - 1) / K::kKc;
  const int64_t kc_len = std::min(K::kKc, ((k + blocks - 1) / blocks + 1) / 2 * 2);
  // Panels of kMr or kNr rows of K::Floats(kc_len) floats' room each.
  float* pb = packed_b.Get(K::Floats(kc_len) * nc_max);
  float* pa = kept != nullptr ? nullptr : packed_a.Get(K::Floats(kc_len) * mc_max);
  const int64_t slot = K::Floats(kc_len) * kMc;
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0), nc_pad = (nc + kNr - 1) / kNr * kNr;
    for (int64_t p0 = 0; p0 < k; p0 += kc_len) {
      const int64_t kc = std::min(kc_len, k - p0);
      const bool add = accumulate || p0 > 0;
      K::PackB(b, n, p0, kc, j0, nc_pad, pb);
      for (int64_t i0 = 0; i0 < m; i0 += kMc) {
        const int64_t mc = std::min(kMc, m - i0), mc_pad = (mc + kMr - 1) / kMr * kMr;
        if (kept != nullptr) {
          pa = kept->buf + ((i0 / kMc) * blocks + p0 / kc_len) * slot;
          if (!kept->packed) K::PackA(a, m, i0, mc_pad, p0, kc, pa);
        } else {
          K::PackA(a, m, i0, mc_pad, p0, kc, pa);
        }
        for (int64_t s = 0; s < nc; s += kNr) {
          for (int64_t r = 0; r < mc; r += kMr) {
            K::Micro(kc, pa + r * K::Floats(kc), pb + s * K::Floats(kc),
                     c + (i0 + r) + (j0 + s) * ldc, ldc, std::min(kMr, mc - r),
                     std::min(kNr, nc - s), add);
          }
        }
      }
    }
    if (kept != nullptr) kept->packed = true;
  }
}

// The floats KeptA::buf holds for op(A) (m x k) in kernel K: a slot per (m block, k block).
template <class K>
int64_t KeptFloats(int64_t m, int64_t k) {
  const int64_t blocks = (k + K::kKc - 1) / K::kKc;
  const int64_t kc_len = std::min(K::kKc, ((k + blocks - 1) / blocks + 1) / 2 * 2);
  return (m + kMc - 1) / kMc * blocks * K::Floats(kc_len) * kMc;
}

// The float kernel: panels of floats.
struct F32 {
  static constexpr int64_t kKc = 256;  // a panel of kMr rows: 32 KB
  static int64_t Floats(int64_t kc) { return kc; }
  static void PackA(Operand a, int64_t m, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                    float* dst) {
    PackFloatA(a, m, i0, mc, p0, kc, dst);
  }
  static void PackB(Operand b, int64_t n, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                    float* dst) {
    PackFloatB(b, n, p0, kc, j0, nc, dst);
  }
  static void Micro(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                    int64_t rows, int64_t cols, bool add) {
    MicroKernel(kc, a, b, c, ldc, rows, cols, add);
  }
};


// The bf16 kernel (--precision bf16): op(A) and op(B) rounded to bf16 as they are packed
// (round to nearest even, as vcvtne2ps2bf16 does: NaN stays NaN, denormals become zeros of
// their sign), products summed into float by vdpbf16ps, which takes k in pairs: a panel holds,
// for each pair of k, its two bf16 values side by side (one 32-bit lane), kMr lanes of A or
// kNr of B; an odd kc's last pair is padded with a zero. C is float, as in the float kernel.

// One float as bf16, as vcvtne2ps2bf16 rounds it.
uint16_t ScalarBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  if ((u & 0x7f800000) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

uint32_t ScalarPair(float lo, float hi) {
  return ScalarBf16(lo) | static_cast<uint32_t>(ScalarBf16(hi)) << 16;
}

// 16 lanes of (x0[i], x1[i]) as bf16 pairs: lane i holds x0[i] in its low half.
__m512i Pairs(__m512 x0, __m512 x1) {
  const __m512i interleave = _mm512_set_epi16(
      31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
      19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave,
                                  reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0)));
}

// The pairs q0 .. pairs-1 of `count` vectors contiguous in k (vector v at src + v * ld), one
// by one, into a panel of `width` lanes a pair (zeros past count when count < width).
void PairTail(const float* src, int64_t ld, int64_t count, int64_t width, int64_t q0,
              int64_t pairs, int64_t kc, uint32_t* dst) {
  if (q0 < pairs && count < width) std::memset(dst + q0 * width, 0, 4 * width * (pairs - q0));
  for (int64_t v = 0; v < count; ++v) {
    const float* x = src + v * ld;
    for (int64_t q = q0; q < pairs; ++q) {
      dst[q * width + v] = ScalarPair(x[2 * q], 2 * q + 1 < kc ? x[2 * q + 1] : 0.0f);
    }
  }
}

struct Bf16 {
  // k values a block: twice the float kernel's, so that a panel takes as many bytes (k in
  // pairs of bf16) and each tile's C is loaded and stored once for as many FMAs' time.
  static constexpr int64_t kKc = 512;
  // A panel row of kc values: kc / 2 pairs rounded up, one 32-bit lane (a float's room) each.
  static int64_t Floats(int64_t kc) { return (kc + 1) / 2; }

  static void PackA(Operand a, int64_t m, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                    float* dst_f) {
    auto* dst = reinterpret_cast<uint32_t*>(dst_f);
    const int64_t pairs = Floats(kc);
    for (int64_t r = 0; r < mc; r += kMr, dst += kMr * pairs) {
      const int64_t rows = std::min(kMr, m - (i0 + r));
      if (!a.t) {
        const __mmask16 masks[2] = {LowMask(rows), HighMask(rows)};
        for (int64_t q = 0; q < pairs; ++q) {
          const float* x0 = a.p + (i0 + r) + (p0 + 2 * q) * a.ld;
          const bool second = 2 * q + 1 < kc;
          for (int g = 0; g < 2; ++g) {
            const __m512 v0 = _mm512_maskz_loadu_ps(masks[g], x0 + 16 * g);
            const __m512 v1 =
                second ? _mm512_maskz_loadu_ps(masks[g], x0 + a.ld + 16 * g) : _mm512_setzero_ps();
            _mm512_store_si512(dst + q * kMr + 16 * g, Pairs(v0, v1));
          }
        }
      } else {
        // Rows are contiguous in k: 16 x 16 blocks transposed, then paired; the rest pair by
        // pair.
        int64_t q0 = 0;
        for (; 2 * q0 + 16 <= kc; q0 += 8) {
          for (int64_t h = 0; h < kMr; h += 16) {
            __m512 t[16];
            LoadTransposed(a.p + p0 + 2 * q0 + (i0 + r + h) * a.ld, a.ld,
                           std::clamp<int64_t>(rows - h, 0, 16), t);
            for (int q = 0; q < 8; ++q) {
              _mm512_store_si512(dst + (q0 + q) * kMr + h, Pairs(t[2 * q], t[2 * q + 1]));
            }
          }
        }
        PairTail(a.p + p0 + (i0 + r) * a.ld, a.ld, rows, kMr, q0, pairs, kc, dst);
      }
    }
  }

  static void PackB(Operand b, int64_t n, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                    float* dst_f) {
    auto* dst = reinterpret_cast<uint32_t*>(dst_f);
    const int64_t pairs = Floats(kc);
    for (int64_t s = 0; s < nc; s += kNr, dst += kNr * pairs) {
      const int64_t cols = std::min(kNr, n - (j0 + s));
      if (b.t) {
        const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
        for (int64_t q = 0; q < pairs; ++q) {
          const float* x0 = b.p + (j0 + s) + (p0 + 2 * q) * b.ld;
          const __m512 v0 = _mm512_maskz_loadu_ps(mask, x0);
          const __m512 v1 = 2 * q + 1 < kc ? _mm512_maskz_loadu_ps(mask, x0 + b.ld)
                                           : _mm512_setzero_ps();
          _mm512_mask_storeu_epi32(dst + q * kNr, 0x0fff, Pairs(v0, v1));
        }
      } else {
        // Columns are contiguous in k: 16 x 16 blocks transposed (12 of their columns kept),
        // then paired; the rest pair by pair.
        int64_t q0 = 0;
        for (; 2 * q0 + 16 <= kc; q0 += 8) {
          __m512 t[16];
          LoadTransposed(b.p + p0 + 2 * q0 + (j0 + s) * b.ld, b.ld, cols, t);
          for (int q = 0; q < 8; ++q) {
            _mm512_mask_storeu_epi32(dst + (q0 + q) * kNr, 0x0fff, Pairs(t[2 * q], t[2 * q + 1]));
          }
        }
        PairTail(b.p + p0 + (j0 + s) * b.ld, b.ld, cols, kNr, q0, pairs, kc, dst);
      }
    }
  }

  static void Micro(int64_t kc, const float* a_f, const float* b_f, float* c, int64_t ldc,
                    int64_t rows, int64_t cols, bool add) {
    const auto* a = reinterpret_cast<const uint32_t*>(a_f);
    const auto* b = reinterpret_cast<const uint32_t*>(b_f);
    __m512 acc[kNr][2];
#pragma GCC unroll 12
    for (int j = 0; j < kNr; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    const int64_t pairs = Floats(kc);
    for (int64_t q = 0; q < pairs; ++q, a += kMr, b += kNr) {
      const __m512bh a0 = reinterpret_cast<__m512bh>(_mm512_load_si512(a));
      const __m512bh a1 = reinterpret_cast<__m512bh>(_mm512_load_si512(a + 16));
#pragma GCC unroll 12
      for (int j = 0; j < kNr; ++j) {
        const __m512bh bj = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(b[j])));
        acc[j][0] = _mm512_dpbf16_ps(acc[j][0], a0, bj);
        acc[j][1] = _mm512_dpbf16_ps(acc[j][1], a1, bj);
      }
    }
    StoreTile(acc, c, ldc, rows, cols, add);
  }
};

}  // namespace

void GemmAvx512(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
                bool accumulate) {
  Blocked<F32>(m, n, k, a, b, c, ldc, accumulate);
}

void GemmAvx512Bf16(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
                    bool accumulate) {
  Blocked<Bf16>(m, n, k, a, b, c, ldc, accumulate);
}

int64_t KeptAFloats(int64_t m, int64_t k, bool bf16) {
  return bf16 ? KeptFloats<Bf16>(m, k) : KeptFloats<F32>(m, k);
}

void GemmAvx512Kept(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
                    bool accumulate, bool bf16, KeptA* kept) {
  if (bf16) return Blocked<Bf16>(m, n, k, a, b, c, ldc, accumulate, kept);
  Blocked<F32>(m, n, k, a, b, c, ldc, accumulate, kept);
}

void RoundToBf16Avx512(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(v));
  }
  for (; i < n; ++i) out[i] = ScalarBf16(x[i]);
}

}  // namespace shmtrain::nn
