#include "master/kinds/step_state.h"

#include <algorithm>

namespace shmtrain::master {

void RestoreStepState(const Checkpoint& c, int64_t step, shm::Segment* seg) {
  std::copy(c.params.begin(), c.params.end(), seg->mutable_params(step));
  for (size_t k = 0; k < c.states.size(); ++k) {
    std::copy(c.states[k].begin(), c.states[k].end(),
              seg->mutable_state(static_cast<int>(k), step));
  }
}

Checkpoint CopyStepState(const shm::Segment& seg, int64_t step) {
  const uint64_t n = seg.header()->config.param_count;
  Checkpoint c;
  c.step = step;
  const float* w = seg.params(step);
  c.params.assign(w, w + n);
  for (int k = 0; k < seg.num_states(); ++k) {
    const float* s = seg.state(k, step);
    c.states.emplace_back(s, s + n);
  }
  return c;
}

}  // namespace shmtrain::master
