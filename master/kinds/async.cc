#include "master/kinds/async.h"

#include <algorithm>

#include "core/decimal.h"
#include "master/kinds/step_state.h"
#include "nn/optimizer.h"
#include "nn/update.h"

namespace shmtrain::master {
namespace {

Status Bad(const std::string& flag, const std::string& what) {
  return Status::Usage(flag + ": " + what);
}

// The updates applied so far: the global version counter.
int64_t Version(const shm::Segment& seg) {
  return static_cast<int64_t>(shm::LoadAcquire(seg.header()->param_version));
}

// A copy of W read while the workers update it (each element is some recent value, read with
// relaxed atomic loads as the workers and the parameter server's merges write it), and in
// *progress the version read just before it.
std::vector<float> CopyParamsAsync(const shm::Segment& seg, int64_t* progress) {
  std::vector<float> w(seg.header()->config.param_count);
  *progress = Version(seg);
  for (size_t i = 0; i < w.size(); ++i) w[i] = nn::SharedAccess::Load(seg.params(0) + i);
  return w;
}

constexpr const char* kAsyncFlags[] = {"--rule",    "--lambda",        "--ms-decay",
                                       "--epsilon", "--max-staleness", "--push-every"};

// An async rank's part is over once it exits cleanly: it stops when the update budget is
// claimed or a stop is asked for. A rank killed with an update under way (odd commit word)
// is settled here: applied, or torn.
class AsyncDeaths final : public DeathRules {
 public:
  AsyncDeaths(const shm::Segment& seg, SegmentWrites& writes, monitoring::WorkerStats& stats)
      : seg_(seg), writes_(writes), stats_(stats) {}
  bool FinishedItsPart(int /*r*/) const override { return true; }
  void Settle(int r) override;
  Status AllFinished(std::vector<int>* owed) override;
  int64_t torn() const override { return torn_; }

 private:
  void Reconcile();

  const shm::Segment& seg_;
  SegmentWrites& writes_;
  monitoring::WorkerStats& stats_;
  int64_t torn_ = 0;
  int64_t interrupted_ = 0;             // updates cut short by a death, not yet settled
  std::vector<int> interrupted_ranks_;  // their ranks
  int64_t extra_tickets_ = 0;           // tickets handed out past total_steps
};

// Killed with an update under way: torn, or applied and advanced but not counted; which one
// is settled by Reconcile(). The flag comes down before the replacement starts. The ticket,
// too, is settled by Reconcile (applied, or torn): it must not be redone.
void AsyncDeaths::Settle(int r) {
  if (const uint64_t commit = shm::LoadCommit(*seg_.block(r)); commit % 2 == 1) {
    writes_.SetCommit(r, commit - 1);
    writes_.SetTicket(r, -1);
    ++interrupted_;
    interrupted_ranks_.push_back(r);
  }
}

// Every update that advanced the version and was not counted died in the window after its
// advance; each was also one of the interrupted ones. The others are the torn updates.
void AsyncDeaths::Reconcile() {
  uint64_t counted = 0;
  const int workers = static_cast<int>(seg_.header()->config.workers);
  for (int r = 0; r < workers; ++r) counted += shm::LoadCommit(*seg_.block(r)) / 2;
  const uint64_t version = shm::LoadAcquire(seg_.header()->param_version);
  uint64_t landed = version > counted ? version - counted : 0;
  for (size_t i = 0; i < interrupted_ranks_.size() && landed > 0; ++i, --landed, --interrupted_) {
    const int r = interrupted_ranks_[i];
    writes_.SetCommit(r, shm::LoadCommit(*seg_.block(r)) + 2);
  }
  interrupted_ranks_.clear();
  for (; interrupted_ > 0; --interrupted_) {
    ++torn_;
    stats_.AddTornUpdate();
  }
}

// Done once every update is applied or an early stop was asked for. Else the updates whose
// tickets died with a worker are owed: every rank stopped because claimed >= total_steps, so
// no rank claims again; each owed update gets a ticket past the last one the stream used
// (total_steps, total_steps + 1, ...) written into a rank's block, which the rank takes up as
// a replacement takes over its predecessor's. Resetting claimed to the version instead would
// hand out tickets in [version, total_steps) again: minibatches already applied, trained on
// twice, while the minibatches of the torn updates stay lost either way. No worker runs, so
// the blocks are the master's to write.
Status AsyncDeaths::AllFinished(std::vector<int>* owed) {
  owed->clear();
  Reconcile();
  const int64_t applied = Version(seg_), total = seg_.header()->config.total_steps;
  const bool stopped = shm::LoadAcquire(seg_.header()->stop_eval) != shm::kNoStop;
  if (stopped || applied == total) return Status::Ok();
  if (applied > total) {
    return Status::Internal("async run ended with " + std::to_string(applied) +
                            " updates applied, expected " + std::to_string(total));
  }
  const int workers = static_cast<int>(seg_.header()->config.workers);
  for (int r = 0; r < workers && r < total - applied; ++r) {
    writes_.SetTicket(r, total + extra_tickets_++);
    owed->push_back(r);
  }
  return Status::Ok();
}

double MeanStaleness(const RunSummary& s) {
  return static_cast<double>(s.staleness_sum) / std::max<int64_t>(s.end_step, 1);
}

}  // namespace

std::span<const char* const> AsyncKind::OwnFlags() const { return kAsyncFlags; }

// The rules' own flags, and the optimizers a rule can stand for.
Status AsyncKind::CheckOptions(const TrainOptions& o) const {
  if (o.Given("--lambda") && o.rule == AsyncRule::kAsgd) {
    return Bad("--lambda", "does not apply to --rule asgd (plain ASGD has no delay compensation)");
  }
  for (const char* f : {"--ms-decay", "--epsilon"}) {
    if (o.Given(f) && o.rule != AsyncRule::kDcAsgdA) {
      return Bad(f, std::string("applies to --rule dc-asgd-a only, not ") + ToString(o.rule));
    }
  }
  if (const std::string flag = nn::StateSource(o); !flag.empty()) {
    return Bad(flag,
               std::string("not available in async mode: there each worker applies its own "
                           "gradient at once by a DC-ASGD rule (--rule), and ") +
                   nn::FindOptimizer(o.optimizer)->name +
                   "'s state vectors would be one shared state updated by every worker in no "
                   "defined order. Use --mode sync, or plain --optimizer sgd (which async mode "
                   "combines with --weight-decay, --clip-norm and --lr-schedule)");
  }
  return Status::Ok();
}

Status AsyncKind::CheckHosts(const TrainOptions& o) const {
  if (o.Given("--push-every")) {
    return Status::Usage(
        "--push-every: applies across hosts only (under mpirun with more than one rank, each "
        "host's updates are pushed to the parameters' owners); this run is on one host");
  }
  return Status::Ok();
}

Status AsyncKind::Plan(const TrainOptions& o, int64_t total, int64_t eval_every, Logger& /*log*/,
                       HostPlan* plan) const {
  *plan = {.steps = total, .eval_every = eval_every, .checkpoint_every = o.checkpoint_every};
  return Status::Ok();
}

// Each rank computes a whole minibatch per update.
int64_t AsyncKind::WorkerBatchRows(int64_t batch, int /*world*/) const { return batch; }

// The rules keep no optimizer state (CheckOptions): a checkpoint is the parameters.
int AsyncKind::CheckpointStates(const OptimConfig& /*optim*/) const { return 0; }

const char* AsyncKind::RuleLabel(const TrainOptions& o) const { return ToString(o.rule); }

int64_t AsyncKind::Progress(const shm::Segment& seg) const { return Version(seg); }

std::vector<float> AsyncKind::ParamsAfter(const shm::Segment& seg, int64_t /*step*/) const {
  int64_t progress = 0;
  return CopyParamsAsync(seg, &progress);
}

// The one parameter buffer, and the version and the tickets at the checkpoint's update.
void AsyncKind::ResumeInto(const Checkpoint& c, shm::Segment* seg) const {
  RestoreStepState(c, 0, seg);
  shm::Header* h = seg->mutable_header();
  h->param_version = static_cast<uint64_t>(c.step);
  h->claimed = static_cast<uint64_t>(c.step);
  h->released_step = c.step;
}

// Always due: the ranks pause before ticket `next`, and the version can lag the tickets
// after a death; the policy then waits for AllPausedBefore.
bool AsyncKind::CheckpointDue(int64_t /*progress*/, int64_t /*next*/) const { return true; }

// A rank's phase is even and at least 2 x step: it holds a ticket at or past `step` and waits
// before computing it, or it has no ticket left (phase 2 x total_steps). Every ticket below
// `step` is then applied (or lost with a dead rank), and nobody writes W.
bool AsyncKind::AllPausedBefore(const shm::Segment& seg, int64_t step) const {
  const uint64_t at = 2 * static_cast<uint64_t>(step);
  for (uint32_t r = 0; r < seg.header()->config.workers; ++r) {
    const uint64_t phase = shm::LoadPhase(*seg.block(static_cast<int>(r)));
    if (phase % 2 != 0 || phase < at) return false;
  }
  return true;
}

// W as it is now, at the version then: `step` unless a death tore or lost a ticket below it.
Checkpoint AsyncKind::CopyState(const shm::Segment& seg, int64_t /*step*/) const {
  Checkpoint c;
  c.params = CopyParamsAsync(seg, &c.step);
  return c;
}

// W as it is once the version has reached the evaluation's update: each element a recent
// value, the step the version read just before.
bool AsyncKind::TakeSnapshot(const shm::Segment& seg, int64_t index, int64_t every,
                             EvalSnapshot* out) const {
  if (Progress(seg) < index * every) return false;
  out->params = CopyParamsAsync(seg, &out->step);
  return true;
}

EarlyStopEnd AsyncKind::StopAfter(int64_t /*k*/, int64_t /*every*/, int64_t /*total*/) const {
  return {0, "at the workers' next update"};
}

std::unique_ptr<DeathRules> AsyncKind::MakeDeathRules(const shm::Segment& seg,
                                                      SegmentWrites& writes,
                                                      monitoring::WorkerStats& stats) const {
  return std::make_unique<AsyncDeaths>(seg, writes, stats);
}

// From the workers' start to their end, over the updates.
double AsyncKind::UsPerStep(const RunSummary& s) const {
  const int64_t steps_run = std::max<int64_t>(s.end_step - s.first_step, 1);
  return s.wall_s * 1e6 / steps_run;
}

void AsyncKind::AddText(const RunSummary& s, std::string* text) const {
  *text += " (" + std::string(ToString(s.rule)) + ", mean staleness " +
           Fmt("%.2f", MeanStaleness(s)) + ", " + std::to_string(s.dropped) + " dropped)";
}

void AsyncKind::AddJson(const RunSummary& s, JsonLine* j) const {
  j->Str("rule", ToString(s.rule))
      .Int("updates", s.end_step)
      .Int("param_version", s.param_version)
      .Ints("worker_updates", s.worker_updates)
      .Int("dropped", static_cast<int64_t>(s.dropped))
      .Num("mean_staleness", MeanStaleness(s));
}

}  // namespace shmtrain::master
