// A small, fully specified random number generator.
//
// std:: distributions and std::shuffle are implementation-defined, so a seed would give other
// numbers with another standard library; every draw that decides a result (initialisation,
// shuffles, validation splits) comes from here instead. SplitMix64 expands the seed,
// xoshiro256** generates.
#pragma once

#include <cstdint>
#include <vector>

namespace shmtrain::nn {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();                 // xoshiro256**
  uint64_t Below(uint64_t bound);  // uniform in [0, bound), bound >= 1, unbiased (Lemire)
  double Uniform();                // uniform in [0, 1), 53 bits
  double Normal();                 // standard normal, Box-Muller (one value per call)

 private:
  uint64_t s_[4];
};

// Derives an independent seed for a sub-stream, e.g. Mix(seed, epoch) for an epoch's shuffle.
uint64_t MixSeed(uint64_t seed, uint64_t stream);

// Fisher-Yates: perm becomes a permutation of 0..n-1 drawn from rng.
void Permutation(int64_t n, Rng& rng, std::vector<int64_t>* perm);

}  // namespace shmtrain::nn
