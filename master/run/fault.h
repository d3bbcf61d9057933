// The master's own fault, for tests: a unit that throws at a step (--fault-master-throw).
#pragma once

#include <cstdint>
#include <new>

#include "master/unit/run_unit.h"

namespace shmtrain::master {

// Test hook (--fault-master-throw N): throws once the run reaches step N, so that a test can
// see any exception of the master end in the normal cleanup.
class MasterFault final : public RunUnit {
 public:
  explicit MasterFault(int64_t at_step) : at_(at_step) {}
  Verdict Tick(const RunView& view) override {
    if (at_ >= 0 && view.progress >= at_) throw std::bad_alloc();
    return Verdict::GoOn();
  }

 private:
  int64_t at_;
};

}  // namespace shmtrain::master
