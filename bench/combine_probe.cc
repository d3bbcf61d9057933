// combine_probe N ROUNDS: run under mpirun with H ranks. Times the host masters' combine
// (master/hosts/hosts.h, Hosts::Combine: reduce-scatter + allgather in host order) of N floats
// against a raw MPI_Allreduce(MPI_SUM) of the same N floats, in the same processes and the same
// run: ROUNDS rounds, each of 10 combines then 10 allreduces, every operation started together
// after an MPI_Barrier. Rank 0 prints one line:
//   combine_probe floats N bytes B hosts H combine_us X allreduce_us Y same_bits 0|1
// (medians over the operations; same_bits: whether both gave identical floats, which they must
// for H = 2, where a + b is the only order).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "bench_util.h"
#include "master/hosts/hosts.h"
#include "shm/futex.h"

namespace {

using shmtrain::bench::Median;

double TimeUs(const auto& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  op();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<shmtrain::master::Hosts> hosts;
  if (shmtrain::Status s = shmtrain::master::JoinHosts(&argc, &argv, &hosts); !s.ok()) {
    std::fprintf(stderr, "combine_probe: %s\n", s.message().c_str());
    return 1;
  }
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 1 << 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<float> in(static_cast<size_t>(n)), out(in.size()), ref(in.size());
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>((i * 7919 + hosts->index() * 31) % 1000) * 1e-3f;
  std::vector<double> combine, allreduce;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 10; ++k) {
      combine.push_back(TimeUs([&] {
        shmtrain::master::StepTotals t{r * 10 + k, 1, 0};
        const shmtrain::Status s = hosts->Combine(in.data(), out.data(), n, &t,
                                                  shmtrain::shm::MonotonicNs() + 60'000'000'000,
                                                  [] { return false; });
        if (!s.ok()) {
          std::fprintf(stderr, "combine_probe: %s\n", s.message().c_str());
          std::exit(1);
        }
      }));
    }
    for (int k = 0; k < 10; ++k) {
      allreduce.push_back(TimeUs([&] {
        MPI_Allreduce(in.data(), ref.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }));
    }
  }
  const bool same = std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)) == 0;
  if (hosts->index() == 0) {
    std::printf("combine_probe floats %lld bytes %lld hosts %d combine_us %.1f allreduce_us %.1f "
                "same_bits %d\n",
                static_cast<long long>(n), static_cast<long long>(n * 4), hosts->count(),
                Median(combine), Median(allreduce), same ? 1 : 0);
  }
  hosts->Finish();
  return 0;
}
