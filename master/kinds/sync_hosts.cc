// Sync across hosts: each host's ranks sum their gradients as on one host, and the combiner
// (master/hosts/combiner.h) adds every host's sums in host order each step, and every batch
// norm crossing's statistics likewise, so H hosts of P workers train as one process at the full
// batch. Only host 0 pauses for checkpoints and writes them: every host holds the same
// parameters at every step.
#include <cmath>

#include "master/hosts/combiner.h"
#include "master/hosts/hosts.h"
#include "master/kinds/sync.h"
#include "nn/batch_norm.h"

namespace shmtrain::master {
namespace {

class SyncAcrossHosts final : public SyncKind {
 public:
  const char* name() const override { return "sync across hosts"; }

  CrossHostUnit StartCrossHost(const TrainOptions& o, SegmentWrites& seg,
                               const std::shared_ptr<Hosts>& hosts,
                               const std::shared_ptr<monitoring::RunStats>& stats) const override {
    CrossHostUnit cross;
    cross.unit = std::make_unique<Combiner>(
        seg.ForExchange(), hosts, stats, o.host_timeout_s, nn::PassCrossings(o.model));
    return cross;
  }

  // Each step is the whole global batch, split over every host's workers.
  void AddTotals(RunSummary* s, int64_t batch) const override {
    s->samples = static_cast<uint64_t>((s->end_step - s->first_step) * batch);
  }

  void AddJson(const RunSummary& s, JsonLine* j) const override {
    SyncKind::AddJson(s, j);
    j->Num("step_combine_us", s.combine_us);
    if (!std::isnan(s.crossing_us)) j->Num("crossing_combine_us", s.crossing_us);
  }
};

}  // namespace

const RunKind& SyncAcrossHostsKind() {
  static const SyncAcrossHosts kind;
  return kind;
}

}  // namespace shmtrain::master
