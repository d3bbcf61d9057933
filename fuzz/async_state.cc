// Async stop states (master/hosts/async_state.cc, DecodeAsyncState, which `shmtrain launch`
// calls on each survivor's file): the input is the file. Half of the inputs get the right
// CRC-32 in their last four bytes so that the decoder's success path is reached; what it takes
// must encode back to the same bytes (the format has one encoding), and cut the parameters
// into the run's parts.
#include "master/hosts/async_state.h"

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"

using namespace shmtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = fuzz::WithValidCrcHalfTheTime(data, size);
  master::AsyncStopState s;
  if (!master::DecodeAsyncState(bytes, "state", &s).ok()) return 0;
  SHMTRAIN_FUZZ_CHECK(master::EncodeAsyncState(s) == bytes,
                      "a state of %zu bytes encodes back to other bytes", size);
  size_t floats = 0;
  for (const master::AsyncPartState& p : s.parts) {
    SHMTRAIN_FUZZ_CHECK(p.settled.size() == static_cast<size_t>(s.hosts) &&
                            (p.snap.empty() || p.snap.size() == p.base.size()),
                        "a part of %zu values, %zu settled, %zu in its snapshot", p.base.size(),
                        p.settled.size(), p.snap.size());
    floats += p.base.size();
  }
  SHMTRAIN_FUZZ_CHECK(floats == s.checkpoint.params.size(), "parts of %zu values for %zu", floats,
                      s.checkpoint.params.size());
  return 0;
}
