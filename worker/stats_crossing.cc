#include "worker/stats_crossing.h"

#include <algorithm>

#include "shm/futex.h"
#include "worker/fault.h"

namespace shmtrain::worker {

SlotCrossing::SlotCrossing(shm::Segment& seg, int rank, uint32_t incarnation,
                           shm::PhaseBarrier& barrier, int64_t timeout_ns)
    : seg_(seg),
      rank_(rank),
      incarnation_(incarnation),
      P_(static_cast<int>(seg.header()->config.workers)),
      barrier_(barrier),
      timeout_ns_(timeout_ns),
      per_step_(seg.header()->config.stats_count + 1),
      global_(seg.global_stats()) {}

void SlotCrossing::BeginStep(int64_t t) {
  step_ = t;
  next_ = static_cast<uint64_t>(t) * per_step_ + 1;
  result_ = shm::PhaseBarrier::Result::kOk;
}

void SlotCrossing::Sum(int64_t offset, double* sums, int64_t count) {
  if (result_ != shm::PhaseBarrier::Result::kOk) return;
  double* mine = seg_.mutable_stats(rank_) + offset;
  for (int64_t j = 0; j < count; ++j) shm::StoreRelaxed(mine[j], sums[j]);
  const uint64_t seq = next_++;
  barrier_.PublishStats(seq);
  if (seq == static_cast<uint64_t>(step_) * per_step_ + 2 &&
      FaultAt(seg_.header()->config, FaultPoint::kAtStats, rank_, step_, incarnation_)) {
    DieNow();
  }
  const uint64_t w0 = barrier_.waited_ns();
  result_ = global_ != nullptr ? barrier_.WaitStatsCombined(seq, shm::MonotonicNs() + timeout_ns_)
                               : barrier_.WaitStats(seq, shm::MonotonicNs() + timeout_ns_);
  shm::AddRelaxed<uint64_t>(seg_.mutable_block(rank_)->crossing_wait_ns_total,
                            barrier_.waited_ns() - w0);
  if (result_ != shm::PhaseBarrier::Result::kOk) return;
  if (global_ != nullptr) {
    std::copy(global_ + offset, global_ + offset + count, sums);
    return;
  }
  for (int64_t j = 0; j < count; ++j) sums[j] = shm::LoadRelaxed(seg_.stats(0)[offset + j]);
  for (int q = 1; q < P_; ++q) {
    const double* theirs = seg_.stats(q) + offset;
    for (int64_t j = 0; j < count; ++j) sums[j] += shm::LoadRelaxed(theirs[j]);
  }
}

void SlotCrossing::AddUp(const shm::Segment& seg, double* out) {
  const auto& c = seg.header()->config;
  const auto n = static_cast<int64_t>(c.stats_count);
  if (const double* global = seg.global_stats(); global != nullptr) {
    std::copy(global, global + n, out);
    return;
  }
  for (int64_t j = 0; j < n; ++j) out[j] = shm::LoadRelaxed(seg.stats(0)[j]);
  for (int q = 1; q < static_cast<int>(c.workers); ++q) {
    const double* theirs = seg.stats(q);
    for (int64_t j = 0; j < n; ++j) out[j] += shm::LoadRelaxed(theirs[j]);
  }
}

}  // namespace shmtrain::worker
