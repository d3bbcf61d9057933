// nn/gemm.h: every kernel path against a product in double, to the bound of float
// summation; the same bits on every call; a sample's column the same bits in a product of any
// batch, on every path; the paths equal to float rounding; nn/cpu.h's
// SHMTRAIN_CPU. nn/kernels/direct_conv.h: the AVX-512 direct convolution sums in the layer's
// order, bit for bit.
#include "nn/gemm.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nn/cpu.h"
#include "nn/kernels/direct_conv.h"
#include "nn/kernels/direct_conv_packets.h"

namespace shmtrain::nn {
namespace {

using Kernel = void (*)(int64_t, int64_t, int64_t, Operand, Operand, float*, int64_t, bool);

struct Path {
  const char* name;
  Kernel kernel;
};

// The paths this CPU can run: AVX2 always (the build's own), AVX-512 where it is there.
std::vector<Path> Paths() {
  std::vector<Path> p = {{"avx2", GemmAvx2}};
  if (DetectedCpu().avx512) p.push_back({"avx512", GemmAvx512});
  return p;
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
};

// The operands of a case, stored with leading dimensions larger than their rows (a kernel that
// reads by rows instead of ld reads the padding, which is NaN).
struct Operands {
  Operands(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
    const int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
    lda = a_rows + 3;
    ldb = b_rows + 5;
    ldc = c.m + 2;
    a.assign(lda * a_cols, NAN);
    b.assign(ldb * b_cols, NAN);
    c0.assign(ldc * c.n, NAN);
    for (int64_t j = 0; j < a_cols; ++j) {
      for (int64_t i = 0; i < a_rows; ++i) a[i + j * lda] = u(rng);
    }
    for (int64_t j = 0; j < b_cols; ++j) {
      for (int64_t i = 0; i < b_rows; ++i) b[i + j * ldb] = u(rng);
    }
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t i = 0; i < c.m; ++i) c0[i + j * ldc] = u(rng);
    }
  }
  float A(const Case& c, int64_t i, int64_t p) const {
    return c.ta ? a[p + i * lda] : a[i + p * lda];
  }
  float B(const Case& c, int64_t p, int64_t j) const {
    return c.tb ? b[j + p * ldb] : b[p + j * ldb];
  }
  std::vector<float> a, b, c0;
  int64_t lda, ldb, ldc;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v;
    // Tiles and their edges (AVX-512: 32 x 12 tiles, blocks of 768 columns; AVX2: 16 x 6
    // tiles, 8 x 8 transposes while packing, blocks of 384 columns; both: blocks of 128 rows,
    // 256 of k), and each block size crossed more than once (k 520, m 260, n 800 and 1540),
    // kept small: the reference is a loop in double, and this test runs under ASan too.
    const int64_t shapes[][3] = {
        {1, 1, 1},      {1, 13, 7},   {31, 11, 5},  {32, 12, 256}, {33, 13, 257},
        {129, 25, 300}, {64, 770, 9}, {7, 1, 1000}, {17, 40, 520}, {260, 20, 40},
        {40, 1540, 3},  {10, 64, 128}, {16, 6, 8},  {5, 17, 33},   {300, 5, 17},
        {17, 33, 300},  {33, 300, 5}, {15, 7, 9},   {1, 300, 17},  {300, 1, 33},
        {20, 800, 520}};
    for (const auto& s : shapes) {
      for (int t = 0; t < 4; ++t) v.push_back({s[0], s[1], s[2], (t & 1) != 0, (t & 2) != 0});
    }
    return v;
  }();
  return cases;
}

std::string Name(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         (c.ta ? " A^T" : "") + (c.tb ? " B^T" : "");
}

// kernel's C against the product in double of op(A) and op(B) as `round` makes each element
// (the float itself, or its bf16): each element within the bound of k float roundings of a sum
// of |products| (Higham's gamma_k, with the first C added too); and nothing outside C's m rows
// written (the padding of each column keeps its NaN).
void ExpectProduct(Kernel kernel, const Case& c, bool accumulate, uint32_t seed,
                   float (*round)(float)) {
  const Operands o(c, seed);
  std::vector<float> out = o.c0;
  kernel(c.m, c.n, c.k, {o.a.data(), o.lda, c.ta}, {o.b.data(), o.ldb, c.tb}, out.data(), o.ldc,
         accumulate);
  int bad = 0;
  for (int64_t j = 0; j < c.n && bad < 3; ++j) {
    for (int64_t i = 0; i < c.m && bad < 3; ++i) {
      double ref = accumulate ? o.c0[i + j * o.ldc] : 0.0, mag = std::fabs(ref);
      for (int64_t p = 0; p < c.k; ++p) {
        const double prod = double(round(o.A(c, i, p))) * round(o.B(c, p, j));
        ref += prod;
        mag += std::fabs(prod);
      }
      const double bound = (c.k + 1) * std::ldexp(1.0, -24) * mag * 1.01 + 1e-30;
      const double got = out[i + j * o.ldc];
      if (!(std::fabs(got - ref) <= bound)) {
        ADD_FAILURE() << "C(" << i << "," << j << ") = " << got << ", the product is " << ref
                      << " (bound " << bound << ")";
        ++bad;
      }
    }
  }
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t i = c.m; i < o.ldc; ++i) ASSERT_TRUE(std::isnan(out[i + j * o.ldc]));
  }
}

float AsIs(float x) { return x; }

TEST(Gemm, EveryPathIsTheProductToFloatRounding) {
  for (const Path& path : Paths()) {
    for (const Case& c : Cases()) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(std::string(path.name) + " " + Name(c) + (accumulate ? " C +=" : " C ="));
        ExpectProduct(path.kernel, c, accumulate, 7, AsIs);
      }
    }
  }
}

// Every call of a path on the same operands gives the same bits, wherever its output is.
TEST(Gemm, EveryPathGivesTheSameBitsEveryCall) {
  for (const Path& path : Paths()) {
    const Case c{129, 770, 300, false, true};
    SCOPED_TRACE(std::string(path.name) + " " + Name(c));
    const Operands o(c, 3);
    std::vector<float> first = o.c0, again = o.c0;
    path.kernel(c.m, c.n, c.k, {o.a.data(), o.lda, c.ta}, {o.b.data(), o.ldb, c.tb}, first.data(),
                o.ldc, false);
    // Another product in between (the kernel's kept scratch holds other panels).
    std::vector<float> other(64 * 64);
    path.kernel(64, 64, 64, {o.a.data(), o.lda, false}, {o.b.data(), o.ldb, false}, other.data(),
                64, false);
    path.kernel(c.m, c.n, c.k, {o.a.data(), o.lda, c.ta}, {o.b.data(), o.ldb, c.tb}, again.data(),
                o.ldc, false);
    for (int64_t j = 0; j < c.n; ++j) {
      for (int64_t i = 0; i < c.m; ++i) {
        ASSERT_EQ(first[i + j * o.ldc], again[i + j * o.ldc]) << "C(" << i << "," << j << ")";
      }
    }
  }
}

// SameA: products over several B with one op(A) give Gemm's bits in each precision the CPU
// has, though op(A) is packed by the first alone; op(A) crosses blocks of m and k, the first
// product's B crosses blocks of n (so op(A)'s blocks are read back within it too), and a
// product of another A in between leaves the kept one alone.
TEST(Gemm, ProductsThatShareATakeGemmsBits) {
  std::vector<ComputeType> inputs = {ComputeType::kFloat};
  if (UsedCpu().avx512_bf16) inputs.push_back(ComputeType::kBf16);
  for (ComputeType t : inputs) {
    for (bool ta : {false, true}) {
      ASSERT_TRUE(SetProductInputs(t));
      SCOPED_TRACE(std::string(t == ComputeType::kBf16 ? "bf16" : "float") + (ta ? " A^T" : ""));
      const Case c{150, 1540, 530, ta, false};
      const Operands o(c, 11);
      SameA same(c.m, c.k, {o.a.data(), o.lda, c.ta});
      for (int64_t n : {c.n, int64_t{37}, int64_t{500}}) {
        const Operands b(Case{c.m, n, c.k, c.ta, false}, static_cast<uint32_t>(n));
        std::vector<float> want = b.c0, got = b.c0, other(64 * 64);
        Gemm(c.m, n, c.k, {o.a.data(), o.lda, c.ta}, {b.b.data(), b.ldb}, want.data(), b.ldc,
             n == 37);
        same.Gemm(n, {b.b.data(), b.ldb}, got.data(), b.ldc, n == 37);
        Gemm(64, 64, 64, {o.a.data(), o.lda}, {o.a.data(), o.lda}, other.data(), 64, false);
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t i = 0; i < c.m; ++i) {
            ASSERT_EQ(want[i + j * b.ldc], got[i + j * b.ldc])
                << "n " << n << ": C(" << i << "," << j << ")";
          }
        }
      }
    }
  }
  SetProductInputs(ComputeType::kFloat);
}

// SameA's kernel on the AVX2 path, on any CPU (SameA itself takes the process's path): op(A)
// packed by the first product and read back by the later ones gives GemmAvx2's bits; op(A)
// crosses blocks of m and k, B a block of n.
TEST(Gemm, TheAvx2KernelWithAKeptAGivesItsBits) {
  for (bool ta : {false, true}) {
    SCOPED_TRACE(ta ? "A^T" : "A");
    const Case c{150, 400, 530, ta, false};
    const Operands o(c, 13);
    std::vector<float> buf(static_cast<size_t>(KeptAFloatsAvx2(c.m, c.k)) + 16);
    // 64-byte aligned inside buf, as SameA's buffer is.
    const uintptr_t at = reinterpret_cast<uintptr_t>(buf.data());
    KeptA kept{buf.data() + ((64 - at % 64) % 64) / sizeof(float), false};
    for (int64_t n : {c.n, int64_t{37}, int64_t{5}}) {
      const Operands b(Case{c.m, n, c.k, c.ta, false}, static_cast<uint32_t>(n));
      std::vector<float> want = b.c0, got = b.c0;
      GemmAvx2(c.m, n, c.k, {o.a.data(), o.lda, c.ta}, {b.b.data(), b.ldb}, want.data(), b.ldc,
               n == 37);
      GemmAvx2Kept(c.m, n, c.k, {o.a.data(), o.lda, c.ta}, {b.b.data(), b.ldb}, got.data(), b.ldc,
                   n == 37, &kept);
      EXPECT_TRUE(kept.packed);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size())) << "n " << n;
    }
  }
}

// A sample's outputs do not depend on the other samples of its batch (eval and predict of one
// image give it the bits it gets among all): a column of C computed within n = 1, 2, 7, 64, 300
// or 800 columns, at various places among them (n / 2: 0, 1, 3, 32, 150, 400, so at different
// places in a tile, and in a later block of n at 800), has the same bits, on every path, for
// each transpose, with C = and C +=; k crosses blocks of k (300, 1000).
TEST(Gemm, ASamplesColumnHasTheSameBitsInAnyBatch) {
  constexpr int64_t kPool = 800, kAt = 400;  // a pool of columns; the sample is column kAt
  const int64_t shapes[][2] = {{37, 300}, {128, 64}, {5, 1000}, {300, 17}};  // m, k
  for (const Path& path : Paths()) {
    for (const auto& mk : shapes) {
      for (int t = 0; t < 4; ++t) {
        for (bool accumulate : {false, true}) {
          const Case c{mk[0], kPool, mk[1], (t & 1) != 0, (t & 2) != 0};
          SCOPED_TRACE(std::string(path.name) + " " + Name(c) + (accumulate ? " C +=" : " C ="));
          const Operands o(c, 5);
          std::vector<float> alone;
          for (int64_t n : {1, 2, 7, 64, 300, 800}) {
            // Columns [start, start + n) of the pool, the sample at n / 2 among them.
            const int64_t start = kAt - n / 2;
            const Operand b{o.b.data() + (c.tb ? start : start * o.ldb), o.ldb, c.tb};
            std::vector<float> out = o.c0;
            float* cs = out.data() + start * o.ldc;
            path.kernel(c.m, n, c.k, {o.a.data(), o.lda, c.ta}, b, cs, o.ldc, accumulate);
            const float* sample = out.data() + kAt * o.ldc;
            if (n == 1) {
              alone.assign(sample, sample + c.m);
            } else {
              EXPECT_EQ(0, std::memcmp(alone.data(), sample, sizeof(float) * c.m))
                  << "the sample within " << n << " columns differs from the sample alone";
            }
          }
        }
      }
    }
  }
}

// k = 0: C = 0, or C kept.
TEST(Gemm, AnEmptySumIsZero) {
  for (const Path& path : Paths()) {
    SCOPED_TRACE(path.name);
    std::vector<float> c = {1, 2, 3, 4};
    const float a = 5, b = 6;
    path.kernel(2, 2, 0, {&a, 2}, {&b, 1}, c.data(), 2, true);
    EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
    path.kernel(2, 2, 0, {&a, 2}, {&b, 1}, c.data(), 2, false);
    EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
  }
}

// The direct convolution's kernels of each path (nn/kernels/direct_conv.h: AVX2's packets on
// every CPU, AVX-512's where the CPU has it) against loops that sum in the layer's order (the
// bias, then the taps in (ky, kx, c) order; a weight gradient's pixels in row order), each step
// one std::fma as the kernels' FMAs: the same bits, so both paths give the same bits. Shapes
// whose rows, runs of taps and channel blocks are longer and shorter than a tile (6 or 12
// pixels or taps, blocks of 32 and 16 channels), strides 1 and 2.
struct DirectKernels {
  const char* name;
  bool runs;
  void (*forward)(const DirectConv&, const float*, const float*, const float*, float*);
  void (*weight_grad)(const DirectConv&, const float*, const float*, float*);
};

void ExpectTheLayersOrder(const DirectKernels& k) {
  struct Shape {
    int64_t c, k, stride, co, h, w;  // input channels and size (unpadded), padding k / 2
  };
  for (const Shape& sh : {Shape{1, 5, 1, 32, 28, 28}, Shape{3, 5, 1, 48, 6, 27},
                          Shape{2, 3, 2, 16, 9, 30}, Shape{4, 1, 1, 64, 3, 13},
                          // Kernel rows of 16k taps, as ResNets' layers have.
                          Shape{16, 3, 1, 48, 5, 11}, Shape{32, 1, 2, 16, 7, 9},
                          Shape{80, 1, 1, 16, 2, 3}}) {
    SCOPED_TRACE("c " + std::to_string(sh.c) + " k " + std::to_string(sh.k) + " stride " +
                 std::to_string(sh.stride) + " co " + std::to_string(sh.co) + " " +
                 std::to_string(sh.h) + "x" + std::to_string(sh.w));
    const int64_t pad = sh.k / 2, hp = sh.h + 2 * pad, wp = sh.w + 2 * pad;
    const DirectConv d{sh.c,
                       sh.k,
                       sh.stride,
                       sh.co,
                       (hp - sh.k) / sh.stride + 1,
                       (wp - sh.k) / sh.stride + 1,
                       wp};
    const int64_t kdim = sh.k * sh.k * sh.c, pix = d.out_h * d.out_w;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto random = [&](int64_t n) {
      std::vector<float> v(n);
      for (float& x : v) x = u(rng);
      return v;
    };
    std::vector<float> padded(hp * wp * sh.c, 0.0f);
    for (int64_t y = 0; y < sh.h; ++y) {
      for (int64_t x = 0; x < sh.w * sh.c; ++x) padded[((y + pad) * wp + pad) * sh.c + x] = u(rng);
    }
    const std::vector<float> w = random(sh.co * kdim), bias = random(sh.co),
                             dy = random(pix * sh.co), g0 = random(sh.co * kdim);
    // The tap t = (ky, kx, c) of output pixel (oy, ox) in `padded`.
    auto tap = [&](int64_t oy, int64_t ox, int64_t t) {
      const int64_t ky = t / (sh.k * sh.c), j = t % (sh.k * sh.c);
      return padded[((oy * sh.stride + ky) * wp + ox * sh.stride) * sh.c + j];
    };
    std::vector<float> y(pix * sh.co), want(pix * sh.co);
    k.forward(d, padded.data(), w.data(), bias.data(), y.data());
    for (int64_t p = 0; p < pix; ++p) {
      for (int64_t o = 0; o < sh.co; ++o) {
        float acc = bias[o];
        for (int64_t t = 0; t < kdim; ++t) acc = std::fma(tap(p / d.out_w, p % d.out_w, t), w[t * sh.co + o], acc);
        want[p * sh.co + o] = acc;
      }
    }
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float)))
        << "the forward pass differs from the layer's order";
    std::vector<float> g = g0, gwant = g0;
    k.weight_grad(d, padded.data(), dy.data(), g.data());
    for (int64_t t = 0; t < kdim; ++t) {
      for (int64_t o = 0; o < sh.co; ++o) {
        float acc = gwant[t * sh.co + o];
        for (int64_t p = 0; p < pix; ++p) acc = std::fma(tap(p / d.out_w, p % d.out_w, t), dy[p * sh.co + o], acc);
        gwant[t * sh.co + o] = acc;
      }
    }
    EXPECT_EQ(0, std::memcmp(g.data(), gwant.data(), g.size() * sizeof(float)))
        << "the weight gradient differs from the layer's order";
  }
}

TEST(DirectConv, EachPathsKernelsSumInTheLayersOrder) {
  for (const DirectKernels& k :
       {DirectKernels{"avx2", true, &direct_packets::Forward<float>,
                      &direct_packets::WeightGrad<float>},
        DirectKernels{"avx512", DetectedCpu().avx512, &DirectConvForwardAvx512,
                      &DirectConvWeightGradAvx512}}) {
    if (!k.runs) {
      std::printf("[ skipped ] the %s kernels: this CPU has no AVX-512\n", k.name);
      continue;
    }
    SCOPED_TRACE(k.name);
    ExpectTheLayersOrder(k);
  }
}

// bf16 as the references write it (Kalamkar et al. 2019; Intel's vcvtne2ps2bf16): round to
// nearest, ties to even; NaN stays a NaN; denormals become zeros of their sign.
uint16_t ReferenceBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u, exp = (u >> 23) & 0xff, mant = u & 0x7fffff;
  if (exp == 0xff && mant != 0) return static_cast<uint16_t>((u >> 16) | 0x40);
  if (exp == 0) return static_cast<uint16_t>(sign >> 16);
  const uint32_t kept = u >> 16, dropped = u & 0xffff;
  const bool up = dropped > 0x8000 || (dropped == 0x8000 && (kept & 1));
  return static_cast<uint16_t>(kept + (up ? 1 : 0));
}

float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool HasBf16() { return DetectedCpu().avx512_bf16; }

TEST(Bf16, TheKernelsRoundingIsNearestEven) {
  if (!HasBf16()) GTEST_SKIP() << "this CPU has no avx512_bf16";
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 3.14159265f, 1e-40f, -1e-40f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(), 65504.0f};
  // Ties both ways: 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7 (to even: down), and
  // 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (to even: up); and one ulp either side.
  for (float base : {1.0f, 1.0f + std::ldexp(1.0f, -7)}) {
    const float tie = base + std::ldexp(1.0f, -8);
    x.push_back(tie);
    x.push_back(std::nextafter(tie, 0.0f));
    x.push_back(std::nextafter(tie, 2.0f));
    x.push_back(-tie);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 1000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  std::vector<uint16_t> got(x.size());
  RoundToBf16Avx512(x.data(), static_cast<int64_t>(x.size()), got.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t want = ReferenceBf16(x[i]);
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(FromBf16(got[i]))) << i;
    } else {
      EXPECT_EQ(got[i], want) << "element " << i << " = " << x[i];
    }
  }
}

float RoundedToBf16(float x) { return FromBf16(ReferenceBf16(x)); }

// The bf16 product: each element the float sum of the exact products of the operands rounded
// to bf16 (the test's rounding), to the bound of float summation.
TEST(Bf16, TheProductIsOfTheRoundedOperandsSummedInFloat) {
  if (!HasBf16()) GTEST_SKIP() << "this CPU has no avx512_bf16";
  for (const Case& c : Cases()) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(Name(c) + (accumulate ? " C +=" : " C ="));
      ExpectProduct(GemmAvx512Bf16, c, accumulate, 11, RoundedToBf16);
    }
  }
}

// The bf16 direct convolution: each output the bias plus the exact products of the input and
// the weights rounded to bf16 (the test's rounding), to the bound of float summation; pairs of
// taps that cross a kernel column (c odd, k*c even) and rows of more and fewer pixels than a
// tile, strides 1 and 2, blocks of 32 and 16 channels.
TEST(DirectConv, TheBf16ForwardSumsTheRoundedInputsInFloat) {
  if (!HasBf16()) GTEST_SKIP() << "this CPU has no avx512_bf16";
  struct Shape {
    int64_t c, k, stride, co, h, w;  // input channels and size (unpadded), padding k / 2
  };
  for (const Shape& sh : {Shape{16, 3, 1, 48, 5, 27}, Shape{2, 5, 2, 16, 9, 8},
                          Shape{64, 1, 1, 32, 3, 13}, Shape{6, 3, 1, 16, 1, 1},
                          Shape{3, 2, 1, 16, 4, 5}}) {
    SCOPED_TRACE("c " + std::to_string(sh.c) + " k " + std::to_string(sh.k) + " stride " +
                 std::to_string(sh.stride) + " co " + std::to_string(sh.co));
    const int64_t pad = sh.k / 2, hp = sh.h + 2 * pad, wp = sh.w + 2 * pad;
    const DirectConv d{sh.c, sh.k, sh.stride, sh.co, (hp - sh.k) / sh.stride + 1,
                       (wp - sh.k) / sh.stride + 1, wp};
    const int64_t kdim = sh.k * sh.k * sh.c, pix = d.out_h * d.out_w;
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> padded(hp * wp * sh.c, 0.0f), w(sh.co * kdim), bias(sh.co);
    for (int64_t y = 0; y < sh.h; ++y) {
      for (int64_t x = 0; x < sh.w * sh.c; ++x) padded[((y + pad) * wp + pad) * sh.c + x] = u(rng);
    }
    for (float& v : w) v = u(rng);
    for (float& v : bias) v = u(rng);
    std::vector<uint16_t> in(padded.size());
    RoundToBf16Avx512(padded.data(), static_cast<int64_t>(in.size()), in.data());
    std::vector<uint32_t> pairs(kdim * sh.co / 2);
    PackDirectBf16Weights(d, w.data(), pairs.data());
    std::vector<float> y(pix * sh.co);
    DirectConvForwardBf16(d, in.data(), pairs.data(), bias.data(), y.data());
    for (int64_t p = 0; p < pix; ++p) {
      for (int64_t o = 0; o < sh.co; ++o) {
        double want = bias[o], size = std::fabs(bias[o]);
        for (int64_t t = 0; t < kdim; ++t) {
          const int64_t ky = t / (sh.k * sh.c), j = t % (sh.k * sh.c);
          const double v = static_cast<double>(RoundedToBf16(
                               padded[((p / d.out_w * sh.stride + ky) * wp +
                                       p % d.out_w * sh.stride) * sh.c + j])) *
                           RoundedToBf16(w[t * sh.co + o]);
          want += v;
          size += std::fabs(v);
        }
        ASSERT_NEAR(y[p * sh.co + o], want, size * kdim * 0x1p-23)
            << "pixel " << p << " channel " << o;
      }
    }
  }
}

// SHMTRAIN_CPU: the known names, and a path above the CPU's refused.
TEST(CpuPath, TheEnvironmentIsChecked) {
  const char* old = std::getenv("SHMTRAIN_CPU");
  const std::string saved = old == nullptr ? "" : old;
  for (const char* ok : {"avx2", "native", ""}) {
    setenv("SHMTRAIN_CPU", ok, 1);
    EXPECT_TRUE(CheckCpuEnvironment().ok()) << ok;
  }
  setenv("SHMTRAIN_CPU", "avx9", 1);
  EXPECT_EQ(CheckCpuEnvironment().message(),
            "SHMTRAIN_CPU='avx9' is not a CPU path: use avx2, avx512 or native (or leave it unset)");
  setenv("SHMTRAIN_CPU", "avx512", 1);
  EXPECT_EQ(CheckCpuEnvironment().ok(), DetectedCpu().avx512);
  if (old == nullptr) {
    unsetenv("SHMTRAIN_CPU");
  } else {
    setenv("SHMTRAIN_CPU", saved.c_str(), 1);
  }
}

}  // namespace
}  // namespace shmtrain::nn
