#include "master/run_summary.h"

#include <algorithm>
#include <cmath>

#include "master/segment_reads.h"

namespace shmtrain::master {
namespace {

double MeanStaleness(const RunSummary& s) {
  return static_cast<double>(s.staleness_sum) / std::max<int64_t>(s.end_step, 1);
}

double SamplesPerSecond(const RunSummary& s) {
  return s.samples / s.wall_s;
}

std::string WorkerUpdatesJson(const std::vector<uint64_t>& updates) {
  std::string json = "[";
  for (size_t r = 0; r < updates.size(); ++r) {
    json += (r ? "," : "") + std::to_string(updates[r]);
  }
  return json + "]";
}

}  // namespace

void ReadWorkerCounters(const shm::Segment& seg, RunSummary* s) {
  const shm::Header* h = seg.header();
  s->samples = TotalSamples(seg);
  s->dropped = s->staleness_sum = 0;
  s->worker_updates.clear();
  for (uint32_t r = 0; r < h->config.workers; ++r) {
    s->dropped += shm::LoadRelaxed(seg.block(r)->dropped_total);
    s->staleness_sum += shm::LoadRelaxed(seg.block(r)->staleness_sum);
    s->worker_updates.push_back(shm::LoadRelaxed(seg.block(r)->commit) / 2);
  }
  s->param_version = static_cast<int64_t>(shm::LoadAcquire(h->param_version));
  s->step1_end_ns = shm::LoadRelaxed(h->step1_end_ns);
  s->last_end_ns = shm::LoadRelaxed(h->last_end_ns);
}

double UsPerStep(const RunSummary& s) {
  const int64_t steps_run = std::max<int64_t>(s.end_step - s.first_step, 1);
  if (s.mode != Mode::kSync) return s.wall_s * 1e6 / steps_run;
  const int64_t s1 = s.step1_end_ns, sl = s.last_end_ns;
  return steps_run > 1 && s1 > 0 && sl >= s1 ? (sl - s1) / 1e3 / (steps_run - 1) : NAN;
}

std::string SummaryText(const RunSummary& s) {
  const bool sync = s.mode == Mode::kSync;
  std::string text = "done: " + std::to_string(s.end_step) + (sync ? " steps" : " updates") +
                     ", final loss " + Fmt("%.9g", s.final_loss);
  if (s.early_stop) {
    text += s.stopped_early ? " (stopped early; model of step " + std::to_string(s.best_step) + ")"
                            : " (model of step " + std::to_string(s.best_step) + ")";
  }
  if (!sync) {
    text += " (" + std::string(ToString(s.rule)) + ", mean staleness " +
            Fmt("%.2f", MeanStaleness(s)) + ", " + std::to_string(s.dropped) + " dropped)";
  }
  if (s.val_rows > 0) {
    text += ", val loss " + Fmt("%.6g", s.val.loss);
    text += s.classification ? ", val accuracy " + Fmt("%.4f", s.val.accuracy)
                             : ", val rmse " + Fmt("%.6g", s.val.rmse);
  }
  return text + ", " + Fmt("%.3f", s.wall_s) + " s, " + Fmt("%.0f", SamplesPerSecond(s)) +
         " samples/s, " + std::to_string(s.workers) + " worker" + (s.workers == 1 ? "" : "s") +
         ", " + Fmt("%.2f", UsPerStep(s)) + " us/step";
}

JsonLine SummaryJson(const RunSummary& s) {
  std::vector<double> rec = s.recoveries;
  std::sort(rec.begin(), rec.end());
  JsonLine j("summary");
  j.Int("steps", s.end_step)
      .Num("final_loss", s.final_loss)
      .Num("wall_s", s.wall_s)
      .Num("samples_per_s", SamplesPerSecond(s))
      .Int("workers", s.workers)
      .Num("us_per_step", UsPerStep(s))
      .Str("mode", ToString(s.mode))
      .Int("first_step", s.first_step)
      .Int("restarts", s.restarts)
      .Int("torn_updates", s.torn_updates)
      .Int("recoveries", static_cast<int64_t>(rec.size()))
      .Num("recovery_median_s", rec.empty() ? NAN : rec[rec.size() / 2])
      .Num("recovery_max_s", rec.empty() ? NAN : rec.back());
  if (s.early_stop) {
    j.Raw("stopped_early", s.stopped_early ? "true" : "false").Int("best_step", s.best_step);
  }
  if (s.mode != Mode::kSync) {
    j.Str("rule", ToString(s.rule))
        .Int("updates", s.end_step)
        .Int("param_version", s.param_version)
        .Raw("worker_updates", WorkerUpdatesJson(s.worker_updates))
        .Int("dropped", static_cast<int64_t>(s.dropped))
        .Num("mean_staleness", MeanStaleness(s));
  }
  if (s.val_rows > 0) {
    j.Num("val_loss", s.val.loss);
    s.classification ? j.Num("val_accuracy", s.val.accuracy) : j.Num("val_rmse", s.val.rmse);
  }
  return j;
}

void LogSummary(const RunSummary& s, Logger& log) {
  log.Line(SummaryText(s), SummaryJson(s));
}

}  // namespace shmtrain::master
