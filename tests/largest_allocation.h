// The largest single allocation made through operator new while a probe is open: how a test
// proves that a decoder spends no more memory than the bytes it was given can justify. The
// replacement of the global operator new that records it (largest_allocation.cc) is linked
// into the test executables that use this header only.
#pragma once

#include <cstddef>

namespace shmtrain::test {

// Open from construction to destruction; probes do not nest. Thread-safe: the allocations of
// every thread count.
class LargestAllocation {
 public:
  LargestAllocation();
  ~LargestAllocation();
  LargestAllocation(const LargestAllocation&) = delete;
  LargestAllocation& operator=(const LargestAllocation&) = delete;

  // In bytes, since the probe opened.
  size_t bytes() const;
};

}  // namespace shmtrain::test
