// Which rows each worker uses at each step: a pure function of (rows, batch, seed, step,
// rank, P), so a redone step and a resumed run see the same samples.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace shmtrain::data {

class BatchPlan {
 public:
  // batch = 0: full batch (every step uses all rows, in order). Otherwise each epoch is a
  // fresh permutation drawn from nn::Rng(nn::MixSeed(seed, epoch)), cut into
  // ceil(rows / batch) consecutive batches (the last one may be smaller).
  BatchPlan(int64_t rows, int64_t batch, uint64_t seed);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // Rows in the global batch of `step`.
  int64_t BatchRows(int64_t step) const;

  // Worker `rank` of P takes positions [floor(r*b/P), floor((r+1)*b/P)) of the step's batch
  // (b = BatchRows(step)); a share may be empty. Full batch: the positions are the rows
  // themselves, a contiguous range the caller can use without Share().
  struct Range {
    int64_t begin = 0;
    int64_t end = 0;
  };
  static Range ShareOf(int64_t b, int rank, int P);

  // Writes the row indices of the share into *idx (cleared first). Full batch: the rows
  // begin..end-1. Minibatch: the permuted rows. Caches the current epoch's permutation, so
  // calls with steps in increasing order cost O(share) except once per epoch.
  void Share(int64_t step, int rank, int P, std::vector<int64_t>* idx);

 private:
  const std::vector<int64_t>& EpochPerm(int64_t epoch);
  int64_t rows_;
  int64_t batch_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;
};

// The minibatch of rows idx: their features (`features` floats a row of x) into bx and their
// targets (y) into by, both resized: the one gather of every loop that trains on a share.
// copy_row(row, in, out) writes row `row` (its `features` floats at in) to out: a copy, or
// an augmented copy (data/augment.h).
template <class Vec, class CopyRow>
void GatherRows(const float* x, const float* y, int64_t features, const std::vector<int64_t>& idx,
                Vec* bx, Vec* by, CopyRow copy_row) {
  const int64_t rows = static_cast<int64_t>(idx.size());
  bx->resize(static_cast<size_t>(rows * features));
  by->resize(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    copy_row(idx[i], x + idx[i] * features, bx->data() + i * features);
    (*by)[i] = y[idx[i]];
  }
}

template <class Vec>
void GatherRows(const float* x, const float* y, int64_t features, const std::vector<int64_t>& idx,
                Vec* bx, Vec* by) {
  GatherRows(x, y, features, idx, bx, by, [features](int64_t, const float* in, float* out) {
    std::copy(in, in + features, out);
  });
}

}  // namespace shmtrain::data
