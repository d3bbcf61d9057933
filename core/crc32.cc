#include "core/crc32.h"

#include <zlib.h>

namespace shmtrain {

// zlib's CRC-32 is the same checksum (init and final xor of all ones) and runs several words
// at a time: the fingerprint of a run hashes the whole dataset, 188 MB for Fashion-MNIST.
uint32_t Crc32(const void* data, size_t n, uint32_t crc) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

}  // namespace shmtrain
