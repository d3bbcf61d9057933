// CSV files: see text_target.h.
#include "fuzz/text_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shmtrain::fuzz::RunTextTarget(data, size, "csv", ".csv");
}
