#include "master/run/run_watch.h"

#include <string>

#include "master/run/segment_reads.h"
#include "nn/schedule.h"
#include "shm/futex.h"
#include "shm/layout.h"

namespace shmtrain::master {
namespace {

using monitoring::CurveId;

constexpr int64_t kRateNs = 1'000'000'000;   // a samples/s point a second
constexpr int64_t kFlushNs = 2'000'000'000;  // the event file's flushes

}  // namespace

RunWatch::RunWatch(const RunKind& kind, monitoring::RunStats& stats,
                   std::unique_ptr<monitoring::EventFile> file, int64_t t_start_ns, bool xent,
                   Logger& log)
    : kind_(kind),
      stats_(stats),
      file_(std::move(file)),
      next_rate_ns_(t_start_ns + kRateNs),
      next_flush_ns_(t_start_ns + kFlushNs),
      rate_ns_(t_start_ns),
      xent_(xent),
      log_(log) {}

Verdict RunWatch::Tick(const RunView& view) {
  if (view.now_ns >= next_rate_ns_) {
    next_rate_ns_ = view.now_ns + kRateNs;
    AddRate(view.seg, view.progress, view.now_ns);
  }
  if (file_ && view.now_ns >= next_flush_ns_) {
    next_flush_ns_ = view.now_ns + kFlushNs;
    Write(view.seg, view.progress);
    Flush();
  }
  return Verdict::GoOn();
}

void RunWatch::Report(RunEnd& end) {
  const int64_t progress = kind_.Progress(end.seg);
  AddRate(end.seg, progress, end.status.ok() ? end.end_ns : shm::MonotonicNs());
  if (!file_) return;
  Write(end.seg, progress);
  Flush();
  if (!end.status.ok() && scalars_ == 0) file_->Remove();
}

// Samples/s since the last point (the first: since the start), at `progress`; none while the
// run has not moved, so the curve's steps only go up.
void RunWatch::AddRate(const shm::Segment& seg, int64_t progress, int64_t now_ns) {
  const uint64_t samples = TotalSamples(seg);
  if (progress <= rate_step_ || now_ns <= rate_ns_ || samples <= rate_samples_) return;
  stats_.history().AddRate(
      progress, static_cast<double>(samples - rate_samples_) / ((now_ns - rate_ns_) / 1e9));
  rate_step_ = progress;
  rate_ns_ = now_ns;
  rate_samples_ = samples;
}

// The curves' new points, then the run's state at `progress`.
void RunWatch::Write(const shm::Segment& seg, int64_t progress) {
  if (failed_) return;
  const shm::RunConfig& c = seg.header()->config;
  monitoring::EventFile& f = *file_;
  const monitoring::RunHistory& h = stats_.history();
  const auto next = [&](CurveId id) {
    monitoring::Curve curve = h.Since(id, sent_[static_cast<int>(id)]);
    sent_[static_cast<int>(id)] += curve.size();
    scalars_ += static_cast<int64_t>(curve.size() * (curve.b.empty() ? 1 : 2));
    return curve;
  };
  const monitoring::Curve train = next(CurveId::kTrain);
  for (size_t i = 0; i < train.size(); ++i) {
    f.Scalar("train/loss", train.step[i], train.a[i]);
    f.Scalar("train/learning_rate", train.step[i], nn::LearningRate(c.optim, train.step[i]));
    ++scalars_;
  }
  const monitoring::Curve rate = next(CurveId::kRate);
  for (size_t i = 0; i < rate.size(); ++i) f.Scalar("train/samples_per_s", rate.step[i], rate.a[i]);
  const monitoring::Curve val = next(CurveId::kVal);
  for (size_t i = 0; i < val.size(); ++i) {
    f.Scalar("val/loss", val.step[i], val.a[i]);
    f.Scalar(xent_ ? "val/accuracy" : "val/rmse", val.step[i], val.b[i]);
  }
  if (kind_.ReportsStaleness()) {
    uint64_t updates = 0, tau = 0, dropped = 0;
    for (uint32_t r = 0; r < c.workers; ++r) {
      const shm::WorkerBlock* b = seg.block(static_cast<int>(r));
      for (const uint64_t& n : b->staleness_hist) updates += shm::LoadRelaxed(n);
      tau += shm::LoadRelaxed(b->staleness_sum);
      dropped += shm::LoadRelaxed(b->dropped_total);
    }
    if (updates > 0) f.Scalar("async/staleness_mean", progress, double(tau) / double(updates));
    f.Scalar("async/dropped_updates", progress, static_cast<double>(dropped));
    scalars_ += updates > 0 ? 2 : 1;
  }
  uint64_t restarts = 0;
  for (uint32_t r = 0; r < c.workers; ++r) {
    for (int why = 0; why < monitoring::kRestartReasons; ++why) {
      restarts += stats_.workers().restarts(static_cast<int>(r),
                                            static_cast<monitoring::RestartReason>(why));
    }
  }
  f.Scalar("workers/restarts", progress, static_cast<double>(restarts));
  ++scalars_;
}

void RunWatch::Flush() {
  if (failed_) return;
  if (Status s = file_->Flush(); !s.ok()) {
    failed_ = true;
    log_.Info("warning: --tensorboard: " + s.message() + "; the run goes on without it",
              JsonLine("tensorboard_failed").Str("path", file_->path()).Str("error", s.message()));
  }
}

}  // namespace shmtrain::master
