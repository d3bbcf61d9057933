#include "master/run/segment_reads.h"

#include <algorithm>

#include "core/crc32.h"
#include "master/kinds/kind.h"
#include "nn/update.h"

namespace shmtrain::master {

int64_t Progress(const shm::Segment& seg) { return KindOf(seg.header()->config).Progress(seg); }

uint64_t TotalSamples(const shm::Segment& seg) {
  uint64_t s = 0;
  for (uint32_t r = 0; r < seg.header()->config.workers; ++r) {
    s += shm::LoadRelaxed(seg.block(r)->samples_total);
  }
  return s;
}

std::vector<float> ParamsAfter(const shm::Segment& seg, int64_t step) {
  return KindOf(seg.header()->config).ParamsAfter(seg, step);
}

uint32_t StartStateCrc(const shm::Segment& seg) {
  const shm::RunConfig& c = seg.header()->config;
  const std::vector<float> w = ParamsAfter(seg, c.first_step);
  uint32_t crc = Crc32(w.data(), w.size() * sizeof(float));
  for (int k = 0; k < seg.num_states(); ++k) {
    crc = Crc32(seg.state(k, c.first_step), w.size() * sizeof(float), crc);
  }
  return crc;
}

std::vector<float> CopyParamsAsync(const shm::Segment& seg, int64_t* progress) {
  std::vector<float> w(seg.header()->config.param_count);
  *progress = Progress(seg);
  for (size_t i = 0; i < w.size(); ++i) w[i] = nn::SharedAccess::Load(seg.params(0) + i);
  return w;
}

}  // namespace shmtrain::master
