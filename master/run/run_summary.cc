#include "master/run/run_summary.h"

#include <algorithm>
#include <cmath>

#include "master/run/segment_reads.h"
#include "nn/cpu.h"

namespace shmtrain::master {
namespace {

double SamplesPerSecond(const RunSummary& s) {
  return s.samples / s.wall_s;
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
    s->worker_updates.push_back(shm::LoadCommit(*seg.block(r)) / 2);
  }
  s->compute_ns = s->reduce_ns = s->barrier_ns = s->crossing_ns = 0;
  for (uint32_t r = 0; r < h->config.workers; ++r) {
    s->compute_ns += shm::LoadRelaxed(seg.block(r)->compute_ns_total);
    s->reduce_ns += shm::LoadRelaxed(seg.block(r)->reduce_ns_total);
    s->barrier_ns += shm::LoadRelaxed(seg.block(r)->barrier_wait_ns_total);
    s->crossing_ns += shm::LoadRelaxed(seg.block(r)->crossing_wait_ns_total);
  }
  s->param_version = static_cast<int64_t>(shm::LoadAcquire(h->param_version));
  s->step1_end_ns = shm::LoadRelaxed(h->step1_end_ns);
  s->last_end_ns = shm::LoadRelaxed(h->last_end_ns);
}

double UsPerStep(const KindReport& kind, const RunSummary& s) { return kind.UsPerStep(s); }

std::string UsPerStepText(const KindReport& kind, const RunSummary& s) {
  const double us = UsPerStep(kind, s);
  if (std::isfinite(us)) return Fmt("%.2f", us) + " us/step";
  return "no time per step (sync steps are timed from the end of the first to the end of the "
         "last: it takes 2 steps or more)";
}

StepSplit SplitPerStep(const KindReport& kind, const RunSummary& s) {
  return kind.SplitPerStep(s);
}

std::string SplitText(const KindReport& kind, const RunSummary& s) {
  const StepSplit p = SplitPerStep(kind, s);
  if (std::isnan(p.compute_us)) return "";
  const double all = p.compute_us + p.reduce_us + p.barrier_us;
  auto part = [&](const char* name, double us) {
    return std::string(name) + " " + Fmt("%.0f", us) + " us (" +
           Fmt("%.0f", all > 0 ? 100 * us / all : 0.0) + "%)";
  };
  std::string text = "time per step and worker: " + part("compute", p.compute_us) + ", " +
                     part("reduce+update", p.reduce_us) + ", " + part("barrier wait", p.barrier_us);
  if (p.crossing_us > 0) text += " (batch norm's crossings " + Fmt("%.0f", p.crossing_us) + " us)";
  return text;
}

std::string SummaryText(const RunKind& kind, const RunSummary& s) {
  std::string text = "done: " + std::to_string(s.end_step) + " " + kind.StepsWord() +
                     ", final loss " + Fmt("%.9g", s.final_loss);
  if (s.early_stop) {
    text += s.stopped_early ? " (stopped early; model of step " + std::to_string(s.best_step) + ")"
                            : " (model of step " + std::to_string(s.best_step) + ")";
  }
  kind.AddText(s, &text);
  if (s.val_rows > 0) {
    text += ", val loss " + Fmt("%.6g", s.val.loss);
    text += s.classification ? ", val accuracy " + Fmt("%.4f", s.val.accuracy)
                             : ", val rmse " + Fmt("%.6g", s.val.rmse);
  }
  return text + ", " + Fmt("%.3f", s.wall_s) + " s, " + Fmt("%.0f", SamplesPerSecond(s)) +
         " samples/s, " + std::to_string(s.workers) + " worker" + (s.workers == 1 ? "" : "s") +
         (s.hosts > 1 ? " on each of " + std::to_string(s.hosts) + " hosts" : "") + ", " +
         UsPerStepText(kind, s);
}

JsonLine SummaryJson(const RunKind& kind, const RunSummary& s) {
  std::vector<double> rec = s.recoveries;
  std::sort(rec.begin(), rec.end());
  JsonLine j("summary");
  j.Int("steps", s.end_step)
      .Num("final_loss", s.final_loss)
      .Num("wall_s", s.wall_s)
      .Num("samples_per_s", SamplesPerSecond(s))
      .Int("workers", s.workers)
      .Int("hosts", s.hosts)
      .Num("us_per_step", UsPerStep(kind, s))
      .Str("mode", ToString(kind.mode()))
      .Str("kernels", nn::PathName(nn::UsedPath()))
      .Int("first_step", s.first_step)
      .Int("restarts", s.restarts)
      .Int("torn_updates", s.torn_updates)
      .Int("recoveries", static_cast<int64_t>(rec.size()))
      .Num("recovery_median_s", rec.empty() ? NAN : rec[rec.size() / 2])
      .Num("recovery_max_s", rec.empty() ? NAN : rec.back());
  if (s.early_stop) {
    j.Bool("stopped_early", s.stopped_early).Int("best_step", s.best_step);
  }
  kind.AddJson(s, &j);
  if (s.val_rows > 0) {
    j.Num("val_loss", s.val.loss);
    s.classification ? j.Num("val_accuracy", s.val.accuracy) : j.Num("val_rmse", s.val.rmse);
  }
  return j;
}

void LogSummary(const RunKind& kind, const RunSummary& s, Logger& log) {
  // Text mode: on stderr with the other diagnostics, so stdout stays the loss log and `done:`.
  // JSON mode: the summary's step_*_us fields.
  const std::string split = SplitText(kind, s);
  if (!log.json() && !split.empty()) log.Info(split, JsonLine("step_time"));
  log.Line(SummaryText(kind, s), SummaryJson(kind, s));
}

}  // namespace shmtrain::master
