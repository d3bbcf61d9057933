// What a divergence of a training run is blamed on, for the message that ends it (docs/failures.md,
// "Divergence").
//
// A run's options are blamed by default: the flag that most likely made the loss or gradient
// non-finite (TrainOptions::DivergenceHint: the learning rate, or the weight decay or lambda
// that outgrows it). A resumed run shares those options with the run that wrote its checkpoint,
// so the checkpoint's state is blamed instead when the divergence comes from it:
//  - at the first step after the resume: the state cannot make one finite step, whatever the
//    options (a damaged or crafted file, or a run that was about to diverge);
//  - at any step, when the state holds a value above 2^64 (about 1.8e19): the product of two
//    such values (a square in Adam's second moment, the gradient's norm or DC-ASGD's g*g; a
//    weight times a weight through two layers) overflows float, so such a state was never one
//    that float arithmetic survives.
// The checkpoint's values are finite (LoadCheckpoint refuses others).
#pragma once

#include <cstdint>
#include <string>

#include "master/files/checkpoint.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

class DivergenceCause {
 public:
  // Blames "the learning rate" without naming a value: for units tested without options.
  DivergenceCause() = default;
  // A run of these options, resumed from `resumed` (read from o.resume_path) when that is set.
  DivergenceCause(const TrainOptions& o, const Checkpoint& resumed);

  // The cause of a divergence at step `step` (0-based: the step whose loss or gradient, or
  // whose update, was not finite), as a clause that follows "... is not finite (NaN or
  // infinite); ".
  std::string At(int64_t step) const;

 private:
  std::string options_hint_ = "the learning rate is probably too large";
  std::string resume_path_;  // empty: not resumed
  int64_t first_step_ = 0;   // the first step after the resume
  double largest_ = 0;       // the resumed state's largest magnitude, and where it is
  std::string largest_at_;
};

}  // namespace shmtrain::master
