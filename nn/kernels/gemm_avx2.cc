// Gemm's AVX2 path (nn/gemm.h), compiled for the build's x86-64-v3 (AVX2 + FMA) like the rest
// of the build: the kernel of CPUs without AVX-512 (AMD Zen 3 and older, and SHMTRAIN_CPU=avx2
// anywhere).
//
// The loops of BLIS (Van Zee and van de Geijn, 2015), as nn/kernels/gemm_avx512.cc runs them: n
// in blocks of kNc columns, k in blocks of equal length, at most kKc (op(B)'s block packed into
// panels of kNr columns, k-major), m in blocks of kMc (op(A)'s block packed into panels of kMr
// rows, k-major), then, for each panel of A (it stays in L1) and each panel of B (they stream
// from L2), a micro-kernel per kMr x kNr tile of C that keeps the tile in 12 of the 16 YMM
// registers over the block's k: per k, two loads of A, kNr broadcasts of B and 2 kNr FMAs (two
// more registers hold A, one the broadcast). Panels are zero-padded, so the micro-kernel always
// runs all kMr rows of a tile (and as many columns as C has at n's edge) and stores only C's part
// of it. Each C element is its k products summed in k order (one FMA each, from zero), block
// after block (C + the block's sum): the bits depend on m, n, k and the operands alone, never on
// where in a tile or a block an element falls, so a column of C (a sample) has the same bits in a
// product of any n.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "nn/gemm.h"

namespace shmtrain::nn {
// A namespace of its own: the library compiles as unity batches (CMakeLists.txt), where this
// file's anonymous namespace is shared with its batch's other sources.
namespace avx2_gemm {
namespace {

constexpr int64_t kMr = 16, kNr = 6;
// kMc % kMr == 0, kNc % kNr == 0. A panel of kMr rows over kKc: 16 KB (L1); op(B)'s block
// 384 KB (L2: Zen 3 has 512 KB). kernel_bench's shapes ran alike (within 3%) with kKc from 128
// to 512; blocks of n sized to fill 384 KB for shorter blocks of k ran conv2's weight gradient
// 6% slower.
constexpr int64_t kKc = 256, kMc = 128, kNc = 384;

// 64-byte aligned floats from the standard library's aligned operator new, whose failure is
// std::bad_alloc, unwinding as nn/gemm.cc's SameA says (docs/errors.md): this file throws
// nothing of its own and catches nothing.
struct AlignedFree {
  void operator()(float* p) const { ::operator delete(p, std::align_val_t{64}); }
};
using Floats = std::unique_ptr<float, AlignedFree>;

// A scratch buffer kept between calls (workers are one thread; the master's evaluator thread
// has its own).
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
  Floats buf_;
  int64_t size_ = 0;
};

thread_local Scratch packed_a, packed_b;

// Lanes [0, count) set (count clamped to [0, 8]): the mask of maskload and maskstore.
inline __m256i LaneMask(int64_t count) {
  const int n = static_cast<int>(std::clamp<int64_t>(count, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// r[i] (row i of an 8 x 8 block) becomes column i: unpacks, in-lane shuffles, then 128-bit
// lane permutes.
inline void Transpose8(__m256 (&r)[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x20);
    r[q + 4] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x31);
  }
}

// 8 consecutive k values of `count` (<= 8) vectors stored at src + v * ld (zeros for the
// others), transposed: r[q] holds the vectors' k value q.
inline void LoadTransposed(const float* src, int64_t ld, int64_t count, __m256 (&r)[8]) {
  for (int v = 0; v < 8; ++v) {
    r[v] = v < count ? _mm256_loadu_ps(src + v * ld) : _mm256_setzero_ps();
  }
  Transpose8(r);
}

// `count` vectors contiguous in k (vector v at src + v * ld), k values [p, kc), one by one
// into a panel of `width` lanes a k; the lanes past count zero.
void PackTail(const float* src, int64_t ld, int64_t count, int64_t width, int64_t p, int64_t kc,
              float* dst) {
  if (p < kc && count < width) std::memset(dst + p * width, 0, sizeof(float) * width * (kc - p));
  for (int64_t v = 0; v < count; ++v) {
    const float* x = src + v * ld;
    for (int64_t q = p; q < kc; ++q) dst[q * width + v] = x[q];
  }
}

// op(A)'s rows [i0, i0+mc) x k [p0, p0+kc) into panels of kMr rows: panel r holds, for each p,
// kMr consecutive floats (zeros past m).
void PackA(Operand a, int64_t m, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t r = 0; r < mc; r += kMr, dst += kMr * kc) {
    const int64_t rows = std::min(kMr, m - (i0 + r));
    if (!a.t) {
      const __m256i m0 = LaneMask(rows), m1 = LaneMask(rows - 8);
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = a.p + (i0 + r) + (p0 + p) * a.ld;
        if (rows == kMr) {
          _mm256_store_ps(dst + p * kMr, _mm256_loadu_ps(src));
          _mm256_store_ps(dst + p * kMr + 8, _mm256_loadu_ps(src + 8));
        } else {
          _mm256_store_ps(dst + p * kMr, _mm256_maskload_ps(src, m0));
          _mm256_store_ps(dst + p * kMr + 8, _mm256_maskload_ps(src + 8, m1));
        }
      }
    } else {
      // Rows are contiguous in k: 8 x 8 blocks transposed, then the rest element by element.
      int64_t p = 0;
      for (; p + 8 <= kc; p += 8) {
        for (int64_t h = 0; h < kMr; h += 8) {
          __m256 t[8];
          LoadTransposed(a.p + p0 + p + (i0 + r + h) * a.ld, a.ld,
                         std::clamp<int64_t>(rows - h, 0, 8), t);
          for (int q = 0; q < 8; ++q) _mm256_store_ps(dst + (p + q) * kMr + h, t[q]);
        }
      }
      PackTail(a.p + p0 + (i0 + r) * a.ld, a.ld, rows, kMr, p, kc, dst);
    }
  }
}

// The low kNr = 6 lanes of v at dst (the panel's next k follows at once).
inline void StoreSix(float* dst, __m256 v) {
  _mm_storeu_ps(dst, _mm256_castps256_ps128(v));
  _mm_storel_pi(reinterpret_cast<__m64*>(dst + 4), _mm256_extractf128_ps(v, 1));
}

// op(B)'s k [p0, p0+kc) x columns [j0, j0+nc) into panels of kNr columns: panel s holds, for
// each p, kNr consecutive floats (zeros past n).
void PackB(Operand b, int64_t n, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  if (b.t) {
    // Rows of op(B) are contiguous in n: each read once, along, into every panel.
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b.p + j0 + (p0 + p) * b.ld;
      for (int64_t s = 0; s < nc; s += kNr) {
        const int64_t cols = std::min(kNr, n - (j0 + s));
        float* d = dst + s * kc + p * kNr;
        if (cols == kNr) {
          _mm_storeu_ps(d, _mm_loadu_ps(src + s));
          std::memcpy(d + 4, src + s + 4, 2 * sizeof(float));
        } else {
          for (int64_t j = 0; j < kNr; ++j) d[j] = j < cols ? src[s + j] : 0.0f;
        }
      }
    }
    return;
  }
  for (int64_t s = 0; s < nc; s += kNr, dst += kNr * kc) {
    const int64_t cols = std::min(kNr, n - (j0 + s));
    // Columns are contiguous in k: 8 x 8 blocks transposed (6 of their columns kept), then
    // the rest element by element.
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      __m256 t[8];
      LoadTransposed(b.p + p0 + p + (j0 + s) * b.ld, b.ld, cols, t);
      for (int q = 0; q < 8; ++q) StoreSix(dst + (p + q) * kNr, t[q]);
    }
    PackTail(b.p + p0 + (j0 + s) * b.ld, b.ld, cols, kNr, p, kc, dst);
  }
}

// C's tile (rows x cols of at most kMr x kNr at c) = [C +] acc.
void StoreTile(const __m256 (&acc)[kNr][2], float* c, int64_t ldc, int64_t rows, int64_t cols,
               bool add) {
  if (rows == kMr) {
    for (int64_t j = 0; j < cols; ++j) {
      float* cj = c + j * ldc;
      __m256 v0 = acc[j][0], v1 = acc[j][1];
      if (add) {
        v0 = _mm256_add_ps(_mm256_loadu_ps(cj), v0);
        v1 = _mm256_add_ps(_mm256_loadu_ps(cj + 8), v1);
      }
      _mm256_storeu_ps(cj, v0);
      _mm256_storeu_ps(cj + 8, v1);
    }
    return;
  }
  const __m256i m0 = LaneMask(rows), m1 = LaneMask(rows - 8);
  for (int64_t j = 0; j < cols; ++j) {
    float* cj = c + j * ldc;
    __m256 v0 = acc[j][0], v1 = acc[j][1];
    if (add) {
      v0 = _mm256_add_ps(_mm256_maskload_ps(cj, m0), v0);
      v1 = _mm256_add_ps(_mm256_maskload_ps(cj + 8, m1), v1);
    }
    _mm256_maskstore_ps(cj, m0, v0);
    _mm256_maskstore_ps(cj + 8, m1, v1);
  }
}

// C's tile (rows x cols of at most kMr x kCols at c) = [C +] the panels' product over kc, for
// the first kCols columns of the panel of B (a narrower tile at n's edge computes no padding;
// every element's sum is the same chain of FMAs at any width). The accumulators are named,
// not an array: GCC then keeps them in registers.
template <int kCols>
void MicroKernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows,
                 int64_t cols, bool add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; ++p, a += kMr, b += kNr) {
    const __m256 a0 = _mm256_load_ps(a), a1 = _mm256_load_ps(a + 8);
    __m256 bj = _mm256_broadcast_ss(b);
    c00 = _mm256_fmadd_ps(a0, bj, c00);
    c01 = _mm256_fmadd_ps(a1, bj, c01);
    if constexpr (kCols > 1) {
      bj = _mm256_broadcast_ss(b + 1);
      c10 = _mm256_fmadd_ps(a0, bj, c10);
      c11 = _mm256_fmadd_ps(a1, bj, c11);
    }
    if constexpr (kCols > 2) {
      bj = _mm256_broadcast_ss(b + 2);
      c20 = _mm256_fmadd_ps(a0, bj, c20);
      c21 = _mm256_fmadd_ps(a1, bj, c21);
    }
    if constexpr (kCols > 3) {
      bj = _mm256_broadcast_ss(b + 3);
      c30 = _mm256_fmadd_ps(a0, bj, c30);
      c31 = _mm256_fmadd_ps(a1, bj, c31);
    }
    if constexpr (kCols > 4) {
      bj = _mm256_broadcast_ss(b + 4);
      c40 = _mm256_fmadd_ps(a0, bj, c40);
      c41 = _mm256_fmadd_ps(a1, bj, c41);
    }
    if constexpr (kCols > 5) {
      bj = _mm256_broadcast_ss(b + 5);
      c50 = _mm256_fmadd_ps(a0, bj, c50);
      c51 = _mm256_fmadd_ps(a1, bj, c51);
    }
  }
  const __m256 acc[kNr][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                              {c30, c31}, {c40, c41}, {c50, c51}};
  StoreTile(acc, c, ldc, rows, cols, add);
}

// The micro-kernel as wide as the tile's columns.
void Tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t rows,
          int64_t cols, bool add) {
  switch (cols) {
    case 1: return MicroKernel<1>(kc, a, b, c, ldc, rows, cols, add);
    case 2: return MicroKernel<2>(kc, a, b, c, ldc, rows, cols, add);
    case 3: return MicroKernel<3>(kc, a, b, c, ldc, rows, cols, add);
    case 4: return MicroKernel<4>(kc, a, b, c, ldc, rows, cols, add);
    case 5: return MicroKernel<5>(kc, a, b, c, ldc, rows, cols, add);
    default: return MicroKernel<kNr>(kc, a, b, c, ldc, rows, cols, add);
  }
}

// k's blocks: equal lengths of at most kKc, fixed by k alone (no short last block, whose tiles
// would load and store C for a few k alone).
struct KBlocks {
  explicit KBlocks(int64_t k) : count((k + kKc - 1) / kKc), len((k + count - 1) / count) {}
  int64_t count, len;
};

// The tiles of one (n block, k block, m block): C's [i0, i0+mc) x [j0, j0+nc) [+]= the
// packed panels' product; a panel of A over every panel of B (which order the tiles come in
// changes no bits).
void Tiles(const float* pa, const float* pb, int64_t kc, int64_t mc, int64_t nc, float* c,
           int64_t ldc, bool add) {
  for (int64_t r = 0; r < mc; r += kMr) {
    for (int64_t s = 0; s < nc; s += kNr) {
      Tile(kc, pa + r * kc, pb + s * kc, c + r + s * ldc, ldc, std::min(kMr, mc - r),
           std::min(kNr, nc - s), add);
    }
  }
}

// The loops over blocks. Where `kept` is given (SameA, nn/gemm.h), op(A)'s packed blocks live
// in kept->buf, one slot of kc_len * kMc floats per (m block, k block), packed by the first
// product and read by the later ones; the packing is the same, so are the bits.
void Blocked(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
             bool accumulate, KeptA* kept) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) {
      for (int64_t j = 0; j < n; ++j) std::fill(c + j * ldc, c + j * ldc + m, 0.0f);
    }
    return;
  }
  const KBlocks kb(k);
  const int64_t nc_max = std::min(kNc, (n + kNr - 1) / kNr * kNr);
  const int64_t mc_max = std::min(kMc, (m + kMr - 1) / kMr * kMr);
  float* pb = packed_b.Get(kb.len * nc_max);
  float* pa = kept != nullptr ? nullptr : packed_a.Get(kb.len * mc_max);
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0), nc_pad = (nc + kNr - 1) / kNr * kNr;
    for (int64_t p0 = 0; p0 < k; p0 += kb.len) {
      const int64_t kc = std::min(kb.len, k - p0);
      PackB(b, n, p0, kc, j0, nc_pad, pb);
      for (int64_t i0 = 0; i0 < m; i0 += kMc) {
        const int64_t mc = std::min(kMc, m - i0), mc_pad = (mc + kMr - 1) / kMr * kMr;
        if (kept != nullptr) {
          pa = kept->buf + ((i0 / kMc) * kb.count + p0 / kb.len) * kb.len * kMc;
          if (!kept->packed) PackA(a, m, i0, mc_pad, p0, kc, pa);
        } else {
          PackA(a, m, i0, mc_pad, p0, kc, pa);
        }
        Tiles(pa, pb, kc, mc, nc, c + i0 + j0 * ldc, ldc, accumulate || p0 > 0);
      }
    }
    if (kept != nullptr) kept->packed = true;
  }
}

}  // namespace
}  // namespace avx2_gemm

void GemmAvx2(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
              bool accumulate) {
  avx2_gemm::Blocked(m, n, k, a, b, c, ldc, accumulate, nullptr);
}

int64_t KeptAFloatsAvx2(int64_t m, int64_t k) {
  if (m <= 0 || k <= 0) return 0;
  const avx2_gemm::KBlocks kb(k);
  return (m + avx2_gemm::kMc - 1) / avx2_gemm::kMc * kb.count * kb.len * avx2_gemm::kMc;
}

void GemmAvx2Kept(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
                  bool accumulate, KeptA* kept) {
  avx2_gemm::Blocked(m, n, k, a, b, c, ldc, accumulate, kept);
}

}  // namespace shmtrain::nn
