// How parameters are updated, resolved to plain numbers: the optimizer and its
// hyper-parameters, weight decay, gradient clipping and the learning-rate schedule.
//
// One POD struct, because it travels unchanged from the command line (ResolveOptim in
// nn/optimizer.h) into the segment header (shm/layout.h, RunConfig.optim), where every worker
// reads it, and into the run fingerprint of checkpoints (master/files/checkpoint.h), which hashes
// its bytes: whatever decides the update is in here, so a resumed run can never differ in it.
// Unused hyper-parameter entries and padding are zero, so equal settings give equal bytes.
#pragma once

#include <cstdint>
#include <type_traits>

namespace shmtrain {

inline constexpr int kMaxHyper = 8;   // hyper-parameters one optimizer may declare
inline constexpr int kMaxStates = 4;  // state vectors one optimizer may keep
// Milestones one schedule may take (multistep, --lr-milestones). Four hold every MultiStepLR
// recipe in common use (two for ResNet on CIFAR, three for wide ResNets) in 32 bytes, which
// the segment's RunConfig absorbs without moving the Header's control words.
inline constexpr int kMaxMilestones = 4;

struct OptimConfig {
  uint32_t optimizer;   // OptimizerDef::id (nn/optimizer.h)
  uint32_t num_states;  // K: state vectors the optimizer keeps, double-buffered in the segment
  double hyper[kMaxHyper];  // in the order of OptimizerDef::params; a switch is 0 or 1
  double lr;                // the base learning rate (--lr)
  double weight_decay;      // --weight-decay (the optimizer decides coupled or decoupled)
  double clip_norm;         // --clip-norm: the global gradient norm's bound; 0 = off
  // The schedule (nn/schedule.h): lr_t for the update of index t (0-based).
  uint32_t schedule;        // ScheduleDef::id (stored: append only)
  uint32_t reserved;        // zero
  int64_t warmup_steps;     // linear warmup over the first W updates; 0 = none
  int64_t step_every;       // step: decay every N updates
  double gamma;             // step and exponential: the decay factor
  double lr_min;            // cosine: the floor reached at the last update
  int64_t total_steps;      // the run's updates (cosine's horizon)
  // multistep: the updates after the warmup at which the rate is multiplied by gamma, strictly
  // increasing, each >= 1; 0 after the last (all 0 for every other schedule). Last, so that the
  // bytes before it are those of the releases before it, which fingerprints of runs without
  // milestones keep hashing alone (master/files/checkpoint.cc).
  int64_t milestones[kMaxMilestones];
};

static_assert(std::is_trivially_copyable_v<OptimConfig> && std::is_standard_layout_v<OptimConfig>,
              "copied byte for byte into the segment and hashed into fingerprints");
static_assert(sizeof(OptimConfig) % 8 == 0, "no tail padding whose bytes would be hashed");

}  // namespace shmtrain
