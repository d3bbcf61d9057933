#include "worker/sync_loop.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "data/batch_plan.h"
#include "nn/mlp.h"
#include "nn/update.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shmtrain/status.h"
#include "worker/spec.h"

namespace shmtrain::worker {
namespace {

constexpr int64_t kSliceAlign = shm::kCacheLine / sizeof(float);

int ExitFor(shm::PhaseBarrier::Result r) {
  switch (r) {
    case shm::PhaseBarrier::Result::kOk: return kWorkerOk;
    case shm::PhaseBarrier::Result::kAborted: return kWorkerAborted;
    case shm::PhaseBarrier::Result::kTimeout: return kWorkerBarrierTimeout;
    case shm::PhaseBarrier::Result::kOrphaned: return kWorkerOrphaned;
  }
  return kWorkerInternal;
}

}  // namespace

int RunSync(const shm::Segment& seg, int rank) {
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
  for (int64_t t = static_cast<int64_t>(phase / 2); t < c.total_steps; ++t) {
    shm::StoreRelaxed(self->heartbeat_ns, shm::MonotonicNs());
    if (c.fault_rank == rank && c.fault_step == t) return kWorkerInjectedFault;

    // ---- phase 1: the gradient of this rank's share at W[t%2].
    if (phase == 2 * static_cast<uint64_t>(t)) {
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
      slot->loss_sum = nn::LossAndGrad<float>(spec, seg.params(t), x, y, rows, seg.grad(rank), ws);
      slot->samples = rows;
      slot->step = t;
      shm::AddRelaxed<uint64_t>(self->samples_total, static_cast<uint64_t>(rows));
      shm::AddRelaxed<uint64_t>(self->compute_ns_total,
                                static_cast<uint64_t>(shm::MonotonicNs() - t0));
      phase = 2 * t + 1;
      barrier.Arrive(phase);
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
    if (hi > lo) {
      const float* g0 = seg.grad(0);
      for (int64_t i = lo; i < hi; ++i) gmean[i - lo] = g0[i];
      for (int q = 1; q < P; ++q) {
        const float* g = seg.grad(q);
        for (int64_t i = lo; i < hi; ++i) gmean[i - lo] += g[i];
      }
      const double inv = 1.0 / static_cast<double>(samples);
      for (double& v : gmean) v *= inv;
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
    r = barrier.Wait(2 * t + 2, shm::MonotonicNs() + timeout_ns);
    if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);
    shm::AddRelaxed<uint64_t>(self->steps_total, 1);
    shm::StoreRelaxed<uint64_t>(self->barrier_wait_ns_total, barrier.waited_ns());
    if (rank == 0) {
      if (t == 0) shm::StoreRelaxed(h->step1_end_ns, shm::MonotonicNs());
      if (t + 1 == c.total_steps) shm::StoreRelaxed(h->last_end_ns, shm::MonotonicNs());
    }
  }
  return kWorkerOk;
}

}  // namespace shmtrain::worker
