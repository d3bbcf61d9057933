#include "nn/cpu.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace shmtrain::nn {
namespace {

// XCR0: the OS saves SSE (bit 1), AVX (2), the opmask (5) and the ZMM registers (6, 7).
bool OsSavesZmm() {
  uint32_t a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return false;
  uint32_t lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6) == 0xe6;
}

enum class Asked { kNative, kAvx2, kAvx512, kInvalid };

Asked AskedPath() {
  const char* v = std::getenv("SHMTRAIN_CPU");
  if (v == nullptr || *v == '\0' || std::string_view(v) == "native") return Asked::kNative;
  if (std::string_view(v) == "avx2") return Asked::kAvx2;
  if (std::string_view(v) == "avx512") return Asked::kAvx512;
  return Asked::kInvalid;
}

}  // namespace

CpuFeatures DetectedCpu() {
  CpuFeatures f;
  uint32_t a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || !OsSavesZmm()) return f;
  f.avx512 = (b & bit_AVX512F) && (b & bit_AVX512DQ) && (b & bit_AVX512BW) && (b & bit_AVX512VL);
  const uint32_t max_sub = a;
  if (f.avx512 && max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0) {
    f.avx512_bf16 = (a & (1u << 5)) != 0;
  }
  return f;
}

const CpuFeatures& UsedCpu() {
  static const CpuFeatures used = [] {
    CpuFeatures f = DetectedCpu();
    switch (AskedPath()) {
      case Asked::kAvx2:
        f = CpuFeatures{};
        break;
      case Asked::kAvx512:
        f.avx512_bf16 = false;
        break;
      case Asked::kNative:
      case Asked::kInvalid:
        break;
    }
    return f;
  }();
  return used;
}

CpuPath UsedPath() { return UsedCpu().avx512 ? CpuPath::kAvx512 : CpuPath::kAvx2; }

const char* PathName(CpuPath path) { return path == CpuPath::kAvx512 ? "avx512" : "avx2"; }

Status CheckCpuEnvironment() {
  const Asked asked = AskedPath();
  const char* v = std::getenv("SHMTRAIN_CPU");
  if (asked == Asked::kInvalid) {
    return Status::Usage(std::string("SHMTRAIN_CPU='") + v +
                         "' is not a CPU path: use avx2, avx512 or native (or leave it unset)");
  }
  if (asked == Asked::kAvx512 && !DetectedCpu().avx512) {
    return Status::Usage(
        "SHMTRAIN_CPU=avx512, but this CPU (or its OS) has no AVX-512 F/BW/DQ/VL: use avx2 or "
        "native");
  }
  return Status::Ok();
}

}  // namespace shmtrain::nn
