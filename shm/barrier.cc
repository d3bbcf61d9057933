#include "shm/barrier.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>

#include "shm/futex.h"

namespace shmtrain::shm {
namespace {

constexpr int64_t kSliceNs = 100'000'000;  // longest single sleep: heartbeat and master checks
constexpr int64_t kMinSpinNs = 2'000;      // the adaptive spin never drops below this

// The waking side of the protocol (barrier.h): move wake_seq, then wake the sleepers; a rank
// only when some are counted (most arrivals find none and skip the system call), the master
// always (its wakes are rare).
void WakeCounted(Header* h) {
  AddSeqCst<uint32_t>(h->wake_seq, 1);
  if (LoadSeqCst(h->waiters) > 0) FutexWake(&h->wake_seq, INT_MAX);
}
void WakeAll(Header* h) {
  AddSeqCst<uint32_t>(h->wake_seq, 1);
  FutexWake(&h->wake_seq, INT_MAX);
}

}  // namespace

PhaseBarrier::PhaseBarrier(Header* header, const WorkerBlock* blocks, int workers,
                           WorkerBlock* self, uint32_t epoch)
    : h_(header),
      blocks_(blocks),
      workers_(workers),
      self_(self),
      epoch_(epoch),
      spin_budget_ns_(header->config.spin_ns) {}

bool PhaseBarrier::Complete(uint64_t target) const {
  for (int r = 0; r < workers_; ++r) {
    if (LoadPhase(blocks_[r]) < target) return false;
  }
  return true;
}

void PhaseBarrier::Arrive(uint64_t phase) {
  StorePhase(*self_, phase);
  if (workers_ == 1 || !Complete(phase)) return;
  WakeCounted(h_);
}

PhaseBarrier::Result PhaseBarrier::Wait(uint64_t target, int64_t deadline_ns) {
  return WaitUntil([&] { return Complete(target); }, deadline_ns);
}

PhaseBarrier::Result PhaseBarrier::WaitReleased(int64_t step, int64_t deadline_ns) {
  return WaitUntil([&] { return LoadSeqCst(h_->released_step) >= step; }, deadline_ns);
}

PhaseBarrier::Result PhaseBarrier::WaitEvalAck(int64_t k, int64_t deadline_ns) {
  return WaitUntil([&] { return LoadSeqCst(h_->eval_ack) >= k; }, deadline_ns);
}

bool PhaseBarrier::NormsComplete(int64_t step) const {
  for (int r = 0; r < workers_; ++r) {
    if (LoadSeqCst(blocks_[r].grad_sq_step) < step) return false;
  }
  return true;
}

void PhaseBarrier::PublishNorm(int64_t step, double sq) {
  StoreRelaxed(self_->grad_sq, sq);
  StoreSeqCst(self_->grad_sq_step, step);
  if (workers_ == 1 || !NormsComplete(step)) return;
  WakeCounted(h_);
}

PhaseBarrier::Result PhaseBarrier::WaitNorms(int64_t step, int64_t deadline_ns, double* sq) {
  const Result r = WaitUntil([&] { return NormsComplete(step); }, deadline_ns);
  *sq = 0;
  for (int q = 0; q < workers_; ++q) *sq += LoadRelaxed(blocks_[q].grad_sq);
  return r;
}

bool StatsComplete(const WorkerBlock* blocks, int workers, uint64_t seq) {
  for (int r = 0; r < workers; ++r) {
    if (LoadSeqCst(blocks[r].stats_seq) < seq) return false;
  }
  return true;
}

void PhaseBarrier::PublishStats(uint64_t seq) {
  StoreSeqCst(self_->stats_seq, seq);
  // One rank on one host: nobody waits for it. Several hosts: the combiner does.
  if ((workers_ == 1 && h_->config.hosts == 1) || !StatsComplete(blocks_, workers_, seq)) return;
  WakeCounted(h_);
}

PhaseBarrier::Result PhaseBarrier::WaitStats(uint64_t seq, int64_t deadline_ns) {
  return WaitUntil([&] { return StatsComplete(blocks_, workers_, seq); }, deadline_ns);
}

PhaseBarrier::Result PhaseBarrier::WaitStatsCombined(uint64_t seq, int64_t deadline_ns) {
  return WaitUntil([&] { return LoadSeqCst(h_->stats_combined_seq) >= seq; }, deadline_ns);
}

void PublishStatsCombined(Header* header, uint64_t seq) {
  StoreSeqCst(header->stats_combined_seq, seq);
  WakeCounted(header);
}

void PhaseBarrier::PublishHostSum(int64_t step) {
  StoreSeqCst(self_->host_sum_step, step);
  if (!HostSumsComplete(blocks_, workers_, step)) return;
  WakeCounted(h_);
}

PhaseBarrier::Result PhaseBarrier::WaitCombined(int64_t step, int64_t deadline_ns) {
  return WaitUntil([&] { return LoadSeqCst(h_->combined_step) >= step; }, deadline_ns);
}

bool HostSumsComplete(const WorkerBlock* blocks, int workers, int64_t step) {
  for (int r = 0; r < workers; ++r) {
    if (LoadSeqCst(blocks[r].host_sum_step) < step) {
      return false;
    }
  }
  return true;
}

void PublishCombined(Header* header, int64_t step, int64_t samples, double loss_sum) {
  header->combined_samples = samples;
  header->combined_loss = loss_sum;
  StoreSeqCst(header->combined_step, step);
  WakeCounted(header);
}

template <class Done>
PhaseBarrier::Result PhaseBarrier::WaitUntil(Done complete, int64_t deadline_ns) {
  if (complete()) {
    AddRelaxed<uint64_t>(self_->barrier_wait_hist[0], 1);  // a wait of zero
    return Result::kOk;
  }
  const int64_t start = MonotonicNs();
  auto done = [&](Result r) {
    const int64_t waited = MonotonicNs() - start;
    waited_ns_ += static_cast<uint64_t>(waited);
    // Counters only ever grow, so they stay monotonic across a replaced incarnation.
    AddRelaxed<uint64_t>(self_->barrier_wait_ns_total, static_cast<uint64_t>(waited));
    AddRelaxed<uint64_t>(self_->barrier_wait_hist[DurationBucket(waited)], 1);
    return r;
  };
  // Spin first: a futex sleep and wake costs more than a short step. The budget adapts: it
  // doubles after a spin that saw the phase complete and halves after one that had to
  // sleep, so a worker whose peers share its core (the spin only delays them) soon sleeps
  // at once, and one whose peers run beside it soon spins long enough to catch them.
  if (spin_budget_ns_ > 0) {
    const int64_t spin_until = start + spin_budget_ns_;
    while (MonotonicNs() < spin_until) {
      for (int i = 0; i < 64; ++i) {
        if (complete()) {
          spin_budget_ns_ = std::min(spin_budget_ns_ * 2, h_->config.spin_ns);
          return done(Result::kOk);
        }
        CpuRelax();
      }
    }
    spin_budget_ns_ = std::max(spin_budget_ns_ / 2, kMinSpinNs);
  }
  const auto master = static_cast<pid_t>(h_->config.master_pid);
  Result r = Result::kOk;
  const auto look = [&]() -> int64_t {
    if (complete()) {
      r = Result::kOk;
    } else if (LoadSeqCst(h_->abort_epoch) != epoch_) {
      r = Result::kAborted;
    } else {
      const int64_t now = MonotonicNs();
      if (now < deadline_ns && getppid() == master) return std::min(deadline_ns, now + kSliceNs);
      r = now >= deadline_ns ? Result::kTimeout : Result::kOrphaned;
    }
    return kWakeDone;
  };
  SleepOnWakeSeq(h_, look, [&] {
    StoreRelaxed(self_->heartbeat_ns, MonotonicNs());
    return false;
  });
  return done(r);
}

void RaiseAbort(Header* header) {
  AddSeqCst<uint32_t>(header->abort_epoch, 1);
  WakeAll(header);
}

void ReleaseCheckpoint(Header* header, int64_t step) {
  StoreSeqCst(header->released_step, step);
  WakeAll(header);
}

void AckEval(Header* header, int64_t k) {
  StoreSeqCst(header->eval_ack, k);
  WakeAll(header);
}

void RequestStop(Header* header, int64_t stop_eval) {
  StoreSeqCst(header->stop_eval, stop_eval);
}

uint32_t LoadAbortEpoch(const Header& header) {
  return LoadSeqCst(header.abort_epoch);
}

}  // namespace shmtrain::shm
