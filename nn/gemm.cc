// Gemm's dispatch: the kernel of this process (nn/cpu.h, --precision), and SameA's op(A) packed
// once. The kernels are nn/kernels/gemm_avx2.cc and gemm_avx512.cc.
#include "nn/gemm.h"

#include <cstddef>
#include <new>

#include "nn/cpu.h"

namespace shmtrain::nn {

namespace {
ComputeType inputs = ComputeType::kFloat;
}  // namespace

bool SetProductInputs(ComputeType t) {
  if (t == ComputeType::kBf16 && !UsedCpu().avx512_bf16) return false;
  inputs = t;
  return true;
}

ComputeType ProductInputs() { return inputs; }

GemmKernel ChosenKernel() {
  if (inputs == ComputeType::kBf16) return GemmKernel::kBf16;
  return UsedPath() == CpuPath::kAvx512 ? GemmKernel::kAvx512 : GemmKernel::kAvx2;
}

namespace {

void Run(GemmKernel kernel, int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c,
         int64_t ldc, bool accumulate) {
  switch (kernel) {
    case GemmKernel::kBf16: return GemmAvx512Bf16(m, n, k, a, b, c, ldc, accumulate);
    case GemmKernel::kAvx512: return GemmAvx512(m, n, k, a, b, c, ldc, accumulate);
    case GemmKernel::kAvx2: return GemmAvx2(m, n, k, a, b, c, ldc, accumulate);
  }
}

}  // namespace

void Gemm(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
          bool accumulate) {
  Run(ChosenKernel(), m, n, k, a, b, c, ldc, accumulate);
}

// The buffer comes from the standard library's aligned operator new: its failure is the
// standard library's std::bad_alloc, which this file neither throws nor catches
// (docs/errors.md): in the master it unwinds to the command's one catch site (the validation
// evaluator's thread catches its own), and a worker, which has none, ends (std::terminate,
// SIGABRT): a death its master reports and counts.
SameA::SameA(int64_t m, int64_t k, Operand a) : m_(m), k_(k), a_(a), kernel_(ChosenKernel()) {
  if (m <= 0 || k <= 0) return;
  const int64_t floats = kernel_ == GemmKernel::kAvx2
                             ? KeptAFloatsAvx2(m, k)
                             : KeptAFloats(m, k, kernel_ == GemmKernel::kBf16);
  buf_.reset(static_cast<float*>(
      ::operator new(static_cast<size_t>(floats) * sizeof(float), std::align_val_t{64})));
}

void SameA::Free::operator()(float* p) const { ::operator delete(p, std::align_val_t{64}); }

void SameA::Gemm(int64_t n, Operand b, float* c, int64_t ldc, bool accumulate) {
  if (!buf_) return Run(kernel_, m_, n, k_, a_, b, c, ldc, accumulate);  // an empty product
  KeptA kept{buf_.get(), packed_};
  if (kernel_ == GemmKernel::kAvx2) {
    GemmAvx2Kept(m_, n, k_, a_, b, c, ldc, accumulate, &kept);
  } else {
    GemmAvx512Kept(m_, n, k_, a_, b, c, ldc, accumulate, kernel_ == GemmKernel::kBf16, &kept);
  }
  packed_ = kept.packed;
}

}  // namespace shmtrain::nn
