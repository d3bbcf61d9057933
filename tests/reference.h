// An independent reference for sync training, and runs of the real binary judged against it.
//
// The reference is full-batch training written from the published formulas (docs/models.md "Model";
// for the optimisers, schedules and clipping, the definitions of PyTorch's that the train flags
// follow: torch.optim.SGD/Adam/AdamW, clip_grad_norm_, LinearLR warmup, StepLR,
// CosineAnnealingLR, ExponentialLR) with plain loops in double precision. It shares no arithmetic
// with the product (nn/ is not used), so a wrong forward pass, loss, backward pass, update rule,
// schedule or clip in the product shows up as a difference, not as the same mistake twice.
//
// Parameter layout (include/shmtrain/model_spec.h): layer by layer, the weights W (out x in,
// column-major: W[i + j * out] carries input j to output i), then the biases b (out).
//
// Used by process_test.cc (sync data parallelism is exact) and optimizer_test.cc (optimisers,
// schedules, clipping). The executables that link reference.cc define SHMTRAIN_BIN.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "master/files/model_file.h"
#include "shmtrain/model_spec.h"
#include "tests/proc_util.h"

namespace shmtrain::test {

// ---------------------------------------------------------------------------------------------
// The reference: pure functions, no processes.

// The training set in double: x row-major (rows x features), y the target (mse) or the class
// index (xent).
struct RefData {
  int64_t rows = 0;
  int features = 0;
  std::vector<double> x;
  std::vector<double> y;
};

RefData ToRefData(const data::Dataset& d);

// The mean over the samples of the gradient of the per-sample loss (mse: the sum over the
// outputs of (yhat - y)^2; xent: -log softmax(yhat)[y]), by backpropagation, one sample at a
// time, into *grad. Returns the mean loss.
double RefGradient(const ModelSpec& spec, const std::vector<double>& w, const RefData& d,
                   std::vector<double>* grad);

enum class RefOptimizer { kSgd, kAdam, kAdamW };
enum class RefSchedule { kConstant, kStep, kCosine, kExponential, kMultiStep };

// One training configuration: the reference's settings and, through Flags(), the train flags
// that ask the product for the same. An unset optional (and a zero momentum, clip, lr_min,
// step_every or warmup) is a flag not given: the reference then uses the product's documented
// default, so the defaults are tested too.
struct RefOptions {
  double lr = 0.01;  // --lr, the base learning rate
  RefOptimizer optimizer = RefOptimizer::kSgd;
  double momentum = 0;                 // sgd: --momentum in [0, 1); 0 = none
  bool nesterov = false;               // sgd: --nesterov, needs momentum > 0
  std::optional<double> beta1;         // adam/adamw: default 0.9
  std::optional<double> beta2;         // adam/adamw: default 0.999
  std::optional<double> eps;           // adam/adamw: default 1e-8
  std::optional<double> weight_decay;  // default 0.01 for adamw, else 0
  double clip_norm = 0;                // --clip-norm C > 0; 0 = off
  RefSchedule schedule = RefSchedule::kConstant;
  int64_t step_every = 0;           // step: --lr-step-every N >= 1 (required by step)
  std::vector<int64_t> milestones;  // multistep: --lr-milestones, increasing (required by it)
  std::optional<double> gamma;      // step and multistep: default 0.1; exponential: required
  double lr_min = 0;                // cosine: --lr-min in [0, lr)
  int64_t warmup = 0;               // --warmup-steps W, < the run's steps

  double Beta1() const { return beta1.value_or(0.9); }
  double Beta2() const { return beta2.value_or(0.999); }
  double Eps() const { return eps.value_or(1e-8); }
  double WeightDecay() const {
    return weight_decay.value_or(optimizer == RefOptimizer::kAdamW ? 0.01 : 0.0);
  }
  double Gamma() const { return gamma.value_or(0.1); }

  // The train flags for these settings, "--lr" first; only the flags that are set.
  std::vector<std::string> Flags() const;
};

// lr_t, the learning rate of update t = 0, 1, ... of a run of `total` updates.
double RefLr(const RefOptions& opt, int64_t t, int64_t total);

// What a reference run saw, update by update.
struct RefTrace {
  std::vector<double> grad_norm;  // the global norm of g before clipping
  int64_t clipped = 0;            // updates whose gradient clipping scaled down
  // max_i |w_T - w_{T-1}| / max_i |w_T|: how far the last update moved the parameters.
  double last_move = 0;
};

// `steps` full-batch updates with `opt` from the initial parameters w0. Order inside one
// update: clip (global norm of g), weight decay, the optimiser (see RefOptions).
std::vector<double> RefTrain(const ModelSpec& spec, const std::vector<float>& w0, const RefData& d,
                             const RefOptions& opt, int64_t steps, RefTrace* trace = nullptr);

// RefTrain computed in float instead of double: the same formulas in the same order, every
// parameter, state and gradient value rounded to float as the product's are (the constant
// coefficients are worked out in double and rounded once). Not the product's arithmetic (its sums
// run in another order), but of the same size: how far float rounding alone moves a run, which a
// case must keep well below kRefTol.
std::vector<float> RefTrainInFloat(const ModelSpec& spec, const std::vector<float>& w0,
                                   const RefData& d, const RefOptions& opt, int64_t steps);

// How far parameters a are from the reference's b: max_i |a_i - b_i| over max_i |b_i|. Against
// the largest parameter, not each one's own size: rounding errors are of the order of 2^-24
// times the magnitudes in the computation, and a parameter that ends near 0 is computed from
// large ones. INFINITY for different sizes or a NaN.
double MaxScaledDiff(const std::vector<float>& got, const std::vector<double>& want);
double MaxScaledDiff(const std::vector<double>& got, const std::vector<double>& want);

// The product computes in float, the reference in double. Each step rounds every parameter to
// float (2^-24 ~ 6e-8 relative) and computes the gradient from rounded values; gradient descent
// damps most of what it perturbs, so the errors add up like a random walk, about
// sqrt(T) * 2^-24 ~ 3e-6 after the example's 2000 steps, not like the worst case T * 2^-24
// ~ 1e-4. Measured, every run of process_test.cc and optimizer_test.cc, every P, momentum 0.9
// and Adam included, stays near 1e-6 (at most 1.1e-6). 1e-5 is ten times that, and still ten times
// below what a real mistake costs: one step too few, or a learning rate 0.1% off, moves these runs
// by 1e-4 or more.
constexpr double kRefTol = 1e-5;

// ---------------------------------------------------------------------------------------------
// Runs of the real binary (SHMTRAIN_BIN), each with its own metrics port and no segment left.

// Generous bounds for whole runs: a healthy run takes well under a second here, but sanitizer
// builds under ctest -j2 are several times slower. A hang still fails, it only fails later.
constexpr std::chrono::milliseconds kRunTimeout{60'000};

// argv for the master binary; train and example parabola serve metrics on a port of their own
// (0: any free one), so tests running side by side never fight over the default 9464.
std::vector<std::string> Shmtrain(std::vector<std::string> args);

// Nothing of this master's may remain in /dev/shm.
void ExpectNoSegments(pid_t master_pid);
void ExpectExit(const ProcResult& r, int code);
Model LoadSaved(const std::string& path);

// "%.17g": a double on the command line without loss.
std::string Fmt17(double x);

// A sync full-batch training run through the real binary, and its reference.
struct SyncRun {
  std::string example;  // "parabola" or "blobs"
  int64_t rows = 50;
  int features = 1;  // blobs only
  ModelSpec spec;
  std::string init = "normal";
  uint64_t seed = 1;
  RefOptions opt;  // the learning rate, the optimiser, the schedule, clipping
  int64_t steps = 1;
  int workers = 1;

  // The train command for this run with `o` for `run_steps` steps, saving to `save`.
  std::vector<std::string> Argv(const RefOptions& o, int64_t run_steps,
                                const std::string& save) const;
  RefData Data() const;
};

// The initial parameters of a run, read from the product: the same model and seed trained by
// plain SGD for one step at a learning rate of 1e-30, whose update (below 1e-25 for gradients
// below 1e5) is less than half a float ulp of any initial value above 1e-18, so the saved model
// holds the initial values unchanged (a zero-initialised bias becomes ~1e-30, which no
// comparison here can see). Initialisation depends on the model, --init and --seed only.
std::vector<float> InitialParams(const SyncRun& run, const TempDir& dir);

// A run through the binary next to its reference from the same initial parameters.
struct RefComparison {
  double diff = INFINITY;    // MaxScaledDiff(got, want)
  std::vector<float> w0;     // the initial parameters
  std::vector<float> got;    // the product's saved parameters (dir.File("trained.model"))
  std::vector<double> want;  // the reference's
  RefTrace trace;            // the reference's run
};

RefComparison CompareWithReference(const SyncRun& run, const TempDir& dir);

// CompareWithReference(run, dir).diff.
double TrainAgainstReference(const SyncRun& run, const TempDir& dir);

}  // namespace shmtrain::test
