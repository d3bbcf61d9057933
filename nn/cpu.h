// The CPU's vector units as the kernels see them: which code path a process runs.
//
// The build targets x86-64-v3 (AVX2 + FMA) and every binary runs there; kernels compiled for
// more (AVX-512) are chosen at run time when the CPU and the OS offer it. A process decides
// once, at its first kernel call, and every worker of a run decides the same (they inherit the
// environment): the same seed, P and path give the same bits. SHMTRAIN_CPU lowers the path
// (the tests run the fallback on a CPU that has more, and a user can compare):
//   SHMTRAIN_CPU=avx2     the AVX2 kernels even where AVX-512 is there;
//   SHMTRAIN_CPU=avx512   AVX-512 float kernels, without the bf16 dot products (as on CPUs that
//                         lack avx512_bf16);
//   unset or "native"     what the CPU offers.
// A path above the CPU's is refused (CheckCpuEnvironment), never silently lowered.
#pragma once

#include <string>

#include "shmtrain/status.h"

namespace shmtrain::nn {

enum class CpuPath { kAvx2, kAvx512 };

struct CpuFeatures {
  // AVX-512 F, BW, DQ and VL with the OS saving the ZMM and mask registers.
  bool avx512 = false;
  // avx512_bf16: vdpbf16ps, bf16 pair products summed into float.
  bool avx512_bf16 = false;
};

// What the CPU offers (cpuid and xgetbv), whatever SHMTRAIN_CPU says.
CpuFeatures DetectedCpu();

// What the kernels use: DetectedCpu() lowered by SHMTRAIN_CPU (an invalid value is taken as
// unset here; the master refuses it at the start with CheckCpuEnvironment).
const CpuFeatures& UsedCpu();
CpuPath UsedPath();

// "avx512" or "avx2", for logs and benchmarks.
const char* PathName(CpuPath path);

// SHMTRAIN_CPU, checked: a message naming the variable and its value when it is not one of
// avx2, avx512, native, or asks for more than the CPU has.
Status CheckCpuEnvironment();

}  // namespace shmtrain::nn
