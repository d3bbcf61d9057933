#include "master/segment_reads.h"

#include <algorithm>

#include "nn/update.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

int64_t Progress(const shm::Segment& seg) {
  const auto& c = seg.header()->config;
  if (static_cast<Mode>(c.mode) == Mode::kSync) {
    uint64_t lo = UINT64_MAX;
    for (uint32_t r = 0; r < c.workers; ++r) lo = std::min(lo, shm::LoadPhase(*seg.block(r)));
    return static_cast<int64_t>(lo / 2);
  }
  return static_cast<int64_t>(shm::LoadAcquire(seg.header()->param_version));
}

uint64_t TotalSamples(const shm::Segment& seg) {
  uint64_t s = 0;
  for (uint32_t r = 0; r < seg.header()->config.workers; ++r) {
    s += shm::LoadRelaxed(seg.block(r)->samples_total);
  }
  return s;
}

std::vector<float> ParamsAfter(const shm::Segment& seg, int64_t step) {
  if (static_cast<Mode>(seg.header()->config.mode) != Mode::kSync) {
    int64_t progress = 0;
    return CopyParamsAsync(seg, &progress);
  }
  const float* w = seg.params(step);
  return std::vector<float>(w, w + seg.header()->config.param_count);
}

std::vector<float> CopyParamsAsync(const shm::Segment& seg, int64_t* progress) {
  std::vector<float> w(seg.header()->config.param_count);
  *progress = Progress(seg);
  for (size_t i = 0; i < w.size(); ++i) w[i] = nn::SharedAccess::Load(seg.params(0) + i);
  return w;
}

}  // namespace shmtrain::master
