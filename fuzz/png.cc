// PNG files through libpng: see image_target.h.
#include "fuzz/image_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return shmtrain::fuzz::RunImageTarget(data, size, ".png");
}
