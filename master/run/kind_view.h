// The run's kind as the metrics endpoint and the live page see it (monitoring/run_view.h).
#pragma once

#include <cstdint>

#include "master/kinds/kind.h"
#include "monitoring/run_view.h"
#include "shmtrain/options.h"

namespace shmtrain::master {

class KindView final : public monitoring::RunKindView {
 public:
  // kind and o must outlive the view.
  KindView(const RunKind& kind, const TrainOptions& o) : kind_(kind), o_(o) {}
  int64_t Progress(const shm::Segment& seg) const override { return kind_.Progress(seg); }
  const char* ModeName() const override { return ToString(kind_.mode()); }
  const char* Rule() const override { return kind_.RuleLabel(o_); }
  bool ReportsStaleness() const override { return kind_.ReportsStaleness(); }

 private:
  const RunKind& kind_;
  const TrainOptions& o_;
};

}  // namespace shmtrain::master
