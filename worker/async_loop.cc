// The async loop of one worker: update tickets over one seeded stream of minibatches.
//
// Update ticket u (handed out by Header.claimed, fetch_add) trains on minibatch u of
// data::BatchPlan(rows, batch, seed), Share(u, 0, 1): the stream the sync loop uses. (Across
// hosts, host h's ticket u trains on minibatch u * H + h: shm::AsyncMinibatch.) Every row
// is then used once per epoch whoever runs, however the ranks are scheduled, and a rank never
// has "no rows"; at P = 1 with --rule asgd the run is the sync run's plain SGD (the learning
// rate schedule, weight decay and clipping included: ticket u is update u).
//
// The ticket a rank holds is in its block (WorkerBlock.ticket, -1 = none), so that a death
// costs no minibatch. The rank, in order:
//   1. claims u = claimed.fetch_add(1) (stops if u >= total_steps) and stores ticket = u;
//      with --checkpoint-every, waits there while a checkpoint at or below u is owed
//      (PauseForCheckpoint);
//   2. reads param_version, snapshots W, computes the gradient of minibatch u; a non-finite
//      loss or gradient records the ticket (RecordDivergence) and exits kWorkerDiverged
//      without applying; a gradient too stale (--max-staleness) is dropped, counted and
//      recomputed on the SAME ticket from freshly read parameters;
//   3. raises commit to odd, applies, advances param_version, stores ticket = -1, and only
//      then stores commit even (counted, flag down). With batch norm, the apply also moves
//      the shared running statistics by the minibatch's own statistics (nn/batch_norm.h):
//      an update normalises with its own rows, as no rank waits for another.
// What a death at each point leaves, and who repairs it:
//   before 1, or after 3                ticket -1: nothing is held, nothing is lost;
//   between the fetch_add and the store ticket -1 while u is out: the one window (two
//                                       instructions) where a minibatch is lost. The update
//                                       count stays exact: the owed update is made at the end
//                                       from a fresh ticket (below), as for a torn update;
//   in 2                                ticket u, commit even: the replacement (same rank, next
//                                       incarnation) takes u over and computes it afresh;
//   in 3 (commit odd)                   the master clears the ticket (Supervisor::OnExit, by
//                                       the async death rules' Settle, master/kinds/async.cc)
//                                       and their Reconcile settles the update as applied or
//                                       torn, so an applied ticket is never redone.
// Tickets at or past total_steps are never used by a claim; when updates are still owed once
// every rank has finished (torn ones, or the window above), the master hands the ranks
// tickets total_steps, total_steps + 1, ... directly in their blocks (the async death rules'
// AllFinished, master/kinds/async.cc): fresh minibatches, not a second pass over applied ones.
#include "worker/async_loop.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <vector>

#include "data/batch_plan.h"
#include "nn/batch_norm.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"
#include "nn/update.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shmtrain/status.h"
#include "worker/fault.h"
#include "worker/spec.h"

namespace shmtrain::worker {
namespace {

constexpr double kLossEmaWeight = 0.1;
// The gradient norm metric is published every few updates (the sum of squares is always
// taken, for the divergence check).
constexpr int64_t kGradNormEvery = 8;

// The gradient of the regularised loss, clipped, as the sync loop forms it (clip first, then
// weight decay): g <- coef * g + wd * w_bak, with coef = C / (|g| + 1e-6) when that is below 1
// (the norm of this worker's own minibatch gradient) and w_bak the parameters g was computed
// at. sq is |g|^2.
void ClipAndDecay(const OptimConfig& oc, double sq, const float* w_bak, float* g, int64_t n) {
  const double coef = oc.clip_norm > 0 ? oc.clip_norm / (std::sqrt(sq) + 1e-6) : 1.0;
  if (coef >= 1 && oc.weight_decay == 0) return;
  const float f = static_cast<float>(std::min(coef, 1.0));
  const float wd = static_cast<float>(oc.weight_decay);
  for (int64_t i = 0; i < n; ++i) g[i] = f * g[i] + wd * w_bak[i];
}

// Minibatch `ticket` of the stream into bx/by, augmented with --augment.
void LoadBatch(const shm::Segment& seg, data::BatchPlan& plan, const RowAugment& augment,
               int64_t ticket, std::vector<int64_t>* idx, nn::AlignedVector<float>* bx,
               nn::AlignedVector<float>* by) {
  const int64_t features = seg.header()->config.features;
  const int64_t minibatch = shm::AsyncMinibatch(seg.header()->config, ticket);
  plan.Share(minibatch, 0, 1, idx);
  if (augment.on()) {
    data::GatherRows(seg.x(), seg.y(), features, *idx, bx, by,
                     [&](int64_t row, const float* in, float* out) {
                       augment.Row(minibatch, row, in, out);
                     });
  } else {
    data::GatherRows(seg.x(), seg.y(), features, *idx, bx, by);
  }
}

// The metrics and the log record of an applied update: version v_apply, staleness tau, this
// rank's batch b with its loss and squared gradient norm, started at t0.
void RecordUpdate(shm::Header* h, shm::WorkerBlock* self, uint64_t v_apply, uint64_t tau,
                  int64_t b, double loss, double sq, int64_t t0) {
  const shm::RunConfig& c = h->config;
  // The update numbered v_apply records its minibatch loss when it is a logged step, as the
  // sync loop does, so the log shows the loss at exactly those updates.
  if (c.log_every > 0 && v_apply % static_cast<uint64_t>(c.log_every) == 0) {
    const uint64_t k = v_apply / static_cast<uint64_t>(c.log_every);
    shm::PublishLoss(h->loss_ring[k % shm::kLossRing], k, loss);
  }
  shm::AddRelaxed<uint64_t>(self->steps_total, 1);
  shm::AddRelaxed<uint64_t>(self->staleness_sum, tau);
  shm::AddRelaxed<uint64_t>(self->staleness_hist[shm::StalenessBucket(tau)], 1);
  const int64_t took = shm::MonotonicNs() - t0;
  shm::AddRelaxed<uint64_t>(self->step_duration_hist[shm::DurationBucket(took)], 1);
  shm::AddRelaxed<uint64_t>(self->step_duration_ns_total, static_cast<uint64_t>(took));
  shm::StoreRelaxed(h->last_loss, loss);
  if (b % kGradNormEvery == 0) shm::StoreRelaxed(h->last_grad_norm, std::sqrt(sq));
  const double ema = shm::LoadRelaxed(self->loss_ema);
  shm::StoreRelaxed(self->loss_ema,
                    b == 0 ? loss : (1 - kLossEmaWeight) * ema + kLossEmaWeight * loss);
  shm::AddRelaxed<uint64_t>(self->compute_ns_total, static_cast<uint64_t>(shm::MonotonicNs() - t0));
}

// Checkpoints (--checkpoint-every N): ticket u is not computed before the master has copied
// W at the multiple of N at or below u (the checkpoint "at update kN": every ticket below kN
// applied, none above). The rank announces the pause with phase 2kN (even: holds no update in
// flight) and waits for released_step >= kN, as a sync rank pauses before step kN. Tickets at
// or past total_steps (owed updates, handed out by the async death rules' AllFinished,
// master/kinds/async.cc) never pause.
int PauseForCheckpoint(shm::Header* h, shm::WorkerBlock* self, shm::PhaseBarrier& gate,
                       int64_t ticket) {
  const shm::RunConfig& c = h->config;
  if (c.checkpoint_every <= 0 || ticket >= c.total_steps) return kWorkerOk;
  const int64_t at = ticket / c.checkpoint_every * c.checkpoint_every;
  if (at <= c.first_step || shm::LoadSeqCst(h->released_step) >= at) {
    return kWorkerOk;
  }
  shm::StorePhase(*self, 2 * static_cast<uint64_t>(at));
  const auto r =
      gate.WaitReleased(at, shm::MonotonicNs() + static_cast<int64_t>(c.barrier_timeout_s * 1e9));
  return r == shm::PhaseBarrier::Result::kOk ? kWorkerOk : ExitFor(r);
}

// The next update ticket below total_steps, recorded in the rank's block; -1 when none is
// left to this rank: it writes W no more, so no checkpoint waits for it
// (AsyncKind::AllPausedBefore, master/kinds/async.cc).
int64_t ClaimTicket(shm::Header* h, shm::WorkerBlock* self, uint64_t total) {
  const uint64_t u =
      shm::LoadRelaxed(h->claimed) >= total ? total : shm::AddRelaxed<uint64_t>(h->claimed, 1);
  if (u >= total) {
    shm::StorePhase(*self, 2 * total);
    return -1;
  }
  const auto ticket = static_cast<int64_t>(u);
  shm::StoreRelaxed(self->ticket, ticket);
  return ticket;
}

// The mean gradient of the minibatch (bx, by: rows idx of the stream) at w into *grad, its
// squared norm into *sq; returns the mean loss. Dropout's mask follows the minibatch's number
// and each sample's row (nn/layer.h, PassInfo).
double MeanGradient(const ModelSpec& spec, uint64_t seed, int64_t minibatch,
                    const std::vector<int64_t>& idx, const nn::AlignedVector<float>& bx,
                    const nn::AlignedVector<float>& by, const nn::AlignedVector<float>& w,
                    nn::Workspace<float>& ws, nn::AlignedVector<float>* grad, double* sq,
                    nn::StatsCrossing* stats) {
  const int64_t rows = static_cast<int64_t>(by.size());
  nn::PassInfo pass;
  pass.train = true;
  pass.seed = seed;
  pass.step = minibatch;
  pass.rows = idx.data();
  pass.stats = stats;
  const double loss =
      nn::LossAndGrad<float>(spec, w.data(), bx.data(), by.data(), rows, grad->data(), ws, pass) /
      static_cast<double>(rows);
  *sq = nn::ScaleAndSquaredNorm(grad->data(), static_cast<int64_t>(grad->size()),
                                1.0f / static_cast<float>(rows));
  return loss;
}

// One rank of the async loop: the stream's plan, the rule, its buffers, and the parts of an
// update.
class AsyncRank {
 public:
  AsyncRank(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation);
  int Run();

 private:
  // An update in the making: this rank's batch count b, its start t0, the version its
  // parameters were read at, its minibatch, and the minibatch's loss and squared gradient norm.
  struct Update {
    int64_t b = 0, t0 = 0, minibatch = 0;
    uint64_t v_read = 0;
    double loss = 0, sq = 0;
  };
  // Start gate: wait until every rank has attached, so that no rank trains alone while the
  // others are still starting. Phase 1 here; later phases tell the master where this rank
  // stands for checkpoints: 2kN paused before the checkpoint at kN (PauseForCheckpoint), 2 *
  // total_steps with no ticket left (ClaimTicket).
  int WaitForEveryRank();
  // What comes after HoldTicket, as the sync loop's Pause says it: the update of the ticket
  // held in ticket_; the rank's end, nothing being left to do (no ticket, or an early stop:
  // the worker exits kWorkerOk); or the worker's exit with `code`, a WorkerExit (the master
  // aborted or died, or the checkpoint pause's wait failed).
  struct Hold {
    enum class Next { kUpdate, kFinished, kExit };
    Next next = Next::kUpdate;
    int code = kWorkerOk;  // for kExit
  };
  // Before an update: the heartbeat, the checks (abort, a dead master, an early stop), the
  // ticket (held, or claimed) and the checkpoint pause.
  Hold HoldTicket();
  // Snapshots W into w_bak_ (u->v_read: the version read just before), counts the ticket's
  // minibatch and forms its gradient to apply (clipped, decayed, at the stream's learning
  // rate); kWorkerDiverged when its loss or norm is not finite.
  int Compute(Update* u);
  // Applies the gradient to W and releases the ticket; false when it is dropped as too stale
  // (--max-staleness), the ticket still held.
  bool Apply(const Update& u, uint64_t* v_apply);
  // The rule over W[0, n) but batch norm's buffers: a zero gradient leaves their values, but
  // the rule's load and store would undo another worker's move made in between.
  void ApplyRuleBesideBuffers(int64_t n);
  // Batch norm: the shared running statistics moved by this update's minibatch, running_mean
  // and running_var read and written once (relaxed, as W: another update may move them in
  // between), num_batches_tracked counted up by an atomic add (exact: every applied update).
  void MoveRunningStats();

  shm::Segment& seg_;
  shm::Header* h_;
  const shm::RunConfig& c_;
  const ModelSpec& spec_;  // the segment's model, read once (worker/run_model.h)
  const int rank_;
  const uint32_t incarnation_;
  const int64_t n_;
  shm::WorkerBlock* self_;
  const uint32_t epoch_;
  const pid_t master_;
  // The sync loop's plan: minibatch u of the stream is the same rows in both modes.
  data::BatchPlan plan_;
  const RowAugment augment_;
  nn::RuleParams rp_;
  nn::Workspace<float> ws_;
  nn::AlignedVector<float> w_bak_, grad_, bx_, by_;
  std::vector<int64_t> idx_;
  float* w_;
  float* mean_square_;
  const uint64_t total_;
  shm::PhaseBarrier gate_;
  // The ticket a predecessor of this rank held and did not begin to apply (the master
  // cleared it otherwise), or one the master handed out for an owed update; -1 if none.
  int64_t ticket_ = -1;
  int64_t loaded_ = -1;  // the ticket whose rows are in bx_/by_
  // Batch norm: each update normalises with its own minibatch's statistics, recorded here,
  // and moves the shared running statistics by them after its gradient is applied.
  const std::vector<nn::NormSite> norms_;
  std::optional<nn::RecordedStats> recorded_;
};

AsyncRank::AsyncRank(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation)
    : seg_(seg),
      h_(seg.mutable_header()),
      c_(h_->config),
      spec_(model.spec),
      rank_(rank),
      incarnation_(incarnation),
      n_(static_cast<int64_t>(c_.param_count)),
      self_(seg.mutable_block(rank)),
      epoch_(shm::LoadAbortEpoch(*h_)),
      master_(static_cast<pid_t>(c_.master_pid)),
      plan_(c_.rows, c_.batch, c_.seed),
      augment_(c_, spec_.input, plan_.steps_per_epoch()),
      w_bak_(n_),
      grad_(n_),
      w_(seg.mutable_params(0)),
      mean_square_(seg.mutable_grad(rank)),
      total_(static_cast<uint64_t>(c_.total_steps)),
      gate_(h_, seg.block(0), static_cast<int>(c_.workers), self_, epoch_),
      norms_(nn::NormSites(spec_, model.shapes)) {
  ws_.NetFor(spec_, model.shapes);  // the net of the shapes read once, not resolved again
  if (!norms_.empty()) recorded_.emplace(c_.stats_count);
  rp_.rule = static_cast<AsyncRule>(c_.rule);
  rp_.lambda0 = c_.lambda;
  rp_.ms_decay = c_.ms_decay;
  rp_.epsilon = c_.epsilon;
}

int AsyncRank::WaitForEveryRank() {
  gate_.Arrive(1);
  const auto r =
      gate_.Wait(1, shm::MonotonicNs() + static_cast<int64_t>(c_.barrier_timeout_s * 1e9));
  return r == shm::PhaseBarrier::Result::kOk ? kWorkerOk : ExitFor(r);
}

AsyncRank::Hold AsyncRank::HoldTicket() {
  shm::StoreRelaxed(self_->heartbeat_ns, shm::MonotonicNs());
  if (shm::LoadAbortEpoch(*h_) != epoch_) return {Hold::Next::kExit, kWorkerAborted};
  if (getppid() != master_) return {Hold::Next::kExit, kWorkerOrphaned};
  if (shm::LoadAcquire(h_->stop_eval) != shm::kNoStop) return {Hold::Next::kFinished};
  if (ticket_ < 0 && (ticket_ = ClaimTicket(h_, self_, total_)) < 0) {
    return {Hold::Next::kFinished};
  }
  if (const int rc = PauseForCheckpoint(h_, self_, gate_, ticket_); rc != kWorkerOk) {
    return {Hold::Next::kExit, rc};
  }
  return {};
}

int AsyncRank::Compute(Update* u) {
  u->t0 = shm::MonotonicNs();
  u->v_read = shm::LoadAcquire(h_->param_version);
  for (int64_t i = 0; i < n_; ++i) w_bak_[i] = nn::SharedAccess::Load(w_ + i);

  if (loaded_ != ticket_) {
    LoadBatch(seg_, plan_, augment_, ticket_, &idx_, &bx_, &by_);
    loaded_ = ticket_;
  }
  const int64_t rows = static_cast<int64_t>(by_.size());
  u->minibatch = shm::AsyncMinibatch(c_, ticket_);  // = ticket on one host
  u->loss = MeanGradient(spec_, c_.seed, u->minibatch, idx_, bx_, by_, w_bak_, ws_, &grad_,
                         &u->sq, recorded_ ? &*recorded_ : nullptr);
  shm::StoreRelaxed<uint64_t>(self_->batches, static_cast<uint64_t>(u->b + 1));
  shm::AddRelaxed<uint64_t>(self_->samples_total, static_cast<uint64_t>(rows));
  if (!std::isfinite(u->loss) || !std::isfinite(u->sq)) {
    // Nothing of this gradient reaches W; the master ends the run and names the ticket.
    shm::RecordDivergence(h_, ticket_);
    return kWorkerDiverged;
  }

  ClipAndDecay(c_.optim, u->sq, w_bak_.data(), grad_.data(), n_);
  nn::ClearBufferGradients(norms_, grad_.data(), 0, n_);  // weight decay reached them
  rp_.lr = nn::LearningRate(c_.optim, u->minibatch);  // the schedule runs over the stream
  return kWorkerOk;
}

bool AsyncRank::Apply(const Update& u, uint64_t* v_apply) {
  const uint64_t v_now = shm::LoadAcquire(h_->param_version);
  if (c_.max_staleness >= 0 && v_now - u.v_read > static_cast<uint64_t>(c_.max_staleness)) {
    shm::AddRelaxed<uint64_t>(self_->dropped_total, 1);
    return false;
  }
  const uint64_t applied = shm::LoadRelaxed(self_->commit) / 2;
  shm::StoreRelaxed<uint64_t>(self_->commit, 2 * applied + 1);  // applying
  if (FaultAt(c_, FaultPoint::kMidApply, rank_, u.b, incarnation_)) {
    ApplyRuleBesideBuffers(n_ / 2);
    DieNow();
  }
  ApplyRuleBesideBuffers(n_);
  MoveRunningStats();
  *v_apply = shm::AddRelease(h_->param_version, 1);
  // The ticket is released while commit is still odd: a death from here on is settled from
  // commit alone, and the master never sees a held ticket beside an even (counted) commit.
  shm::StoreRelaxed<int64_t>(self_->ticket, -1);
  shm::StoreRelaxed<uint64_t>(self_->commit, 2 * applied + 2);  // counted, not applying
  ticket_ = -1;
  return true;
}

void AsyncRank::ApplyRuleBesideBuffers(int64_t n) {
  int64_t i = 0;
  auto apply_to = [&](int64_t end) {
    if (end <= i) return;
    nn::ApplyRule<nn::SharedAccess>(rp_, end - i, w_ + i, w_bak_.data() + i, grad_.data() + i,
                                    mean_square_ + i);
  };
  for (const nn::NormSite& s : norms_) {  // in the flat vector's order
    apply_to(std::min(n, s.running));
    i = std::max(i, s.running + 2 * s.channels + 1);
  }
  apply_to(n);
}

void AsyncRank::MoveRunningStats() {
  for (const nn::NormSite& s : norms_) {
    const int64_t lo = s.running, hi = s.running + 2 * s.channels;  // the mean and the variance
    // w_bak_ is free once the rule has read it: the buffers' current values go through it.
    for (int64_t i = lo; i < hi; ++i) w_bak_[i] = nn::SharedAccess::Load(w_ + i);
    nn::AdvanceRunningStats({s}, recorded_->data(), w_bak_.data(), w_bak_.data(), lo, hi);
    for (int64_t i = lo; i < hi; ++i) nn::SharedAccess::Store(w_ + i, w_bak_[i]);
    // Loads and stores of the count (here, or the rule's over it) lose the counts of workers
    // that apply at the same moment: 2 workers counted 4939 to 4999 of 5000 updates.
    std::atomic_ref<float>(w_[hi]).fetch_add(1.0f, std::memory_order_relaxed);
  }
}

int AsyncRank::Run() {
  if (const int rc = WaitForEveryRank(); rc != kWorkerOk) return rc;
  ticket_ = shm::LoadRelaxed(self_->ticket);
  for (;;) {
    const Hold hold = HoldTicket();
    if (hold.next == Hold::Next::kFinished) return kWorkerOk;
    if (hold.next == Hold::Next::kExit) return hold.code;
    Update u;
    u.b = static_cast<int64_t>(shm::LoadRelaxed(self_->batches));
    // Fires while the ticket is held: the replacement must take it over.
    if (FaultAt(c_, FaultPoint::kExit, rank_, u.b, incarnation_)) return kWorkerInjectedFault;
    if (const int rc = Compute(&u); rc != kWorkerOk) return rc;
    uint64_t v_apply = 0;
    // Dropped: the same ticket again, from the parameters as they are now.
    if (!Apply(u, &v_apply)) continue;
    RecordUpdate(h_, self_, v_apply, v_apply - u.v_read, u.b, u.loss, u.sq, u.t0);
  }
}

}  // namespace

// Across hosts the host master's exchange thread (master/hosts/param_server.h) must get a core
// promptly when a push or a reply is due, or pushes carry more updates and the hosts drift
// apart; the workers yield to it (and to the master's other threads) by running this much
// lower. Measured with 3 hosts x 1 worker on 2 cores: 11 to 20 updates a push at nice 0, 8 to
// 10 at nice 5 (docs/hosts.md, "Async across hosts").
constexpr int kAcrossHostsNice = 5;

int RunAsync(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation) {
  if (AcrossHosts(seg.header()->config)) (void)!nice(kAcrossHostsNice);
  AsyncRank r(seg, model, rank, incarnation);
  return r.Run();
}

}  // namespace shmtrain::worker
