#include "master/run/segment_reads.h"

#include <algorithm>

#include "core/crc32.h"

namespace shmtrain::master {

uint64_t TotalSamples(const shm::Segment& seg) {
  uint64_t s = 0;
  for (uint32_t r = 0; r < seg.header()->config.workers; ++r) {
    s += shm::LoadRelaxed(seg.block(r)->samples_total);
  }
  return s;
}

uint32_t StartStateCrc(const shm::Segment& seg, const SegmentProtocol& protocol) {
  const shm::RunConfig& c = seg.header()->config;
  const std::vector<float> w = protocol.ParamsAfter(seg, c.first_step);
  uint32_t crc = Crc32(w.data(), w.size() * sizeof(float));
  for (int k = 0; k < seg.num_states(); ++k) {
    crc = Crc32(seg.state(k, c.first_step), w.size() * sizeof(float), crc);
  }
  return crc;
}

}  // namespace shmtrain::master
