// Sync across hosts: each host's ranks sum their gradients as on one host, and the combiner
// (master/hosts/combiner.h) adds every host's sums in host order each step, so H hosts of P workers
// train as one process at the full batch. Only host 0 pauses for checkpoints and writes them:
// every host holds the same parameters at every step.
#include "master/hosts/combiner.h"
#include "master/hosts/hosts.h"
#include "master/kinds/sync.h"
#include "nn/layer.h"

namespace shmtrain::master {
namespace {

class SyncAcrossHosts final : public SyncKind {
 public:
  const char* name() const override { return "sync across hosts"; }

  // Batch norm's statistics cross the workers of one host (worker/stats_crossing.h); the
  // combiner does not carry them between hosts yet.
  Status CheckHosts(const TrainOptions& o) const override {
    if (nn::StatsCount(o.model) == 0) return Status::Ok();
    return Status::Usage("the model's batch norm layers need --mode sync on one host (this run "
                         "has " + std::to_string(o.host_count) + " hosts): their statistics "
                         "do not cross hosts yet");
  }

  CrossHostUnit StartCrossHost(const TrainOptions& o, SegmentWrites& seg,
                               const std::shared_ptr<Hosts>& hosts,
                               const std::shared_ptr<monitoring::RunStats>& stats) const override {
    CrossHostUnit cross;
    cross.unit = std::make_unique<Combiner>(
        seg.ForExchange(), hosts, std::shared_ptr<monitoring::DurationHistogram>(stats, &stats->combine()),
        o.host_timeout_s);
    return cross;
  }

  // Each step is the whole global batch, split over every host's workers.
  void AddTotals(RunSummary* s, int64_t batch) const override {
    s->samples = static_cast<uint64_t>((s->end_step - s->first_step) * batch);
  }

  void AddJson(const RunSummary& s, JsonLine* j) const override {
    SyncKind::AddJson(s, j);
    j->Num("step_combine_us", s.combine_us);
  }
};

}  // namespace

const RunKind& SyncAcrossHostsKind() {
  static const SyncAcrossHosts kind;
  return kind;
}

}  // namespace shmtrain::master
