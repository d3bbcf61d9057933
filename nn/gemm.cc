// Gemm's dispatch and its AVX2 path, Eigen's product over the operands as maps: the expressions
// the layers wrote before the seam, so that this path keeps their bits (tests/fixtures/).
#include "nn/gemm.h"

#include <Eigen/Core>
#include <cstdlib>
#include <new>

#include "nn/cpu.h"

namespace shmtrain::nn {
namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
using Map = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;

template <class A, class B>
void Product(const A& a, const B& b, int64_t m, int64_t n, float* c, int64_t ldc,
             bool accumulate) {
  Eigen::Map<Mat, 0, Eigen::OuterStride<>> out(c, m, n, Eigen::OuterStride<>(ldc));
  if (accumulate) {
    out.noalias() += a * b;
  } else {
    out.noalias() = a * b;
  }
}

}  // namespace

void GemmAvx2(int64_t m, int64_t n, int64_t k, Operand a, Operand b, float* c, int64_t ldc,
              bool accumulate) {
  const Map am(a.p, a.t ? k : m, a.t ? m : k, Eigen::OuterStride<>(a.ld));
  const Map bm(b.p, b.t ? n : k, b.t ? k : n, Eigen::OuterStride<>(b.ld));
  if (!a.t && !b.t) return Product(am, bm, m, n, c, ldc, accumulate);
  if (!a.t) return Product(am, bm.transpose(), m, n, c, ldc, accumulate);
  if (!b.t) return Product(am.transpose(), bm, m, n, c, ldc, accumulate);
  Product(am.transpose(), bm.transpose(), m, n, c, ldc, accumulate);
}

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

SameA::SameA(int64_t m, int64_t k, Operand a) : m_(m), k_(k), a_(a), kernel_(ChosenKernel()) {
  if (kernel_ == GemmKernel::kAvx2 || m <= 0 || k <= 0) return;
  const int64_t floats = KeptAFloats(m, k, kernel_ == GemmKernel::kBf16);
  buf_.reset(static_cast<float*>(std::aligned_alloc(64, (floats * 4 + 63) / 64 * 64)));
  if (!buf_) throw std::bad_alloc();
}

void SameA::Free::operator()(float* p) const { std::free(p); }

void SameA::Gemm(int64_t n, Operand b, float* c, int64_t ldc, bool accumulate) {
  if (!buf_) return Run(kernel_, m_, n, k_, a_, b, c, ldc, accumulate);  // AVX2, or empty
  KeptA kept{buf_.get(), packed_};
  GemmAvx512Kept(m_, n, k_, a_, b, c, ldc, accumulate, kernel_ == GemmKernel::kBf16, &kept);
  packed_ = kept.packed;
}

}  // namespace shmtrain::nn
