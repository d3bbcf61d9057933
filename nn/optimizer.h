// The optimizer seam: one unit per optimizer, a registry, and the resolution of the command
// line into an OptimConfig (include/shmtrain/optim_config.h).
//
// An optimizer is an OptimizerDef: its name, the hyper-parameter flags it declares (with
// defaults, limits and help, which the CLI, --help, validation and the fingerprint all take
// from here), the number K of state vectors it keeps, and a pure update over a slice:
//   (w, K states, g, lr_t, t) -> (w', K states')
// The segment double-buffers the K state vectors as it does the parameters (shm/layout.h), the
// sync loop calls Update on each rank's slice, and checkpoints store the K vectors, all without
// knowing which optimizer runs. Adding one: its file in nn/optimizers/, one line in the
// registry (nn/optimizer.cc), its test, its row in docs/guide.md's table.
//
// Shared by every optimizer and applied outside it: gradient clipping (the mean gradient is
// scaled before Update sees it) and the learning-rate schedule (nn/schedule.h; Update gets
// lr_t). Weight decay is a common flag with a per-optimizer default; each optimizer applies
// it its own way (added to the gradient, or decoupled as AdamW does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/optim_config.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {

// One hyper-parameter flag. Limits: lo <= x (lo < x if lo_open), x <= hi (x < hi if
// hi_open). A switch (value_name == nullptr) takes no value: 1 when given, else 0.
struct HyperParam {
  const char* flag;        // "--beta1"
  const char* value_name;  // "B1"; nullptr for a switch
  const char* help;
  double default_value;
  double lo, hi;
  bool lo_open, hi_open;
  bool switch_() const { return value_name == nullptr; }
};

// One update of a slice of n elements. The inputs are step t's buffers, the outputs step t+1's
// (never aliased: the segment double-buffers both), so Update may be redone and gives the same
// bits. s_in/s_out hold K = states(hyper) entries.
struct UpdateArgs {
  int64_t n = 0;
  const float* w_in = nullptr;
  float* w_out = nullptr;
  const float* s_in[kMaxStates] = {};
  float* s_out[kMaxStates] = {};
  const float* g = nullptr;  // the mean gradient of the minibatch, already clipped
  double lr = 0;             // lr_t, from the schedule
  double weight_decay = 0;
  int64_t t = 0;             // 0-based index of this update (Adam's bias correction uses t+1)
};

struct OptimizerDef {
  uint32_t id;          // stored in segments: append only, never reused
  const char* name;     // --optimizer NAME
  const char* summary;  // one line: the rule, as PyTorch defines it
  std::vector<HyperParam> params;  // hyper[i] is params[i]
  double default_weight_decay;
  // K: the state vectors the update keeps (0..kMaxStates), given the hyper-parameters.
  int (*states)(const double* hyper);
  // Checks between hyper-parameters beyond each one's limits: kUsage naming the flag
  // ("--nesterov: needs --momentum > 0") when they do not go together. May be null.
  Status (*check)(const double* hyper);
  void (*update)(const double* hyper, const UpdateArgs& a);
};

// Every optimizer, in --help order.
const std::vector<const OptimizerDef*>& Optimizers();
const OptimizerDef* FindOptimizer(std::string_view name);  // nullptr when unknown
const OptimizerDef* FindOptimizer(uint32_t id);
// "sgd, adam, adamw".
std::string OptimizerNames();
// Every hyper-parameter flag of every optimizer, once each (the first declaration's limits
// and value name; the CLI registers these).
std::vector<HyperParam> AllHyperParams();
// "adam, adamw": the optimizers that declare `flag`.
std::string OptimizersWith(std::string_view flag);

// The command-line checks of everything optimizer-related that needs no data: the optimizer
// name, each hyper-parameter against its optimizer and limits, weight decay, clipping, the
// schedule's flags, and what async mode allows. kUsage with "--flag: what is wrong".
Status CheckOptimizerOptions(const TrainOptions& o);
// What makes the optimizer of these options keep state vectors: "--optimizer NAME" when it
// does with its defaults, else the hyper-parameter given that makes it (sgd: --momentum); ""
// when it keeps none. Options that CheckOptimizerOptions accepted.
std::string StateSource(const TrainOptions& o);
// The resolved configuration for a run of total_steps updates. kUsage when the warmup is not
// shorter than the run (the one check that needs the data's size).
Status ResolveOptim(const TrainOptions& o, int64_t total_steps, OptimConfig* out);
// "adam (beta1 0.9, beta2 0.999, eps 1e-08, weight decay 0), lr 0.001 cosine to 0 over
// 1000 steps, warmup 100, clip-norm 1": for logs and for checkpoint mismatch messages.
std::string Describe(const OptimConfig& c);

// Scales g by `inv` (1 / the minibatch's rows) and returns the squared norm of the result,
// non-finite if any element is: the mean gradient and its share of |g|^2 for clipping, the
// divergence check and the metrics, in both loops.
double ScaleAndSquaredNorm(float* g, int64_t n, float inv);

// Applies c's optimizer to one slice (the sync update phase and the tests).
void Update(const OptimConfig& c, const UpdateArgs& a);

}  // namespace shmtrain::nn
