#include "master/run/checkpoint_policy.h"

#include <algorithm>
#include <ctime>
#include <utility>
#include <vector>

#include "master/files/model_file.h"
#include "shm/barrier.h"
#include "shm/futex.h"

namespace shmtrain::master {

CheckpointConfig CheckpointConfig::For(const TrainOptions& o, const plan::Resolved& run,
                                       const RunKind& kind, int64_t first_step, CheckpointCut* cut,
                                       OutputReservation* reservation) {
  return {.path = o.checkpoint_path,
          .every = run.host.checkpoint_every,
          .kind = &kind,
          .first_step = first_step,
          .total_steps = run.host.steps,
          .fingerprint = run.fingerprint,
          .optimizer = run.optimizer,
          .cut = cut,
          .hosts = o.host_count,
          .stop_state_path = o.stop_state_path,
          .reservation = reservation};
}
namespace {

// ---- The optimizer state: the parameters and the optimizer's K state vectors
// (nn/optimizer.h), whatever the optimizer; master/files/checkpoint.cc stores them in the file. ---

// Every float of the checkpoint, parameters and optimizer state, is finite.
bool StateFinite(const Checkpoint& c) {
  return AllFinite(c.params) &&
         std::all_of(c.states.begin(), c.states.end(), [](const auto& v) { return AllFinite(v); });
}

// The checkpoint's state has the sizes the segment laid out in `layout` holds.
bool StateFitsLayout(const Checkpoint& c, const shm::Header& layout) {
  if (c.params.size() != layout.config.param_count) return false;
  if (c.states.size() != layout.config.optim.num_states) return false;
  return std::all_of(c.states.begin(), c.states.end(),
                     [&](const auto& v) { return v.size() == c.params.size(); });
}

}  // namespace

// ---- End of the optimizer state. -----------------------------------------------------------

CheckpointSchedule::CheckpointSchedule(int64_t every, const SegmentProtocol& kind,
                                       int64_t first_step,
                                       int64_t total_steps)
    : every_(every),
      kind_(kind),
      total_steps_(total_steps),
      next_(every > 0 ? (first_step / every + 1) * every : INT64_MAX) {}

bool CheckpointSchedule::Due(int64_t progress) const {
  if (next_ >= total_steps_) return false;
  return kind_.CheckpointDue(progress, next_);
}

void CheckpointSchedule::Advance(int64_t step) {
  if (every_ > 0) next_ = (step / every_ + 1) * every_;
}

CheckpointPolicy::CheckpointPolicy(const CheckpointConfig& config, const shm::Segment& seg,
                                   SegmentWrites& writes, Logger& log,
                                   monitoring::CheckpointStats& stats)
    : config_(config),
      seg_(seg),
      writes_(writes),
      schedule_(config.every, *config.kind, config.first_step, config.total_steps),
      log_(log),
      stats_(stats),
      last_written_(config.first_step) {}

Verdict CheckpointPolicy::Tick(const RunView& view) {
  if (!schedule_.Due(view.progress)) return Verdict::GoOn();
  const int64_t step = schedule_.next();
  const RunKind& kind = *config_.kind;
  if (!kind.AllPausedBefore(seg_, step)) return Verdict::GoOn();
  if (config_.cut != nullptr && !config_.cut->Cut(step)) return Verdict::GoOn();
  Checkpoint c = kind.CopyState(seg_, step);
  c.step = kind.RunStep(c.step, config_.hosts);  // every host's steps, as the file counts
  writes_.ReleaseCheckpoint(step);  // the copy is taken: train on
  schedule_.Advance(step);
  // A failure is logged and counted (Write); the next checkpoint is tried as planned.
  if (!config_.path.empty()) (void)Write(std::move(c));
  return Verdict::GoOn();
}

void CheckpointPolicy::Save(RunEnd& end) {
  // A stop signal, or another host lost (silent past --host-timeout): this host's state is
  // whole, and the steps since the last periodic checkpoint are kept.
  const Status::Code code = end.status.code();
  if (code == Status::Code::kInterrupted || code == Status::Code::kHostLost) {
    (void)WriteOnStop();  // a failure is logged and counted
  }
}

Status CheckpointPolicy::WriteOnStop() {
  if (!config_.kind->CheckpointsOnStop()) (void)WriteStopState();  // logged and counted
  if (config_.path.empty()) return Status::Ok();
  if (!config_.kind->CheckpointsOnStop()) {
    // Said by the host that holds it, with its path once this run has written it (a launcher
    // resumes it: master/launch/launch.h).
    const bool written = last_written_ > config_.first_step;
    const std::string stands =
        "the last periodic one, at step " + std::to_string(last_written_) + ", stands";
    log_.Notice("no checkpoint on a stop in " + std::string(config_.kind->name()) + ": " +
                    (config_.stop_state_path.empty()
                         ? stands
                         : "the launcher merges the hosts' states into one (else " + stands + ")"),
                JsonLine("checkpoint_on_stop_skipped")
                    .Str("path", written ? config_.path : "")
                    .Int("step", last_written_));
    return Status::Ok();
  }
  Status s = Write(config_.kind->CopyState(seg_, config_.kind->Progress(seg_)));
  if (s.ok()) {
    // Every host that writes one says so: only it knows where its machine holds the file.
    log_.Notice(
        "checkpoint written to " + config_.path + " at step " + std::to_string(last_written_),
        JsonLine("checkpoint_on_stop").Str("path", config_.path).Int("step", last_written_));
  }
  return s;
}

// Async across hosts under `shmtrain launch`: this host's state, for the launcher to merge with
// the other survivors' (master/hosts/async_state.h). A stopped run's W holds every update of its
// workers; the state says which of them the owners of the parts have.
Status CheckpointPolicy::WriteStopState() {
  if (config_.stop_state_path.empty() || config_.cut == nullptr) return Status::Ok();
  Checkpoint run;  // the cut adds the parameters and the step
  Stamp(&run);
  std::string bytes;
  const int64_t step = config_.kind->Progress(seg_);
  if (!config_.cut->StopState(run, &bytes)) return Status::Ok();
  const Status s = WriteFileDurably(config_.stop_state_path, bytes, {});
  if (!s.ok()) {
    stats_.AddFailure();
    log_.Info("warning: the async state of this host could not be kept: " + s.message(),
              JsonLine("async_state_failed").Str("path", config_.stop_state_path));
    return s;
  }
  log_.Notice(
      "async state kept in " + config_.stop_state_path + " at this host's update " +
          std::to_string(step),
      JsonLine("async_state_on_stop").Str("path", config_.stop_state_path).Int("step", step));
  return Status::Ok();
}

void CheckpointPolicy::Stamp(Checkpoint* c) const {
  c->mode = config_.kind->mode();
  c->fingerprint = config_.fingerprint;
  c->optimizer = config_.optimizer;
}

Status CheckpointPolicy::Write(Checkpoint c) {
  const int64_t t0 = shm::MonotonicNs();
  Stamp(&c);
  const Status s = StateFinite(c)
                       ? WriteFileDurably(config_.path, EncodeCheckpoint(c),
                                          {.reservation = config_.reservation})
                       : Status::Diverged("the parameters at step " + std::to_string(c.step) +
                                          " are not finite; the checkpoint was not written");
  if (!s.ok()) {
    stats_.AddFailure();
    log_.Info("warning: checkpoint at step " + std::to_string(c.step) + " failed: " + s.message() +
                  "; training goes on and the next checkpoint is tried as planned",
              JsonLine("checkpoint_failed")
                  .Str("path", config_.path)
                  .Int("step", c.step)
                  .Str("error", s.message()));
    return s;
  }
  const double took = (shm::MonotonicNs() - t0) * 1e-9;
  stats_.ObserveWrite(took, static_cast<double>(std::time(nullptr)));
  last_written_ = c.step;
  log_.JsonOnly(
      JsonLine("checkpoint").Str("path", config_.path).Int("step", c.step).Num("seconds", took));
  return Status::Ok();
}

Status LoadResume(const std::string& path, Mode mode, uint64_t fingerprint,
                  const std::string& optimizer, const shm::Header& layout, int64_t total_steps,
                  const std::function<std::string(uint64_t)>& other_run, Checkpoint* out) {
  std::string bytes;
  if (Status s = ReadFileBytes(path, "checkpoint", &bytes); !s.ok()) return s;
  return DecodeResume(bytes, path, mode, fingerprint, optimizer, layout, total_steps, other_run,
                      out);
}

Status DecodeResume(const std::string& bytes, const std::string& path, Mode mode,
                    uint64_t fingerprint, const std::string& optimizer, const shm::Header& layout,
                    int64_t total_steps, const std::function<std::string(uint64_t)>& other_run,
                    Checkpoint* out) {
  Checkpoint c;
  if (Status s = DecodeCheckpoint(bytes, path, &c); !s.ok()) return s;
  // The optimizer's settings first: the likeliest slip, and the one a message can name.
  if (c.optimizer != optimizer) {
    return Status::Usage(path + ": the checkpoint was written with " + c.optimizer +
                         "; this run uses " + optimizer +
                         ". Resume with the optimizer settings it was written with");
  }
  if (const std::string why =
          c.fingerprint != fingerprint && other_run ? other_run(c.fingerprint) : "";
      !why.empty()) {
    return Status::Usage(path + ": the checkpoint belongs to another run: " + why +
                         "; resume with the options it was written with");
  }
  if (c.fingerprint != fingerprint || c.mode != mode || !StateFitsLayout(c, layout)) {
    return Status::Usage(path +
                         ": the checkpoint belongs to another run (model, batch, seed, workers, "
                         "mode, async rule or data differ); resume with the options it was "
                         "written with");
  }
  if (c.step > total_steps) {
    return Status::Usage(path + ": the checkpoint is at step " + std::to_string(c.step) +
                         ", the run has only " + std::to_string(total_steps));
  }
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace shmtrain::master
