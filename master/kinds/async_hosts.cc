// Async across hosts: each host runs async on its share of the updates, and the parameter
// server (master/hosts/param_server.h) pushes every --push-every of its updates to the owners of
// the parameters' parts and brings their parts back. Every host pauses at every checkpoint's
// sync point (counted in its own updates); host 0 alone writes, and the file counts every
// host's updates. Each host validates its own parameters.
#include <algorithm>
#include <climits>

#include "core/decimal.h"
#include "master/hosts/hosts.h"
#include "master/hosts/param_server.h"
#include "master/kinds/async.h"
#include "nn/layer.h"
#include "shm/layout.h"

namespace shmtrain::master {
namespace {

// A host pushes a part once --push-every of its updates are in, so with fewer updates than
// that in a host's share its parts reach their owners only at the sync points (the end,
// checkpoints). Allowed (a run may want exactly that), but said.
void WarnIfPushesWait(const TrainOptions& o, int64_t total_steps, Logger& log) {
  int64_t least = INT64_MAX;
  int host = 0;
  for (int h = 0; h < o.host_count; ++h) {
    const int64_t share = shm::AsyncHostUpdates(total_steps, o.host_count, h);
    if (share < least) {
      least = share;
      host = h;
    }
  }
  if (o.push_every <= least) return;
  log.Info("warning: --push-every " + std::to_string(o.push_every) + " is more than the " +
               std::to_string(least) + " updates of host " + std::to_string(host) +
               ": its parts reach their owners only at the end of the run (and at checkpoints); "
               "give a smaller --push-every for an exchange during the run",
           JsonLine("push_every_exceeds_share")
               .Int("push_every", o.push_every)
               .Int("host", host)
               .Int("updates", least));
}

double CrossStalenessMean(const CrossHostTotals& c) {
  return c.applied == 0 ? NAN : static_cast<double>(c.tau_sum) / static_cast<double>(c.applied);
}

class AsyncAcrossHosts final : public AsyncKind {
 public:
  const char* name() const override { return "async across hosts"; }
  Status CheckHosts(const TrainOptions& o) const override;
  Status Plan(const TrainOptions& o, int64_t total, int64_t eval_every, Logger& log,
              HostPlan* plan) const override;
  bool EveryHostPausesForCheckpoints() const override { return true; }
  // A checkpoint at the run's update t (a multiple of the hosts, as --checkpoint-every is) is
  // every host at its update t / H.
  int64_t HostStep(int64_t run_step, int hosts) const override { return run_step / hosts; }
  int64_t RunStep(int64_t host_step, int hosts) const override { return host_step * hosts; }
  CrossHostUnit StartCrossHost(const TrainOptions& o, SegmentWrites& seg,
                               const std::shared_ptr<Hosts>& hosts,
                               const std::shared_ptr<monitoring::RunStats>& stats) const override;
  // The state is whole only at a sync point, which a stop does not wait for.
  bool CheckpointsOnStop() const override { return false; }
  void AddTotals(RunSummary* s, int64_t batch) const override;
  void AddText(const RunSummary& s, std::string* text) const override;
  void AddJson(const RunSummary& s, JsonLine* j) const override;
};

// Each host validates its own parameters, so the hosts could not agree on the model an early
// stop keeps; checkpoints are sync points at a run's update t that every host reaches at its
// own update t / H.
Status AsyncAcrossHosts::CheckHosts(const TrainOptions& o) const {
  const std::string hosts = std::to_string(o.host_count);
  if (nn::StatsCount(o.model) > 0) {
    return Status::Usage("the model's batch norm layers need one host with --mode async (this "
                         "run has " + hosts + " hosts): the parameter server does not move "
                         "their running statistics");
  }
  if (o.early_stop > 0) {
    return Status::Usage("--early-stop is not available with --mode async across " + hosts +
                         " hosts (mpirun): each host validates its "
                         "own parameters; use --mode sync, or one host");
  }
  if (o.checkpoint_every % o.host_count != 0) {
    return Status::Usage("--checkpoint-every " + std::to_string(o.checkpoint_every) +
                         " with --mode async across " + hosts + " hosts must be a multiple of " +
                         hosts + ": each host pauses at its own update N / " + hosts +
                         " (docs/hosts.md, \"Async across hosts\")");
  }
  return Status::Ok();
}

// This host's share of the updates (shm::AsyncHostUpdates), the evaluations spaced by as many
// of them, and --checkpoint-every in them.
Status AsyncAcrossHosts::Plan(const TrainOptions& o, int64_t total, int64_t eval_every,
                              Logger& log, HostPlan* plan) const {
  const std::string hosts = std::to_string(o.host_count);
  plan->steps = shm::AsyncHostUpdates(total, o.host_count, o.host_index);
  plan->checkpoint_every = o.checkpoint_every / o.host_count;
  if (o.checkpoint_every > 0 && total % o.host_count != 0) {
    // Every host must reach every checkpoint's sync point: the hosts' shares must be equal.
    return Status::Usage("--checkpoint-every with --mode async across " + hosts +
                         " hosts needs a run of a multiple of " + hosts +
                         " updates; this one has " + std::to_string(total) + " (give --steps)");
  }
  if (plan->steps == 0) {
    return Status::Usage("--steps " + std::to_string(total) + " leaves host " +
                         std::to_string(o.host_index) + " no update: async across " + hosts +
                         " hosts needs at least one update a host");
  }
  plan->eval_every =
      eval_every > 0
          ? std::max<int64_t>(shm::AsyncHostUpdates(eval_every, o.host_count, o.host_index), 1)
          : 0;
  WarnIfPushesWait(o, total, log);
  return Status::Ok();
}

CrossHostUnit AsyncAcrossHosts::StartCrossHost(
    const TrainOptions& o, SegmentWrites& seg, const std::shared_ptr<Hosts>& hosts,
    const std::shared_ptr<monitoring::RunStats>& stats) const {
  auto server = std::make_unique<ParamServer>(
      seg.ForExchange(), hosts, stats,
      ParamServer::Options{.push_every = o.push_every,
                           .host_timeout_s = o.host_timeout_s,
                           .max_staleness = o.max_staleness});
  CrossHostUnit cross;
  cross.cut = server.get();
  cross.unit = std::move(server);
  return cross;
}

// Every host's updates, samples and staleness (host 0 has them; master/hosts/param_server.h).
void AsyncAcrossHosts::AddTotals(RunSummary* s, int64_t /*batch*/) const {
  const CrossHostTotals& c = s->cross;
  if (c.host_updates.empty()) return;
  int64_t updates = 0;
  for (uint64_t u : c.host_updates) updates += static_cast<int64_t>(u);
  s->end_step = s->param_version = updates;
  s->first_step *= static_cast<int64_t>(c.host_updates.size());  // a resumed run's, every host's
  s->samples = c.samples;
  s->staleness_sum = c.staleness_sum;
  s->dropped = c.dropped_local;
}

void AsyncAcrossHosts::AddText(const RunSummary& s, std::string* text) const {
  AsyncKind::AddText(s, text);
  const CrossHostTotals& c = s.cross;
  if (c.host_updates.empty()) return;
  *text += ", pushes " + std::to_string(c.sent) + " sent, " + std::to_string(c.applied) +
           " applied, " + std::to_string(c.dropped) + " dropped (cross-host staleness mean " +
           Fmt("%.2f", CrossStalenessMean(c)) + ", max " + std::to_string(c.tau_max) + ")";
}

void AsyncAcrossHosts::AddJson(const RunSummary& s, JsonLine* j) const {
  AsyncKind::AddJson(s, j);
  const CrossHostTotals& c = s.cross;
  if (c.host_updates.empty()) return;
  j->Ints("host_updates", c.host_updates)
      .Int("pushes_sent", static_cast<int64_t>(c.sent))
      .Int("pushes_applied", static_cast<int64_t>(c.applied))
      .Int("pushes_dropped", static_cast<int64_t>(c.dropped))
      .Int("push_bytes", static_cast<int64_t>(c.bytes))
      .Num("cross_staleness_mean", CrossStalenessMean(c))
      .Int("cross_staleness_p50", static_cast<int64_t>(c.TauQuantile(0.5)))
      .Int("cross_staleness_p90", static_cast<int64_t>(c.TauQuantile(0.9)))
      .Int("cross_staleness_max", static_cast<int64_t>(c.tau_max));
}

}  // namespace

const RunKind& AsyncAcrossHostsKind() {
  static const AsyncAcrossHosts kind;
  return kind;
}

}  // namespace shmtrain::master
