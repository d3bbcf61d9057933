// The matrix products of the layers: the one seam between a layer and the kernels that run it.
//
// C (m x n, column-major, leading dimension ldc) = op(A) (m x k) * op(B) (k x n), or C += that
// product. An operand is column-major with its leading dimension, read as stored or
// transposed. Which kernel runs is decided per process (nn/cpu.h); both are our own, BLIS's
// loops over panels of A and B packed a block of k at a time:
//   avx512  nn/kernels/gemm_avx512.cc, compiled for AVX-512 alone: a 32 x 12 tile of C in 24
//           ZMM registers;
//   avx2    nn/kernels/gemm_avx2.cc, compiled for the build's x86-64-v3 (AVX2 + FMA): a
//           16 x 6 tile of C in 12 YMM registers.
// Each sums every element of C in an order fixed by m, n and k alone: its k products in k
// order, in blocks of k whose length depends on k alone. The same operands give the same bits
// on every run of one path, and a column of C (a sample) the same bits whichever other
// columns share its product (eval and predict give a sample the outputs it gets alone). The
// paths differ by float rounding.
#pragma once

#include <cstdint>
#include <memory>

#include "shmtrain/options.h"

namespace shmtrain::nn {

struct Operand {
  const float* p;
  int64_t ld;      // leading dimension of the matrix as stored
  bool t = false;  // read transposed: op(X) = X^T
};

void Gemm(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
          bool accumulate);

// The kernel Gemm runs in this process now: the bf16 one when the product inputs are bf16,
// else the AVX-512 float one where UsedPath() is avx512, else the AVX2 one.
enum class GemmKernel { kAvx2, kAvx512, kBf16 };
GemmKernel ChosenKernel();

// Products that share op(A) (m x k), as a layer's weights over its chunks of samples: every
// kernel packs op(A) once, on the first product, and reads it back in the others, with the
// same bits as Gemm's. op(A)'s values must not change while the object lives; the kernel
// is chosen once, when it is made.
class SameA {
 public:
  SameA(int64_t m, int64_t k, Operand a);
  // C (m x n) = [C +] op(A) op(B), as Gemm(m, n, k, a, b, c, ldc, accumulate).
  void Gemm(int64_t n, Operand b, float* c, int64_t ldc, bool accumulate);

 private:
  int64_t m_, k_;
  Operand a_;
  GemmKernel kernel_;
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> buf_;  // op(A) packed
  bool packed_ = false;
};

// The inputs of every product Gemm computes in this process from now on (--precision): float,
// or bf16 (GemmAvx512Bf16). A worker sets it from its run's configuration before its first
// step; the master never does (eval, predict and validation compute in float). false, and
// nothing changed, when bf16 is asked for where UsedCpu() has no avx512_bf16
// (data::CheckRunOptions refuses such a run before a worker starts).
bool SetProductInputs(ComputeType t);
ComputeType ProductInputs();

// The kernels behind Gemm, for tests and benchmarks that compare them. The AVX2 one runs on
// every CPU this build runs on.
void GemmAvx2(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
              bool accumulate);
// Only where UsedCpu().avx512 (or DetectedCpu()) holds: elsewhere it runs instructions the CPU
// does not have.
void GemmAvx512(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
                bool accumulate);
// The bf16 kernel: op(A) and op(B) rounded to bf16 (nearest even), products summed in float.
// Only where UsedCpu().avx512_bf16 holds.
void GemmAvx512Bf16(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c,
                    int64_t ldc, bool accumulate);
// GemmAvx512 or GemmAvx512Bf16 with op(A) packed into (or, once kept->packed, read from)
// kept->buf, KeptAFloats(m, k, bf16) 64-byte aligned floats: SameA's kernel.
struct KeptA {
  float* buf;
  bool packed;
};
int64_t KeptAFloats(int64_t m, int64_t k, bool bf16);
void GemmAvx512Kept(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
                    bool accumulate, bool bf16, KeptA* kept);
// GemmAvx2 with op(A) packed into (or, once kept->packed, read from) kept->buf,
// KeptAFloatsAvx2(m, k) 64-byte aligned floats: SameA's kernel on the AVX2 path.
int64_t KeptAFloatsAvx2(int64_t m, int64_t k);
void GemmAvx2Kept(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
                  bool accumulate, KeptA* kept);
// x as bf16 bits by the kernel's own conversion (vcvtne2ps2bf16): for tests. Only where
// UsedCpu().avx512_bf16 holds.
void RoundToBf16Avx512(const float* x, int64_t n, uint16_t* out);

}  // namespace shmtrain::nn
