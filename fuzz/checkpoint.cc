// Checkpoints (master/files/checkpoint.cc, DecodeCheckpoint, which LoadCheckpoint calls with the
// file's bytes): the input is the file. As for model files, half of the inputs get the right CRC-32 in their last four bytes so
// that the loader's success path is reached.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/crc32.h"
#include "fuzz/fuzz_util.h"
#include "master/files/checkpoint.h"

using namespace shmtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = fuzz::WithValidCrcHalfTheTime(data, size);
  Checkpoint c;
  if (!DecodeCheckpoint(bytes, "checkpoint", &c).ok()) return 0;
  // The file holds exactly its header, the optimizer's name, W and K state vectors, the CRC.
  size_t floats = c.params.size();
  for (const auto& s : c.states) {
    SHMTRAIN_FUZZ_CHECK(s.size() == c.params.size(), "a state vector of %zu floats for %zu "
                        "parameters", s.size(), c.params.size());
    floats += s.size();
  }
  const size_t expect = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4 + c.optimizer.size() + floats * 4 + 4;
  SHMTRAIN_FUZZ_CHECK(expect == size, "a checkpoint of %zu bytes read as one of %zu", size,
                      expect);
  SHMTRAIN_FUZZ_CHECK(c.step >= 0 && c.states.size() <= static_cast<size_t>(kMaxStates),
                      "step %lld, %zu state vectors", static_cast<long long>(c.step),
                      c.states.size());
  return 0;
}
