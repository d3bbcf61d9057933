#include "monitoring/run_page.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "nn/schedule.h"
#include "shm/futex.h"
#include "shm/layout.h"

namespace shmtrain::monitoring {
namespace {

using nlohmann::json;

// A finite number, or null.
json Number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json Numbers(const std::vector<double>& v) {
  json out = json::array();
  for (double x : v) out.push_back(Number(x));
  return out;
}

json CurveJson(const Curve& c, const char* a, const char* b) {
  json out = {{"step", c.step}, {a, Numbers(c.a)}};
  if (b != nullptr) out[b] = Numbers(c.b);
  return out;
}

// This host's workers, then (on host 0 under mpirun) the other hosts' as last reported.
json Workers(const shm::Segment& seg, const RunStats& stats, int host) {
  std::vector<WorkerState> all = LocalWorkerStates(
      seg.block(0), static_cast<int>(seg.header()->config.workers), stats, host);
  const std::vector<WorkerState> remote = stats.remote_workers().All();
  all.insert(all.end(), remote.begin(), remote.end());
  std::stable_sort(all.begin(), all.end(),
                   [](const WorkerState& a, const WorkerState& b) { return a.host < b.host; });
  json out = json::array();
  for (const WorkerState& w : all) {
    out.push_back({{"host", w.host},
                   {"worker", w.worker},
                   {"up", w.up},
                   {"restarts", w.restarts},
                   {"pid", w.pid},
                   {"heartbeat_age_s", w.heartbeat_age_s},
                   {"samples", w.samples}});
  }
  return out;
}

json Staleness(const shm::Segment& seg) {
  json le = json::array(), counts = json::array();
  for (int k = 0; k < shm::kStalenessBuckets; ++k) {
    le.push_back(k + 1 < shm::kStalenessBuckets ? json(shm::kStalenessBounds[k]) : json(nullptr));
    uint64_t n = 0;
    for (uint32_t r = 0; r < seg.header()->config.workers; ++r) {
      n += shm::LoadRelaxed(seg.block(static_cast<int>(r))->staleness_hist[k]);
    }
    counts.push_back(n);
  }
  return {{"le", le}, {"counts", counts}};
}

json Progress(const shm::Segment& seg, const RunKindView& kind, const RunHistory& history,
              const RunFacts& f) {
  const shm::RunConfig& c = seg.header()->config;
  const int64_t step = kind.Progress(seg), total = c.total_steps;
  const int64_t per_epoch = std::max<int64_t>(f.steps_per_epoch, 1);
  const double el = (shm::MonotonicNs() - f.t_start_ns) / 1e9;
  const Curve rate =
      history.Since(CurveId::kRate, std::max<size_t>(history.size(CurveId::kRate), 1) - 1);
  const double eta = step > f.first_step ? el * (total - step) / (step - f.first_step) : NAN;
  return {{"step", step},
          {"epoch", static_cast<double>(step) / per_epoch},
          {"epochs", (total + per_epoch - 1) / per_epoch},
          {"loss", step > f.first_step ? Number(shm::LoadRelaxed(seg.header()->last_loss))
                                       : json(nullptr)},
          {"lr", Number(nn::LearningRateAfter(c.optim, step))},
          {"samples_per_s", rate.size() > 0 ? Number(rate.a.back()) : json(nullptr)},
          {"eta_s", Number(eta)}};
}

// A relaunched job's relaunch (shmtrain/relaunch.h), or null.
json RelaunchPage(const Relaunch& r) {
  if (!r.active()) return nullptr;
  json reasons = json::object();
  for (int k = 0; k < kRelaunchReasons; ++k) {
    reasons[ToString(static_cast<RelaunchReason>(k))] = r.reasons[k];
  }
  return {{"relaunches", r.relaunches},
          {"reason", ToString(r.reason)},
          {"reasons", reasons},
          {"lost", r.lost},
          {"step", r.step},
          {"label", r.Label()},
          {"line", r.Line()}};
}

}  // namespace

std::vector<WorkerState> LocalWorkerStates(const shm::WorkerBlock* blocks, int P,
                                           const RunStats& stats, int host) {
  std::vector<WorkerState> out;
  const int64_t now = shm::MonotonicNs();
  for (int rank = 0; rank < P; ++rank) {
    const shm::WorkerBlock* b = blocks + rank;
    WorkerState w;
    w.host = host;
    w.worker = rank;
    w.up = stats.workers().up(rank) && shm::LoadAcquire(b->attached) != 0;
    for (int why = 0; why < kRestartReasons; ++why) {
      w.restarts += stats.workers().restarts(rank, static_cast<RestartReason>(why));
    }
    w.pid = shm::LoadRelaxed(b->pid);
    const int64_t hb = shm::LoadRelaxed(b->heartbeat_ns);
    w.heartbeat_age_s = hb > 0 ? std::max<int64_t>(0, now - hb) * 1e-9 : 0.0;
    w.samples = shm::LoadRelaxed(b->samples_total);
    out.push_back(w);
  }
  return out;
}

std::string RunPageJson(const shm::Segment& seg, const RunKindView& kind, const RunStats& stats,
                        const TrainOptions& o, const RunFacts& facts, bool ended) {
  const shm::RunConfig& c = seg.header()->config;
  const bool xent = static_cast<Loss>(c.loss) == Loss::kXent;
  const RunHistory& h = stats.history();
  json j = {{"version", SHMTRAIN_VERSION},
            {"mode", kind.ModeName()},
            {"rule", kind.Rule()},
            {"hosts", o.host_count},
            {"loss", xent ? "xent" : "mse"},
            {"metric", xent ? "accuracy" : "rmse"},
            {"total_steps", c.total_steps},
            {"steps_per_epoch", facts.steps_per_epoch},
            {"state", ended ? "ended" : "running"},
            {"progress", Progress(seg, kind, h, facts)},
            {"train", CurveJson(h.Thinned(CurveId::kTrain, kPagePoints), "loss", nullptr)},
            {"val", CurveJson(h.Thinned(CurveId::kVal, kPagePoints), "loss", "metric")},
            {"rate", CurveJson(h.Thinned(CurveId::kRate, kPagePoints), "samples_per_s", nullptr)},
            {"workers", Workers(seg, stats, o.host_index)},
            {"staleness", kind.ReportsStaleness() ? Staleness(seg) : json(nullptr)},
            {"relaunch", RelaunchPage(o.relaunch)}};
  return j.dump();
}

}  // namespace shmtrain::monitoring
