// What the metrics endpoint and the live page read of a run beyond the segment's plain words:
// what its kind of run decides. The master implements it for the run's kind
// (master/run/kind_view.h), so that monitoring/ asks the kind and needs nothing of master/.
//
// Read on the HTTP server's threads while the run is attached (monitoring/exporter.h): every
// method is a load of published words or a constant, never a wait for a worker.
#pragma once

#include <cstdint>

#include "shm/segment.h"

namespace shmtrain::monitoring {

class RunKindView {
 public:
  virtual ~RunKindView() = default;
  // Updates applied so far: sync steps every rank completed, or the async version counter.
  virtual int64_t Progress(const shm::Segment& seg) const = 0;
  // The run's mode ("sync", "async"): the build_info metric's and the page's label.
  virtual const char* ModeName() const = 0;
  // The run's async rule ("dc-asgd-a", ...); "" when its kind has none.
  virtual const char* Rule() const = 0;
  // Whether its workers record the staleness of their updates (the page's histogram).
  virtual bool ReportsStaleness() const = 0;
};

}  // namespace shmtrain::monitoring
