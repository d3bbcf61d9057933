#include "master/run/run_lines.h"

#include <cmath>
#include <string>

#include "master/run/segment_reads.h"
#include "nn/schedule.h"
#include "shm/layout.h"

namespace shmtrain::master {
namespace {

constexpr int64_t kProgressNs = 200'000'000;  // the live line's refresh

}  // namespace

LossLog::LossLog(Logger& log, int64_t log_every, int64_t first_step,
                 monitoring::RunHistory* history)
    : log_(log), history_(history) {
  if (log_every > 0) next_ = (first_step + log_every - 1) / log_every;
}

Verdict LossLog::Tick(const RunView& view) {
  Drain(view.seg);
  return Verdict::GoOn();
}

void LossLog::Report(RunEnd& end) {
  if (!end.status.ok()) return;
  Drain(end.seg);
  ReportLost();
}

void LossLog::Drain(const shm::Segment& seg) {
  const auto& c = seg.header()->config;
  if (c.log_every <= 0) return;
  for (;;) {
    if (next_ * c.log_every >= c.total_steps) return;
    const shm::LossRecord& rec = seg.header()->loss_ring[next_ % shm::kLossRing];
    double loss = 0;
    const uint64_t tag = shm::ReadLoss(rec, static_cast<uint64_t>(next_), &loss);
    if (tag < static_cast<uint64_t>(next_ + 1)) return;  // not written yet
    if (tag == static_cast<uint64_t>(next_ + 1)) {
      const int64_t step = next_ * c.log_every;
      // The rate of the step: in JSON always; in text when the schedule changes it, so a
      // constant-rate run's lines stay "step S loss L".
      const double lr = nn::LearningRate(c.optim, step);
      const bool varies = nn::RateVaries(c.optim);
      if (history_ != nullptr) history_->AddLoss(step, loss);
      log_.Line("step " + std::to_string(step) + " loss " + Fmt("%.9g", loss) +
                    (varies ? " lr " + Fmt("%.6g", lr) : std::string()),
                JsonLine("step").Int("step", step).Num("loss", loss).Num("lr", lr));
    }
    if (tag > static_cast<uint64_t>(next_ + 1)) ++lost_;  // overwritten before we read it
    ++next_;
  }
}

void LossLog::ReportLost() const {
  if (lost_ == 0) return;
  log_.Info("warning: the losses of " + std::to_string(lost_) +
                " logged steps were overwritten before they were printed (the workers "
                "logged faster than the master ran; the ring holds the last " +
                std::to_string(shm::kLossRing) + "): a larger --log-every keeps every line",
            JsonLine("log_lines_lost").Int("count", lost_));
}

ProgressLine::ProgressLine(Logger& log, int64_t first_step, int64_t total_steps, int64_t t_start_ns)
    : log_(log),
      first_(first_step),
      total_(total_steps),
      t_start_(t_start_ns),
      next_ns_(t_start_ns) {}

Verdict ProgressLine::Tick(const RunView& view) {
  const int64_t now = view.now_ns, progress = view.progress;
  if (now < next_ns_) return Verdict::GoOn();
  next_ns_ = now + kProgressNs;
  const double el = (now - t_start_) / 1e9;
  const double rate = el > 0 ? TotalSamples(view.seg) / el : 0;
  const double eta = progress > first_ ? el * (total_ - progress) / (progress - first_) : NAN;
  // The loss of the latest step (sync) or update (async), as the metrics endpoint shows it,
  // whatever --log-every is; "?" until the first one.
  const double loss = shm::LoadRelaxed(view.seg.header()->last_loss);
  const double lr = nn::LearningRateAfter(view.seg.header()->config.optim, progress);
  log_.Progress("step " + std::to_string(progress) + "/" + std::to_string(total_) + "  loss " +
                (progress > first_ ? Fmt("%.6g", loss) : std::string("?")) + "  lr " +
                Fmt("%.4g", lr) + "  " + Fmt("%.0f", rate) + " samples/s  ETA " +
                (std::isfinite(eta) ? Fmt("%.1f", eta) + "s" : "?"));
  return Verdict::GoOn();
}

void ProgressLine::Stop(RunEnd& /*end*/) {
  log_.ClearProgress();
}

}  // namespace shmtrain::master
