#include "worker/async_loop.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "data/batch_plan.h"
#include "nn/mlp.h"
#include "nn/rng.h"
#include "nn/update.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shmtrain/status.h"
#include "worker/fault.h"
#include "worker/spec.h"

namespace shmtrain::worker {
namespace {

static_assert(std::atomic_ref<double>::is_always_lock_free, "loss_ema is shared as a double");

constexpr double kLossEmaWeight = 0.1;
// The gradient norm metric costs a pass over the gradient: take it every few updates.
constexpr int64_t kGradNormEvery = 8;
constexpr uint64_t kShardStream = 0x5348415244ull;  // "SHARD"

}  // namespace

int RunAsync(const shm::Segment& seg, int rank, uint32_t incarnation) {
  shm::Header* h = seg.header();
  const shm::RunConfig& c = h->config;
  const ModelSpec spec = SpecOf(c);
  const int P = static_cast<int>(c.workers);
  const int64_t n = static_cast<int64_t>(c.param_count);
  const int64_t features = c.features;
  shm::WorkerBlock* self = seg.block(rank);
  const uint32_t epoch = shm::LoadAbortEpoch(*h);
  const auto master = static_cast<pid_t>(c.master_pid);

  // This rank's shard: its share of a seeded permutation of the rows. Async workers apply
  // their gradients one by one, so a shard must be a fair sample of the data: contiguous
  // shards of sorted data would pull the parameters towards whichever rank updated last.
  std::vector<int64_t> shard_rows_idx;
  {
    nn::Rng rng(nn::MixSeed(c.seed, kShardStream));
    std::vector<int64_t> perm;
    nn::Permutation(c.rows, rng, &perm);
    const auto share = data::BatchPlan::ShareOf(c.rows, rank, P);
    shard_rows_idx.assign(perm.begin() + share.begin, perm.begin() + share.end);
  }
  const int64_t shard_rows = static_cast<int64_t>(shard_rows_idx.size());
  if (shard_rows == 0) return kWorkerOk;  // more workers than rows: nothing to contribute
  const int64_t batch = c.batch > 0 ? std::min<int64_t>(c.batch, shard_rows) : 0;
  data::BatchPlan plan(shard_rows, batch, nn::MixSeed(c.seed, 0x4153594E43ull + rank));

  nn::RuleParams rp;
  rp.rule = static_cast<AsyncRule>(c.rule);
  rp.lr = c.lr;
  rp.lambda0 = c.lambda;
  rp.ms_decay = c.ms_decay;
  rp.epsilon = c.epsilon;

  nn::Workspace<float> ws;
  nn::AlignedVector<float> w_bak(n), grad(n), bx, by;
  std::vector<int64_t> idx;
  float* w = seg.params(0);
  float* mean_square = seg.grad(rank);
  std::atomic_ref<uint64_t> version(h->param_version);
  std::atomic_ref<uint64_t> claimed(h->claimed);
  const uint64_t total = static_cast<uint64_t>(c.total_steps);

  // Start gate: wait until every rank has attached, so that no rank trains alone on its
  // shard while the others are still starting (phase words are otherwise unused in async).
  shm::PhaseBarrier gate(h, seg.block(0), P, self, epoch);
  gate.Arrive(1);
  const auto r = gate.Wait(1, shm::MonotonicNs() + static_cast<int64_t>(c.barrier_timeout_s * 1e9));
  if (r != shm::PhaseBarrier::Result::kOk) return ExitFor(r);

  for (;;) {
    shm::StoreRelaxed(self->heartbeat_ns, shm::MonotonicNs());
    if (shm::LoadAbortEpoch(*h) != epoch) return kWorkerAborted;
    if (getppid() != master) return kWorkerOrphaned;
    if (claimed.load(std::memory_order_relaxed) >= total) return kWorkerOk;
    if (shm::LoadAcquire(h->stop_eval) != shm::kNoStop) return kWorkerOk;  // early stop
    const int64_t b = static_cast<int64_t>(shm::LoadRelaxed(self->batches));
    if (FaultAt(c, FaultPoint::kExit, rank, b, incarnation)) return kWorkerInjectedFault;

    const int64_t t0 = shm::MonotonicNs();
    const uint64_t v_read = version.load(std::memory_order_acquire);
    for (int64_t i = 0; i < n; ++i) w_bak[i] = nn::SharedAccess::Load(w + i);

    plan.Share(b, 0, 1, &idx);
    const int64_t rows = static_cast<int64_t>(idx.size());
    bx.resize(static_cast<size_t>(rows * features));
    by.resize(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = shard_rows_idx[idx[i]];
      std::copy(seg.x() + row * features, seg.x() + (row + 1) * features,
                bx.data() + i * features);
      by[i] = seg.y()[row];
    }
    const double loss =
        nn::LossAndGrad<float>(spec, w_bak.data(), bx.data(), by.data(), rows, grad.data(), ws) /
        static_cast<double>(rows);
    const float inv = 1.0f / static_cast<float>(rows);
    for (float& g : grad) g *= inv;
    shm::StoreRelaxed<uint64_t>(self->batches, static_cast<uint64_t>(b + 1));
    shm::AddRelaxed<uint64_t>(self->samples_total, static_cast<uint64_t>(rows));

    const uint64_t v_now = version.load(std::memory_order_acquire);
    if (c.max_staleness >= 0 && v_now - v_read > static_cast<uint64_t>(c.max_staleness)) {
      shm::AddRelaxed<uint64_t>(self->dropped_total, 1);
      continue;
    }
    if (claimed.fetch_add(1, std::memory_order_relaxed) >= total) return kWorkerOk;
    const uint64_t applied = shm::LoadRelaxed(self->commit) / 2;
    shm::StoreRelaxed<uint64_t>(self->commit, 2 * applied + 1);  // applying
    if (FaultAt(c, FaultPoint::kMidApply, rank, b, incarnation)) {
      nn::ApplyRule<nn::SharedAccess>(rp, n / 2, w, w_bak.data(), grad.data(), mean_square);
      DieNow();
    }
    nn::ApplyRule<nn::SharedAccess>(rp, n, w, w_bak.data(), grad.data(), mean_square);
    const uint64_t v_apply = version.fetch_add(1, std::memory_order_release);
    shm::StoreRelaxed<uint64_t>(self->commit, 2 * applied + 2);  // counted, not applying

    const uint64_t tau = v_apply - v_read;
    // The update numbered v_apply records its minibatch loss when it is a logged step, as the
    // sync loop does, so the log shows the loss at exactly those updates.
    if (c.log_every > 0 && v_apply % static_cast<uint64_t>(c.log_every) == 0) {
      const uint64_t k = v_apply / static_cast<uint64_t>(c.log_every);
      shm::LossRecord& rec = h->loss_ring[k % shm::kLossRing];
      rec.loss = loss;
      shm::StoreRelease<uint64_t>(rec.tag, k + 1);
    }
    shm::AddRelaxed<uint64_t>(self->steps_total, 1);
    shm::AddRelaxed<uint64_t>(self->staleness_sum, tau);
    shm::AddRelaxed<uint64_t>(self->staleness_hist[shm::StalenessBucket(tau)], 1);
    const int64_t took = shm::MonotonicNs() - t0;
    shm::AddRelaxed<uint64_t>(self->step_duration_hist[shm::DurationBucket(took)], 1);
    shm::AddRelaxed<uint64_t>(self->step_duration_ns_total, static_cast<uint64_t>(took));
    shm::StoreRelaxed(h->last_loss, loss);
    if (b % kGradNormEvery == 0) {
      double sq = 0;
      for (const float g : grad) sq += static_cast<double>(g) * g;
      shm::StoreRelaxed(h->last_grad_norm, std::sqrt(sq));
    }
    const double ema = shm::LoadRelaxed(self->loss_ema);
    shm::StoreRelaxed(self->loss_ema,
                      b == 0 ? loss : (1 - kLossEmaWeight) * ema + kLossEmaWeight * loss);
    shm::AddRelaxed<uint64_t>(self->compute_ns_total,
                              static_cast<uint64_t>(shm::MonotonicNs() - t0));
  }
}

}  // namespace shmtrain::worker
