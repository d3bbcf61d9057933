// The checksums shmtrain writes and checks.
// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): the checksum of model files and
// checkpoints. Crc32(data, n, Crc32(prev...)) continues a running checksum.
// CRC-32C (Castagnoli, reflected, polynomial 0x82F63B78): the checksum of TFRecord framing
// (TensorBoard's event files, monitoring/tfevents.h); the same continuation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shmtrain {

uint32_t Crc32(const void* data, size_t n, uint32_t crc = 0);
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace shmtrain
