// The generator is specified down to the bit so that a seed means the same numbers everywhere:
//
//  * Seeding: the four xoshiro256** state words are four consecutive SplitMix64 outputs
//    starting from the seed. SplitMix64's output function is a bijection of a counter that
//    advances by an odd constant, so the four words are distinct and never all zero (the one
//    state xoshiro cannot leave).
//  * Next(): xoshiro256** (Blackman & Vigna, 2018).
//  * Below(bound): Lemire's nearly-divisionless method (2019): the high 64 bits of the 128-bit
//    product Next() * bound, rejecting the low words below 2^64 mod bound. Unbiased; the
//    number of draws consumed depends only on the stream.
//  * Uniform(): the top 53 bits of Next() scaled by 2^-53, so every value is a multiple of
//    2^-53 in [0, 1).
//  * Normal(): Box-Muller, one value per call and no cached second value, so the stream
//    position after k calls does not depend on which calls were normals: u1 = 1 - Uniform()
//    in (0, 1] (log is finite), then u2 = Uniform() in [0, 1), result
//    sqrt(-2 ln u1) * cos(2 pi u2). Exactly two Next() draws per call. The integer stream is
//    bit-exact on every platform; Normal() additionally goes through std::log and std::cos,
//    which libms compute to within about an ulp, so values agree bit for bit under the same
//    libm and differ at most in the last bits elsewhere.
//  * MixSeed(seed, stream): the SplitMix64 finaliser of seed ^ (stream * 0x9E3779B97F4A7C15).
//    Multiplying by an odd constant, xor and the finaliser are all bijections, so for a fixed
//    seed distinct streams always give distinct seeds.
//  * Permutation: Fisher-Yates from the top, for i = n-1 down to 1 swap perm[i] with
//    perm[Below(i + 1)], starting from the identity.
#include "nn/rng.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>
#include <utility>

#include "shmtrain/status.h"

namespace shmtrain::nn {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64(uint64_t& x) {
  x += kGolden;
  return Mix64(x);
}

uint64_t Rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& word : s_) word = SplitMix64(x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t bound) {
  SHMTRAIN_CHECK(bound != 0, "Rng::Below(0)");
  unsigned __int128 m = static_cast<unsigned __int128>(Next()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<unsigned __int128>(Next()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Rng::Uniform() {
  return static_cast<double>(Next() >> 11) * 0x1.0p-53;
}

double Rng::Normal() {
  // Two statements: the draw order (u1 first) is part of the specification.
  const double u1 = 1.0 - Uniform();
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  return Mix64(seed ^ (stream * kGolden));
}

void Permutation(int64_t n, Rng& rng, std::vector<int64_t>* perm) {
  SHMTRAIN_CHECK(n >= 0, "Permutation of a negative count");
  perm->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*perm)[i] = i;
  for (int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap((*perm)[i], (*perm)[j]);
  }
}

}  // namespace shmtrain::nn
