// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): the checksum of model files and
// checkpoints. Crc32(data, n, Crc32(prev...)) continues a running checksum.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shmtrain {

uint32_t Crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace shmtrain
