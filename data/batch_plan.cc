#include "data/batch_plan.h"

#include "nn/rng.h"
#include "shmtrain/status.h"

// Arguments out of range are bugs in the caller (options are validated before a plan is
// made), so they are checks that abort with file:line, not Statuses (docs/errors.md).
namespace shmtrain::data {

BatchPlan::BatchPlan(int64_t rows, int64_t batch, uint64_t seed)
    : rows_(rows), batch_(batch), seed_(seed) {
  SHMTRAIN_CHECK(rows >= 1, "BatchPlan: rows must be >= 1");
  SHMTRAIN_CHECK(batch >= 0, "BatchPlan: batch must be >= 0");
  // ceil(rows / batch) without forming rows + batch - 1, which could overflow.
  steps_per_epoch_ = batch == 0 ? 1 : (rows - 1) / batch + 1;
}

int64_t BatchPlan::BatchRows(int64_t step) const {
  SHMTRAIN_CHECK(step >= 0, "BatchPlan: step must be >= 0");
  if (batch_ == 0) return rows_;
  // begin < rows_, because the batch index is below ceil(rows / batch).
  const int64_t begin = (step % steps_per_epoch_) * batch_;
  const int64_t left = rows_ - begin;
  return left < batch_ ? left : batch_;
}

BatchPlan::Range BatchPlan::ShareOf(int64_t b, int rank, int P) {
  SHMTRAIN_CHECK(P >= 1, "BatchPlan: P must be >= 1");
  SHMTRAIN_CHECK(rank >= 0 && rank < P, "BatchPlan: rank must be in [0, P)");
  SHMTRAIN_CHECK(b >= 0, "BatchPlan: batch rows must be >= 0");
  // floor(r * b / P) with b = q * P + m is r * q + floor(r * m / P); r * m < P^2 cannot
  // overflow, and r * q <= b, so no intermediate exceeds b.
  const int64_t q = b / P;
  const int64_t m = b % P;
  auto pos = [&](int64_t r) { return r * q + r * m / P; };
  return Range{pos(rank), pos(int64_t{rank} + 1)};
}

const std::vector<int64_t>& BatchPlan::EpochPerm(int64_t epoch) {
  if (epoch != cached_epoch_) {
    nn::Rng rng(nn::MixSeed(seed_, static_cast<uint64_t>(epoch)));
    nn::Permutation(rows_, rng, &perm_);
    cached_epoch_ = epoch;
  }
  return perm_;
}

void BatchPlan::Share(int64_t step, int rank, int P, std::vector<int64_t>* idx) {
  idx->clear();
  const Range r = ShareOf(BatchRows(step), rank, P);
  if (batch_ == 0) {
    // Full batch: positions are the rows themselves.
    idx->reserve(r.end - r.begin);
    for (int64_t i = r.begin; i < r.end; ++i) idx->push_back(i);
    return;
  }
  const int64_t begin = (step % steps_per_epoch_) * batch_;
  const std::vector<int64_t>& perm = EpochPerm(step / steps_per_epoch_);
  idx->assign(perm.begin() + (begin + r.begin), perm.begin() + (begin + r.end));
}

}  // namespace shmtrain::data
