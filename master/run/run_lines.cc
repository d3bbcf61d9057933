#include "master/run/run_lines.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "master/run/segment_reads.h"
#include "nn/schedule.h"
#include "shm/layout.h"

namespace shmtrain::master {
namespace {

constexpr int64_t kProgressNs = 200'000'000;    // the live line's refresh
constexpr int64_t kEpochLineNs = 1'000'000'000;  // an epoch's line at most once a second

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

ProgressLine::ProgressLine(Logger& log, int64_t first_step, int64_t total_steps,
                           int64_t steps_per_epoch, int64_t t_start_ns,
                           const monitoring::RunHistory& history, bool xent)
    : log_(log),
      first_(first_step),
      total_(total_steps),
      per_epoch_(std::max<int64_t>(steps_per_epoch, 1)),
      t_start_(t_start_ns),
      history_(history),
      xent_(xent),
      next_ns_(t_start_ns),
      epoch_(first_step / per_epoch_),
      crossed_(epoch_),
      epoch_ns_(t_start_ns) {}

Verdict ProgressLine::Tick(const RunView& view) {
  // An epoch ended: its line stays, unless the last line stayed less than a second ago: then
  // it waits for the next epoch's end, whose line covers both ("epochs 3-4/N"), so that a
  // full-batch run does not print a line a step. The run's last epoch always stays.
  const bool end = view.progress >= total_;
  const int64_t done = end ? (total_ + per_epoch_ - 1) / per_epoch_ : view.progress / per_epoch_;
  if (done > crossed_) {
    crossed_ = done;
    if (end || view.now_ns - epoch_ns_ >= kEpochLineNs) {
      log_.ProgressDone(Text(view, done, false));
      epoch_ = done;
      epoch_ns_ = view.now_ns;
      epoch_samples_ = TotalSamples(view.seg);
    }
  }
  if (view.now_ns < next_ns_ || end) return Verdict::GoOn();
  next_ns_ = view.now_ns + kProgressNs;
  log_.Progress(Text(view, epoch_, true));
  return Verdict::GoOn();
}

std::string ProgressLine::Text(const RunView& view, int64_t epoch, bool live) const {
  const int64_t progress = view.progress;
  const int64_t epochs = (total_ + per_epoch_ - 1) / per_epoch_;
  // The loss of the latest step (sync) or update (async), as the metrics endpoint shows it,
  // whatever --log-every is; "?" until the first one.
  const double loss = shm::LoadRelaxed(view.seg.header()->last_loss);
  // The live line: the epoch under way; a line that stays: the epochs it covers.
  const int64_t from = live ? std::min(epoch + 1, epochs) : epoch_ + 1;
  const int64_t to = live ? from : epoch;
  std::string t = (to > from ? "epochs " + std::to_string(from) + "-" : std::string("epoch ")) +
                  std::to_string(to) + "/" + std::to_string(epochs) + "  step " +
                  std::to_string(progress) + "/" + std::to_string(total_) + "  loss " +
                  (progress > first_ ? Fmt("%.6g", loss) : std::string("?"));
  if (live) {
    const double el = (view.now_ns - t_start_) / 1e9;
    const double rate = el > 0 ? TotalSamples(view.seg) / el : 0;
    const double eta =
        progress > first_ ? el * (total_ - progress) / (progress - first_) : NAN;
    const double lr = nn::LearningRateAfter(view.seg.header()->config.optim, progress);
    t += "  lr " + Fmt("%.4g", lr) + "  " + Fmt("%.0f", rate) + " samples/s  ETA " +
         (std::isfinite(eta) ? Fmt("%.1f", eta) + "s" : "?");
  } else {
    const double el = (view.now_ns - epoch_ns_) / 1e9;
    const double samples = static_cast<double>(TotalSamples(view.seg) - epoch_samples_);
    t += "  " + Fmt("%.0f", el > 0 ? samples / el : 0) + " samples/s  " + Fmt("%.1f", el) + "s";
  }
  return t + LastValidation();
}

// "  val acc 0.7111 (step 1955)", or "" before the first validation.
std::string ProgressLine::LastValidation() const {
  const size_t n = history_.size(monitoring::CurveId::kVal);
  if (n == 0) return "";
  const monitoring::Curve v = history_.Since(monitoring::CurveId::kVal, n - 1);
  return "  val loss " + Fmt("%.4g", v.a[0]) +
         (xent_ ? " acc " + Fmt("%.4f", v.b[0]) : " rmse " + Fmt("%.4g", v.b[0])) + " (step " +
         std::to_string(v.step[0]) + ")";
}

void ProgressLine::Stop(RunEnd& /*end*/) {
  log_.ClearProgress();
}

}  // namespace shmtrain::master
