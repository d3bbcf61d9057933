#include "worker/sync_loop.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <vector>

#include "data/batch_plan.h"
#include "nn/batch_norm.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shmtrain/status.h"
#include "worker/fault.h"
#include "worker/spec.h"
#include "worker/stats_crossing.h"

namespace shmtrain::worker {
namespace {

constexpr int64_t kSliceAlign = shm::kCacheLine / sizeof(float);
// The reduce and the update run a chunk at a time: the chunk's mean gradient (8 KiB) stays in
// L1 between the reduce that writes it and the update that reads it, so the phase streams the
// slots, the parameters and the optimizer state through memory once.
constexpr int64_t kChunk = 2048;

// out[j] = sum over q of slot q's gradient[i0 + j], in rank order, for j < k. Float sums of P
// terms: one rounding per term, like the reference's; the order is fixed, so every run gives
// the same bits.
void SumChunk(const shm::Segment& seg, int P, int64_t i0, int64_t k, float* __restrict out) {
  const float* __restrict g0 = seg.grad(0) + i0;
  for (int64_t j = 0; j < k; ++j) out[j] = g0[j];
  for (int q = 1; q < P; ++q) {
    const float* __restrict g = seg.grad(q) + i0;
    for (int64_t j = 0; j < k; ++j) out[j] += g[j];
  }
}

// What a pause before step t leads to: the step; the run's end at an early stop (step t-1 was
// the last, and the worker exits kWorkerOk); or the worker's exit with `code`, a WorkerExit
// (a wait that failed).
struct Pause {
  enum class Next { kStep, kEarlyStop, kExit };
  Next next = Next::kStep;
  int code = kWorkerOk;  // for kExit
};

// One rank of the sync loop: its slice of the vector, its buffers, the two phases of a step.
class SyncRank {
 public:
  SyncRank(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation)
      : seg_(seg),
        h_(seg.mutable_header()),
        c_(h_->config),
        spec_(model.spec),
        P_(static_cast<int>(c_.workers)),
        rank_(rank),
        global_rank_(static_cast<int>(c_.host_index) * P_ + rank),
        world_(static_cast<int>(c_.hosts) * P_),
        incarnation_(incarnation),
        n_(static_cast<int64_t>(c_.param_count)),
        self_(seg.mutable_block(rank)),
        opt_(nn::FindOptimizer(c_.optim.optimizer)),
        barrier_(h_, seg.block(0), P_, self_, shm::LoadAbortEpoch(*h_)),
        plan_(c_.rows, c_.batch, c_.seed),
        augment_(c_, spec_.input, plan_.steps_per_epoch()),
        timeout_ns_(static_cast<int64_t>(c_.barrier_timeout_s * 1e9)),
        norms_(nn::NormSites(spec_, model.shapes)),
        crossing_(seg, rank, incarnation, barrier_, timeout_ns_),
        stats_(static_cast<size_t>(c_.stats_count)) {
    // This rank's slice of the parameter vector, in whole cache lines so that no two ranks
    // write the same line in the update phase.
    const int64_t units = (n_ + kSliceAlign - 1) / kSliceAlign;
    const auto share = data::BatchPlan::ShareOf(units, rank, P_);
    lo_ = std::min(n_, share.begin * kSliceAlign);
    hi_ = std::min(n_, share.end * kSliceAlign);
    gbuf_.resize(static_cast<size_t>(c_.optim.clip_norm > 0 ? hi_ - lo_ : kChunk));
    ws_.NetFor(spec_, model.shapes);  // the net of the shapes read once, not resolved again
  }

  int Run();

 private:
  bool Fault(FaultPoint p, int64_t t) const { return FaultAt(c_, p, rank_, t, incarnation_); }
  int64_t Deadline() const { return shm::MonotonicNs() + timeout_ns_; }
  // Pauses before step t for a checkpoint or a validation snapshot.
  Pause PauseBefore(int64_t t);
  // This rank's rows of step t and their targets: the segment's in place (full batch), or
  // gathered into bx_ and by_ (a minibatch); augmented into bx_ with --augment.
  struct Share {
    const float* x;
    const float* y;
    int64_t rows;
  };
  Share ShareOf(int64_t t, nn::PassInfo* pass);
  // kWorkerOk, or the exit of a batch-norm crossing that failed (nothing is published then).
  int Gradient(int64_t t);
  int ReduceAndUpdate(int64_t t);
  // The optimizer over [i0, i0 + k) of the slice, from the mean gradient g.
  void UpdateChunk(int64_t t, double lr, int64_t i0, int64_t k, const float* g) const;
  // The step's mean gradient over [i0, i0 + k) into out, from this host's slots (one host) or
  // from GS (several); returns its squared norm (non-finite if any element is).
  double MeanChunk(int64_t i0, int64_t k, float inv, float* out) const;
  // Several hosts: this rank's slice of the host sum into HS, then the wait for the combiner's
  // GS of step t and its totals (samples_, loss_sum_ become every host's).
  int CombineAcrossHosts(int64_t t);
  // The parts of phase 2 (ReduceAndUpdate), in its order.
  // The step's rows and loss over this host's slots into samples_ and loss_sum_;
  // kWorkerInternal when a slot holds another step.
  int SumSlotTotals(int64_t t);
  // The fault point mid-update: half of this rank's slice of W and of the states of step t+1
  // poisoned, then death.
  [[noreturn]] void DieMidUpdate(int64_t t);
  // The slice's mean gradient a chunk at a time, its squared norm into *sq. Unclipped, each
  // chunk is applied as it is made; clipped, the slice waits in gbuf_ for the norm. False at
  // a chunk that is not finite, before anything of it is applied.
  bool ReduceSlice(int64_t t, double lr, float inv, double* sq);
  // Clipping: the global norm from every rank's share, then the slice's update, scaled.
  // t1 and w1: the start of the phase and the barrier wait then (BusyNs).
  int UpdateClipped(int64_t t, double lr, double sq, int64_t t1, uint64_t w1);
  // Rank 0: the step's mean loss into the loss ring, when t is a logged step.
  void RecordLoss(int64_t t);
  // Time since t1 without the barrier's waits in it (several hosts: for GS; batch norm's
  // crossings), which count as barrier wait.
  uint64_t BusyNs(int64_t t1, uint64_t w1) const {
    return static_cast<uint64_t>(shm::MonotonicNs() - t1) - (barrier_.waited_ns() - w1);
  }
  int Diverged(int64_t t) const {
    shm::RecordDivergence(h_, t);
    return kWorkerDiverged;
  }
  void RecordStepEnd(int64_t t, double loss);

  shm::Segment& seg_;
  shm::Header* h_;
  const shm::RunConfig& c_;
  const ModelSpec& spec_;  // the segment's model, read once (worker/run_model.h)
  const int P_;
  const int rank_;
  // The rank among every host's workers, and their number: the split of each step's batch.
  const int global_rank_;
  const int world_;
  const uint32_t incarnation_;
  const int64_t n_;
  shm::WorkerBlock* self_;
  const nn::OptimizerDef* opt_;
  shm::PhaseBarrier barrier_;
  data::BatchPlan plan_;
  const RowAugment augment_;
  const int64_t timeout_ns_;
  int64_t lo_ = 0, hi_ = 0;
  uint64_t phase_ = 0;
  int64_t last_step_end_ = 0;  // rank 0: when the previous step completed
  nn::Workspace<float> ws_;
  std::vector<int64_t> idx_;
  std::vector<float> bx_, by_;
  // The mean gradient: one chunk, or (clipping) the whole slice, kept until the norm is known.
  std::vector<float> gbuf_;
  std::vector<float> scaled_;
  int64_t samples_ = 0;
  double loss_sum_ = 0;
  // Batch norm: its layers, the crossings of the gradient phase, and the step's sums again in
  // the update phase, from which this rank moves the running statistics in its slice.
  const std::vector<nn::NormSite> norms_;
  SlotCrossing crossing_;
  std::vector<double> stats_;
};

Pause SyncRank::PauseBefore(int64_t t) {
  if (phase_ != 2 * static_cast<uint64_t>(t) || t <= c_.first_step) return {};
  // ---- checkpoint pause: until the master has copied W[t%2] and the states of t%2.
  if (c_.checkpoint_every > 0 && t % c_.checkpoint_every == 0) {
    const auto r = barrier_.WaitReleased(t, Deadline());
    if (r != shm::PhaseBarrier::Result::kOk) return {Pause::Next::kExit, ExitFor(r)};
  }
  // ---- validation snapshot: this rank's slice of W[t%2] into E[k%R]. W[t%2] is whole
  // (every rank is past phase 2t) and stays so until this rank arrives at 2t+1. E[k%R] is
  // free once the master has copied out snapshot k-R. The stop word is read after that
  // wait, and the master stores it before any ack that would let a rank past the eval it
  // names, so every rank stops at the same step.
  if (c_.eval_every > 0 && t % c_.eval_every == 0) {
    const int64_t k = t / c_.eval_every;
    const auto r = barrier_.WaitEvalAck(k - c_.snapshots, Deadline());
    if (r != shm::PhaseBarrier::Result::kOk) return {Pause::Next::kExit, ExitFor(r)};
    if (shm::LoadAcquire(h_->stop_eval) <= k) {  // early stop: step t-1 was the last
      shm::StoreRelaxed(h_->last_end_ns, shm::MonotonicNs());
      return {Pause::Next::kEarlyStop};
    }
    std::copy(seg_.params(t) + lo_, seg_.params(t) + hi_, seg_.mutable_snapshot(k) + lo_);
    shm::StoreRelease(self_->snap_eval, k);
  }
  return {};
}

// Phase 1: the gradient of this rank's share of step t's batch at W[t%2], into slot r.
int SyncRank::Gradient(int64_t t) {
  if (Fault(FaultPoint::kBeforeCompute, t)) DieNow();
  const int64_t t0 = shm::MonotonicNs();
  const uint64_t w0 = barrier_.waited_ns();
  // Dropout's mask follows the step and each sample's row (nn/layer.h, PassInfo).
  nn::PassInfo pass;
  pass.train = true;
  pass.seed = c_.seed;
  pass.step = t;
  if (!norms_.empty()) {
    crossing_.BeginStep(t);
    pass.stats = &crossing_;
  }
  const Share share = ShareOf(t, &pass);
  const float* x = share.x;
  const float* y = share.y;
  const int64_t rows = share.rows;
  shm::SlotHeader* slot = seg_.mutable_slot(rank_);
  if (Fault(FaultPoint::kMidGradient, t)) {
    std::fill(seg_.mutable_grad(rank_), seg_.mutable_grad(rank_) + n_ / 2, NAN);
    DieNow();
  }
  const double loss =
      nn::LossAndGrad<float>(spec_, seg_.params(t), x, y, rows, seg_.mutable_grad(rank_), ws_,
                             pass);
  if (crossing_.result() != shm::PhaseBarrier::Result::kOk) return ExitFor(crossing_.result());
  slot->loss_sum = loss;
  slot->samples = rows;
  slot->step = t;
  shm::AddRelaxed<uint64_t>(self_->samples_total, static_cast<uint64_t>(rows));
  // Batch norm's crossings waited at the barrier (counted there), not computed.
  shm::AddRelaxed<uint64_t>(self_->compute_ns_total, BusyNs(t0, w0));
  phase_ = 2 * t + 1;
  barrier_.Arrive(phase_);
  if (Fault(FaultPoint::kAtBarrier1, t)) DieNow();
  return kWorkerOk;
}

SyncRank::Share SyncRank::ShareOf(int64_t t, nn::PassInfo* pass) {
  const int64_t features = c_.features;
  if (c_.batch == 0) {
    const auto r = data::BatchPlan::ShareOf(c_.rows, global_rank_, world_);
    pass->first_row = r.begin;
    const Share in_place{seg_.x() + r.begin * features, seg_.y() + r.begin, r.end - r.begin};
    if (!augment_.on()) return in_place;
    bx_.resize(static_cast<size_t>(in_place.rows * features));
    for (int64_t i = 0; i < in_place.rows; ++i) {
      augment_.Row(t, r.begin + i, in_place.x + i * features, bx_.data() + i * features);
    }
    return {bx_.data(), in_place.y, in_place.rows};
  }
  plan_.Share(t, global_rank_, world_, &idx_);
  pass->rows = idx_.data();
  if (augment_.on()) {
    data::GatherRows(
        seg_.x(), seg_.y(), features, idx_, &bx_, &by_,
        [&](int64_t row, const float* in, float* out) { augment_.Row(t, row, in, out); });
  } else {
    data::GatherRows(seg_.x(), seg_.y(), features, idx_, &bx_, &by_);
  }
  return {bx_.data(), by_.data(), static_cast<int64_t>(idx_.size())};
}

void SyncRank::UpdateChunk(int64_t t, double lr, int64_t i0, int64_t k, const float* g) const {
  nn::UpdateArgs a;
  a.n = k;
  a.w_in = seg_.params(t) + i0;
  a.w_out = seg_.mutable_params(t + 1) + i0;
  for (int s = 0; s < seg_.num_states(); ++s) {
    a.s_in[s] = seg_.state(s, t) + i0;
    a.s_out[s] = seg_.mutable_state(s, t + 1) + i0;
  }
  a.g = g;
  a.lr = lr;
  a.weight_decay = c_.optim.weight_decay;
  a.t = t;
  opt_->update(c_.optim.hyper, a);
}

double SyncRank::MeanChunk(int64_t i0, int64_t k, float inv, float* out) const {
  if (!AcrossHosts(c_)) {
    SumChunk(seg_, P_, i0, k, out);
  } else {
    std::copy(seg_.global_sum() + i0, seg_.global_sum() + i0 + k, out);
  }
  return nn::ScaleAndSquaredNorm(out, k, inv);
}

// A replacement whose predecessor published the slice skips the sum: the combiner may be
// reading HS, and the sum is the same bits anyway. A slice half-written by a dead predecessor
// is not published, so it is written again whole.
int SyncRank::CombineAcrossHosts(int64_t t) {
  float* hs = seg_.mutable_host_sum();
  // P = 1: HS is this rank's slot (shm/layout.h), already whole.
  if (P_ > 1 && shm::LoadSeqCst(self_->host_sum_step) < t) {
    if (Fault(FaultPoint::kMidHostSum, t) && hi_ > lo_) {
      std::fill(hs + lo_, hs + lo_ + (hi_ - lo_) / 2, NAN);
      DieNow();
    }
    for (int64_t i0 = lo_; i0 < hi_; i0 += kChunk)
      SumChunk(seg_, P_, i0, std::min(kChunk, hi_ - i0), hs + i0);
  }
  barrier_.PublishHostSum(t);
  if (Fault(FaultPoint::kAtHostSum, t)) DieNow();
  const auto r = barrier_.WaitCombined(t, Deadline());
  if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
  samples_ = h_->combined_samples;
  loss_sum_ = h_->combined_loss;
  return kWorkerOk;
}

// Phase 2: reduce this rank's slice over all slots in rank order, clip, apply the optimizer.
// Divergence: every rank sums the same loss, and each checks its slice of the mean gradient
// before the optimizer writes its part of it. Only buffers of step t+1 are ever written, so
// W[t%2] stays the last finite parameters whatever the check finds, and the master names t.
int SyncRank::ReduceAndUpdate(int64_t t) {
  const int64_t t1 = shm::MonotonicNs();
  const uint64_t w1 = barrier_.waited_ns();
  if (const int e = SumSlotTotals(t); e != kWorkerOk) return e;
  if (AcrossHosts(c_)) {
    if (const int e = CombineAcrossHosts(t); e != kWorkerOk) return e;
  }
  if (!std::isfinite(loss_sum_)) return Diverged(t);
  const float inv = static_cast<float>(1.0 / static_cast<double>(samples_));
  const bool clip = c_.optim.clip_norm > 0;
  const double lr = nn::LearningRate(c_.optim, t);  // once per step, not per chunk
  if (Fault(FaultPoint::kMidUpdate, t) && hi_ > lo_) DieMidUpdate(t);
  double sq = 0;
  if (!ReduceSlice(t, lr, inv, &sq)) return Diverged(t);
  if (clip) {
    if (const int e = UpdateClipped(t, lr, sq, t1, w1); e != kWorkerOk) return e;
  }
  if (!norms_.empty()) {
    // The optimizer wrote the buffers in the slice too (from a zero gradient); they are the
    // running statistics' alone.
    SlotCrossing::AddUp(seg_, stats_.data());
    nn::AdvanceRunningStats(norms_, stats_.data(), seg_.params(t), seg_.mutable_params(t + 1), lo_,
                            hi_);
  }
  if (!clip) {
    shm::StoreRelaxed(self_->grad_sq, sq);
    shm::StoreRelaxed(self_->grad_sq_step, t);
    shm::AddRelaxed<uint64_t>(self_->reduce_ns_total, BusyNs(t1, w1));
  }
  RecordLoss(t);
  phase_ = 2 * t + 2;
  barrier_.Arrive(phase_);
  if (Fault(FaultPoint::kAtBarrier2, t)) DieNow();
  return kWorkerOk;
}

int SyncRank::SumSlotTotals(int64_t t) {
  samples_ = 0;
  loss_sum_ = 0;
  for (int q = 0; q < P_; ++q) {
    const shm::SlotHeader* s = seg_.slot(q);
    if (s->step != t) {
      std::fprintf(stderr, "shmtrain-worker[%d]: slot %d holds step %lld, expected %lld\n", rank_,
                   q, static_cast<long long>(s->step), static_cast<long long>(t));
      return kWorkerInternal;
    }
    samples_ += s->samples;
    loss_sum_ += s->loss_sum;
  }
  return kWorkerOk;
}

void SyncRank::DieMidUpdate(int64_t t) {
  const int64_t half = (hi_ - lo_) / 2;
  std::fill(seg_.mutable_params(t + 1) + lo_, seg_.mutable_params(t + 1) + lo_ + half, NAN);
  for (int s = 0; s < seg_.num_states(); ++s) {
    std::fill(seg_.mutable_state(s, t + 1) + lo_, seg_.mutable_state(s, t + 1) + lo_ + half, NAN);
  }
  DieNow();
}

bool SyncRank::ReduceSlice(int64_t t, double lr, float inv, double* sq) {
  const bool clip = c_.optim.clip_norm > 0;
  double sum = 0;
  for (int64_t i0 = lo_; i0 < hi_; i0 += kChunk) {
    const int64_t k = std::min(kChunk, hi_ - i0);
    float* g = clip ? gbuf_.data() + (i0 - lo_) : gbuf_.data();
    const double part = MeanChunk(i0, k, inv, g);
    if (!std::isfinite(part)) return false;
    sum += part;
    if (!clip) UpdateChunk(t, lr, i0, k, g);
  }
  *sq = sum;
  return true;
}

int SyncRank::UpdateClipped(int64_t t, double lr, double sq, int64_t t1, uint64_t w1) {
  // The global norm: every rank's share, summed in rank order after all have published.
  barrier_.PublishNorm(t, sq);
  if (Fault(FaultPoint::kAtNorm, t)) DieNow();
  shm::AddRelaxed<uint64_t>(self_->reduce_ns_total, BusyNs(t1, w1));
  double total = 0;
  const auto r = barrier_.WaitNorms(t, Deadline(), &total);
  if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
  const int64_t t2 = shm::MonotonicNs();
  // torch.nn.utils.clip_grad_norm_: scale by C / (norm + 1e-6) when that is below 1.
  const double coef = c_.optim.clip_norm / (std::sqrt(total) + 1e-6);
  scaled_.resize(static_cast<size_t>(std::min(kChunk, hi_ - lo_)));
  for (int64_t i0 = lo_; i0 < hi_; i0 += kChunk) {
    const int64_t k = std::min(kChunk, hi_ - i0);
    const float* g = gbuf_.data() + (i0 - lo_);
    if (coef < 1) {
      const float f = static_cast<float>(coef);
      for (int64_t j = 0; j < k; ++j) scaled_[j] = g[j] * f;
      g = scaled_.data();
    }
    UpdateChunk(t, lr, i0, k, g);
  }
  shm::AddRelaxed<uint64_t>(self_->reduce_ns_total, static_cast<uint64_t>(shm::MonotonicNs() - t2));
  return kWorkerOk;
}

void SyncRank::RecordLoss(int64_t t) {
  if (rank_ == 0 && c_.log_every > 0 && t % c_.log_every == 0) {
    const int64_t k = t / c_.log_every;
    shm::PublishLoss(h_->loss_ring[k % shm::kLossRing], static_cast<uint64_t>(k),
                     loss_sum_ / static_cast<double>(samples_));
  }
}

void SyncRank::RecordStepEnd(int64_t t, double loss) {
  shm::AddRelaxed<uint64_t>(self_->steps_total, 1);
  // Timing of the run's steps, recorded by any rank (rank 0 may be a replacement that never
  // saw the first or last step end): the first past the first step and the last past the last
  // one win; the values differ by a wake-up.
  if (t == c_.first_step || t + 1 == c_.total_steps) {
    const int64_t now = shm::MonotonicNs();
    if (t == c_.first_step) shm::StoreIfZero(h_->step1_end_ns, now);
    if (t + 1 == c_.total_steps) shm::StoreRelaxed(h_->last_end_ns, now);
  }
  if (rank_ != 0) return;
  // Every rank published its slice's share of |g|^2 for step t before arriving at 2t+2,
  // and none can publish step t+1's before rank 0 arrives at 2t+3.
  double grad_sq = 0;
  for (int q = 0; q < P_; ++q) grad_sq += shm::LoadRelaxed(seg_.block(q)->grad_sq);
  shm::StoreRelaxed(h_->last_grad_norm, std::sqrt(grad_sq));
  shm::StoreRelaxed(h_->last_loss, loss);
  const int64_t now = shm::MonotonicNs();
  if (last_step_end_ > 0) {
    shm::AddRelaxed<uint64_t>(self_->step_duration_hist[shm::DurationBucket(now - last_step_end_)],
                              1);
    shm::AddRelaxed<uint64_t>(self_->step_duration_ns_total,
                              static_cast<uint64_t>(now - last_step_end_));
  }
  last_step_end_ = now;
}

int SyncRank::Run() {
  if (opt_ == nullptr) {
    std::fprintf(stderr, "shmtrain-worker[%d]: unknown optimizer id %u\n", rank_,
                 c_.optim.optimizer);
    return kWorkerBadLayout;
  }
  phase_ = shm::LoadPhase(*self_);
  // A replacement resumes at the phase its predecessor published. At an even phase 2t the
  // predecessor may have died before its wait "every rank >= 2t" completed; that wait is
  // redone here, or this rank would write step t's gradient into its slot while a peer still
  // reduces step t-1 over the slots, and read W[t%2] while peers still write it.
  if (phase_ % 2 == 0) {
    const auto r = barrier_.Wait(phase_, Deadline());
    if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
  }
  for (int64_t t = static_cast<int64_t>(phase_ / 2); t < c_.total_steps; ++t) {
    shm::StoreRelaxed(self_->heartbeat_ns, shm::MonotonicNs());
    if (Fault(FaultPoint::kExit, t)) return kWorkerInjectedFault;
    const Pause pause = PauseBefore(t);
    if (pause.next == Pause::Next::kEarlyStop) return kWorkerOk;
    if (pause.next == Pause::Next::kExit) return pause.code;
    if (phase_ == 2 * static_cast<uint64_t>(t)) {
      if (const int e = Gradient(t); e != kWorkerOk) return e;
    }
    auto r = barrier_.Wait(2 * t + 1, Deadline());
    if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
    if (const int e = ReduceAndUpdate(t); e != kWorkerOk) return e;
    r = barrier_.Wait(2 * t + 2, Deadline());
    if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
    RecordStepEnd(t, loss_sum_ / static_cast<double>(samples_));
  }
  return kWorkerOk;
}

}  // namespace

int RunSync(shm::Segment& seg, const RunModel& model, int rank, uint32_t incarnation) {
  SyncRank r(seg, model, rank, incarnation);
  return r.Run();
}

}  // namespace shmtrain::worker
