// Batch norm's statistics outside the layer (nn/layers/batchnorm.cc): the moments of crossed
// sums, and the running statistics, which the training loops move after each step.
//
// Why the loops and not the layer: a buffer is part of the flat vector (nn/layer.h,
// ParamBlock::buffer), and the flat vector is written only where the loops write parameters.
// Sync, rank r writes the buffers that fall in its slice of W[(t+1)%2] in the update phase,
// from W[t%2] and the step's crossed sums, which it adds up again from the ranks' statistics
// blocks (the same bits the layers saw): a rank that replaces one after its gradient phase
// has the sums without redoing the pass (worker/sync_loop.cc). Async, each update moves the
// shared buffers by its own minibatch's sums, lock-free as W is (worker/async_loop.cc). One
// process (simulate, the tests) records the sums of its pass (RecordedStats).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/layer.h"
#include "shmtrain/model_spec.h"

namespace shmtrain::nn {

// The moments of a forward crossing's sums: per channel the sum of x, then of x^2, then the
// count M of values.
struct BatchMoments {
  BatchMoments(const double* sums, int64_t channels)
      : s(sums), q(sums + channels), count(sums[2 * channels]) {}
  double Mean(int64_t c) const { return s[c] / count; }
  // Biased (what training normalises with); never below 0, whatever rounding leaves.
  double Variance(int64_t c) const {
    const double m = Mean(c);
    const double v = q[c] / count - m * m;
    return v > 0 ? v : 0;
  }
  const double* s;
  const double* q;
  double count;
};

// A batch norm layer of a model: its channels, where its running_mean starts in the flat
// vector (running_var follows, then num_batches_tracked), where its forward sums start among
// the model's statistics, and its momentum.
struct NormSite {
  int64_t channels;
  int64_t running;
  int64_t stats;
  double momentum;
};
// Every batch norm layer of spec, in the flat vector's order (nested blocks too).
std::vector<NormSite> NormSites(const ModelSpec& spec);
// The same of a spec whose shapes (ResolveShapes') are known.
std::vector<NormSite> NormSites(const ModelSpec& spec, const std::vector<Shape>& shapes);

// The first batch norm layer of spec that a training batch of `rows` samples gives at most
// one value per channel (batchnorm1d: a value per sample; batchnorm2d: rows x h x w), named
// as messages name a layer ("batchnorm1d #1 (layer 2)", one inside a block as "batchnorm2d in
// residual #2 (layer 4)"); empty when there is none. Such a batch has no variance: the
// layer outputs its bias alone and its running_var decays by (1 - momentum) a step, which
// is why PyTorch refuses it ("Expected more than 1 value per channel when training") and so
// does the run (data/pipeline.cc, CheckBatchNormBatches). Of the model resolved once.
std::string LoneValueLayer(const ResolvedModel& model, int64_t rows);

// The buffers after a step whose crossed sums are `stats` (the model's statistics, StatsCount
// doubles), from the buffers before it: out[i] for the buffer entries i in [lo, hi) of the
// flat vector, from in[i]; nothing else of out is written. running = (1 - m) * running + m *
// batch (the unbiased variance), num_batches_tracked + 1, as torch's BatchNorm in training.
void AdvanceRunningStats(const std::vector<NormSite>& sites, const double* stats,
                         const float* in, float* out, int64_t lo, int64_t hi);

// Zeroes the buffer entries of a gradient in [lo, hi) (async: weight decay added w to them).
void ClearBufferGradients(const std::vector<NormSite>& sites, float* grad, int64_t lo, int64_t hi);

// One crossing of a training pass (StatsCrossing::Sum): where its sums sit among the model's
// statistics, and how many doubles.
struct Crossing {
  int64_t offset;
  int64_t count;
};
// The crossings of a training pass of spec, in the order every pass makes them (forward in
// layer order, backward in reverse, nested blocks included): the net's structure alone decides
// them, whatever the rows. Found by a pass over 0 rows, the one a worker with an empty share
// makes. Several hosts: the master's combiner exchanges the crossings in this order
// (master/hosts/combiner.h).
std::vector<Crossing> PassCrossings(const ModelSpec& spec);

// A crossing that crosses nothing: it keeps the sums each crossing was given, at their place
// among the model's statistics, for AdvanceRunningStats after the pass.
class RecordedStats final : public StatsCrossing {
 public:
  explicit RecordedStats(const ModelSpec& spec);
  // For a model of `count` statistics (StatsCount).
  explicit RecordedStats(uint64_t count) : stats_(static_cast<size_t>(count), 0.0) {}
  void Sum(int64_t offset, double* sums, int64_t count) override;
  const double* data() const { return stats_.data(); }

 private:
  std::vector<double> stats_;
};

}  // namespace shmtrain::nn
