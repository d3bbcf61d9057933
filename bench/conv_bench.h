// What the two halves of conv_bench share: the step comparisons (bench/conv_bench.cc, with
// main) and the sync scaling (bench/conv_bench_scaling.cc).
#pragma once

#include <string>
#include <vector>

#include "bench/peak.h"
#include "bench/torch_peer.h"
#include "shmtrain/model_spec.h"
#include "shmtrain/options.h"

namespace shmtrain::bench {

// The figures a model's sync scaling is held to (0: none): P2/P1, and P = 2 over DDP's P = 2
// in the same precision.
struct ScalingTargets {
  double p2_over_p1, over_ddp;
};

// A model the benchmark runs: its name (bench/cnn_torch.py's and cnn_ddp.py's too), model text
// and the shape of an input sample (10 classes); the batches of its step measurements, their
// steps (STEPS times step_scale) and the ratio of its step to PyTorch's best configuration in
// the same precision it is held to (0: none); its sync scaling's batch, steps (TRAIN_STEPS
// times train_scale) and targets.
struct BenchModel {
  std::string name, text;
  Shape input;
  std::vector<int> batches;
  int step_scale;
  double step_target;
  int scaling_batch;
  double train_scale;
  ScalingTargets scaling;
};

// A precision the step is measured in: its name, what the workers' products take, the peak
// its ratio is taken against (the float FMA peak, or vdpbf16ps's for bf16), and the rate of
// the best-suited product its kernels run (a square GEMM of 1024: the ceiling a whole step,
// which adds batch norm, activations and small products, can come near but not pass).
struct Precision {
  const char* name;
  ComputeType type;
  Peak peak;
  Peak product;
};

// One run of bench/cnn_torch.py: `model` at `batch`, layout nchw or channels_last, precision
// float or bf16 (autocast).
TorchRun TorchRate(const BenchModel& model, int batch, const char* layout, int steps,
                   const char* precision);

// " (target >= t: met)" or " (target >= t: MISSED)"; "" without a target (t <= 0).
std::string Verdict(double value, double target);

// Sync P2/P1 of `model` at its scaling batch in each precision, against the two-core limit
// and, with PyTorch, against DDP at P = 2 (half the batch a rank) in the same precision.
void Scaling(const BenchModel& model, int runs, int steps, const std::vector<Precision>& precisions,
             bool torch);

}  // namespace shmtrain::bench
