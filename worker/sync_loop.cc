#include "worker/sync_loop.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <vector>

#include "data/batch_plan.h"
#include "nn/mlp.h"
#include "nn/update.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shmtrain/status.h"
#include "worker/fault.h"
#include "worker/spec.h"

namespace shmtrain::worker {
namespace {

constexpr int64_t kSliceAlign = shm::kCacheLine / sizeof(float);


}  // namespace

int RunSync(const shm::Segment& seg, int rank, uint32_t incarnation) {
  shm::Header* h = seg.header();
  const shm::RunConfig& c = h->config;
  const ModelSpec spec = SpecOf(c);
  const int P = static_cast<int>(c.workers);
  const int64_t n = static_cast<int64_t>(c.param_count);
  const int64_t features = c.features;
  shm::WorkerBlock* self = seg.block(rank);

  shm::PhaseBarrier barrier(h, seg.block(0), P, self, shm::LoadAbortEpoch(*h));
  data::BatchPlan plan(c.rows, c.batch, c.seed);
  nn::Workspace<float> ws;
  std::vector<int64_t> idx;
  std::vector<float> bx, by;

  // This rank's slice of the parameter vector, in whole cache lines so that no two ranks
  // write the same line in the update phase.
  const int64_t units = (n + kSliceAlign - 1) / kSliceAlign;
  const auto share = data::BatchPlan::ShareOf(units, rank, P);
  const int64_t lo = std::min(n, share.begin * kSliceAlign);
  const int64_t hi = std::min(n, share.end * kSliceAlign);
  std::vector<double> gmean(static_cast<size_t>(hi - lo));

  const int64_t timeout_ns = static_cast<int64_t>(c.barrier_timeout_s * 1e9);
  uint64_t phase = shm::LoadPhase(*self);
  int64_t last_step_end = 0;  // rank 0: when the previous step completed
  // A replacement resumes at the phase its predecessor published. At an even phase 2t the
  // predecessor may have died before its wait "every rank >= 2t" completed; that wait is
  // redone here, or this rank would write step t's gradient into its slot while a peer still
  // reduces step t-1 over the slots, and read W[t%2] while peers still write it.
  if (phase % 2 == 0) {
    const auto r = barrier.Wait(phase, shm::MonotonicNs() + timeout_ns);
    if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
  }
  for (int64_t t = static_cast<int64_t>(phase / 2); t < c.total_steps; ++t) {
    shm::StoreRelaxed(self->heartbeat_ns, shm::MonotonicNs());
    auto fault = [&](FaultPoint p) { return FaultAt(c, p, rank, t, incarnation); };
    if (fault(FaultPoint::kExit)) return kWorkerInjectedFault;

    // ---- checkpoint pause: before step t, until the master has copied W[t%2] and V[t%2].
    if (c.checkpoint_every > 0 && t > c.first_step && t % c.checkpoint_every == 0 &&
        phase == 2 * static_cast<uint64_t>(t)) {
      const auto r = barrier.WaitReleased(t, shm::MonotonicNs() + timeout_ns);
      if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
    }

    // ---- validation snapshot: this rank's slice of W[t%2] into E[k%R]. W[t%2] is whole
    // (every rank is past phase 2t) and stays so until this rank arrives at 2t+1. E[k%R] is
    // free once the master has copied out snapshot k-R. The stop word is read after that
    // wait, and the master stores it before any ack that would let a rank past the eval it
    // names, so every rank stops at the same step.
    if (c.eval_every > 0 && t > c.first_step && t % c.eval_every == 0 &&
        phase == 2 * static_cast<uint64_t>(t)) {
      const int64_t k = t / c.eval_every;
      const auto r = barrier.WaitEvalAck(k - c.snapshots, shm::MonotonicNs() + timeout_ns);
      if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
      if (shm::LoadAcquire(h->stop_eval) <= k) {  // early stop: step t-1 was the last
        shm::StoreRelaxed(h->last_end_ns, shm::MonotonicNs());
        return kWorkerOk;
      }
      std::copy(seg.params(t) + lo, seg.params(t) + hi, seg.snapshot(k) + lo);
      shm::StoreRelease(self->snap_eval, k);
    }

    // ---- phase 1: the gradient of this rank's share at W[t%2].
    if (phase == 2 * static_cast<uint64_t>(t)) {
      if (fault(FaultPoint::kBeforeCompute)) DieNow();
      const int64_t t0 = shm::MonotonicNs();
      const float* x;
      const float* y;
      int64_t rows;
      if (c.batch == 0) {
        const auto r = data::BatchPlan::ShareOf(c.rows, rank, P);
        x = seg.x() + r.begin * features;
        y = seg.y() + r.begin;
        rows = r.end - r.begin;
      } else {
        plan.Share(t, rank, P, &idx);
        rows = static_cast<int64_t>(idx.size());
        bx.resize(static_cast<size_t>(rows * features));
        by.resize(static_cast<size_t>(rows));
        for (int64_t i = 0; i < rows; ++i) {
          const float* src = seg.x() + idx[i] * features;
          std::copy(src, src + features, bx.data() + i * features);
          by[i] = seg.y()[idx[i]];
        }
        x = bx.data();
        y = by.data();
      }
      shm::SlotHeader* slot = seg.slot(rank);
      if (fault(FaultPoint::kMidGradient)) {
        std::fill(seg.grad(rank), seg.grad(rank) + n / 2, NAN);
        DieNow();
      }
      slot->loss_sum = nn::LossAndGrad<float>(spec, seg.params(t), x, y, rows, seg.grad(rank), ws);
      slot->samples = rows;
      slot->step = t;
      shm::AddRelaxed<uint64_t>(self->samples_total, static_cast<uint64_t>(rows));
      shm::AddRelaxed<uint64_t>(self->compute_ns_total,
                                static_cast<uint64_t>(shm::MonotonicNs() - t0));
      phase = 2 * t + 1;
      barrier.Arrive(phase);
      if (fault(FaultPoint::kAtBarrier1)) DieNow();
    }
    auto r = barrier.Wait(2 * t + 1, shm::MonotonicNs() + timeout_ns);
    if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);

    // ---- phase 2: reduce this rank's slice over all slots in rank order, apply.
    const int64_t t1 = shm::MonotonicNs();
    int64_t samples = 0;
    double loss_sum = 0;
    for (int q = 0; q < P; ++q) {
      const shm::SlotHeader* s = seg.slot(q);
      if (s->step != t) {
        std::fprintf(stderr, "shmtrain-worker[%d]: slot %d holds step %lld, expected %lld\n",
                     rank, q, static_cast<long long>(s->step), static_cast<long long>(t));
        return kWorkerInternal;
      }
      samples += s->samples;
      loss_sum += s->loss_sum;
    }
    // Divergence: every rank sums the same loss, and each checks its slice of the mean
    // gradient below, before anything of update t is written, so W[t%2] stays the last
    // finite parameters and the master names step t.
    if (!std::isfinite(loss_sum)) {
      shm::RecordDivergence(h, t);
      return kWorkerDiverged;
    }
    if (hi > lo) {
      const float* g0 = seg.grad(0);
      for (int64_t i = lo; i < hi; ++i) gmean[i - lo] = g0[i];
      for (int q = 1; q < P; ++q) {
        const float* g = seg.grad(q);
        for (int64_t i = lo; i < hi; ++i) gmean[i - lo] += g[i];
      }
      const double inv = 1.0 / static_cast<double>(samples);
      double sq = 0;
      for (double& v : gmean) {
        v *= inv;
        sq += v * v;
      }
      if (!std::isfinite(sq)) {
        shm::RecordDivergence(h, t);
        return kWorkerDiverged;
      }
      self->grad_sq = sq;
      self->grad_sq_step = t;
      if (fault(FaultPoint::kMidUpdate)) {
        std::fill(seg.params(t + 1) + lo, seg.params(t + 1) + lo + (hi - lo) / 2, NAN);
        DieNow();
      }
      const float* v_in = seg.momentum(t);
      float* v_out = seg.momentum(t + 1);
      nn::SgdMomentum(hi - lo, seg.params(t) + lo, v_in ? v_in + lo : nullptr, gmean.data(), c.lr,
                      c.momentum, seg.params(t + 1) + lo, v_out ? v_out + lo : nullptr);
    }
    if (rank == 0 && c.log_every > 0 && t % c.log_every == 0) {
      const int64_t k = t / c.log_every;
      shm::LossRecord& rec = h->loss_ring[k % shm::kLossRing];
      rec.loss = loss_sum / static_cast<double>(samples);
      shm::StoreRelease<uint64_t>(rec.tag, static_cast<uint64_t>(k + 1));
    }
    shm::AddRelaxed<uint64_t>(self->compute_ns_total,
                              static_cast<uint64_t>(shm::MonotonicNs() - t1));
    phase = 2 * t + 2;
    barrier.Arrive(phase);
    if (fault(FaultPoint::kAtBarrier2)) DieNow();
    r = barrier.Wait(2 * t + 2, shm::MonotonicNs() + timeout_ns);
    if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
    shm::AddRelaxed<uint64_t>(self->steps_total, 1);
    // Timing of the run's steps, recorded by any rank (rank 0 may be a replacement that never
    // saw the first or last step end): the first to pass wins, the values differ by a wake-up.
    if (t == c.first_step || t + 1 == c.total_steps) {
      const int64_t now = shm::MonotonicNs();
      int64_t zero = 0;
      if (t == c.first_step) std::atomic_ref<int64_t>(h->step1_end_ns).compare_exchange_strong(zero, now);
      if (t + 1 == c.total_steps) shm::StoreRelaxed(h->last_end_ns, now);
    }
    if (rank == 0) {
      // Every rank published its slice's share of |g|^2 for step t before arriving at 2t+2,
      // and none can publish step t+1's before rank 0 arrives at 2t+3.
      double grad_sq = 0;
      for (int q = 0; q < P; ++q) grad_sq += seg.block(q)->grad_sq;
      shm::StoreRelaxed(h->last_grad_norm, std::sqrt(grad_sq));
      shm::StoreRelaxed(h->last_loss, loss_sum / static_cast<double>(samples));
      const int64_t now = shm::MonotonicNs();
      if (last_step_end > 0) {
        shm::AddRelaxed<uint64_t>(self->step_duration_hist[shm::DurationBucket(now - last_step_end)], 1);
        shm::AddRelaxed<uint64_t>(self->step_duration_ns_total,
                                  static_cast<uint64_t>(now - last_step_end));
      }
      last_step_end = now;
    }
  }
  return kWorkerOk;
}

}  // namespace shmtrain::worker
