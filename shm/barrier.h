// The phase barrier of sync mode: "wait until every rank has published phase >= target".
//
// Each rank publishes a monotonic phase number in its own WorkerBlock (layout.h); a wait
// scans the P phases. There is no shared arrival counter to reset, so a rank that dies at any
// point leaves nothing inconsistent: its phase is simply what it last published, and a
// replacement continues from there. That is what makes every phase redoable.
//
// Waking: a rank that publishes and then sees every phase complete bumps the futex word
// Header.wake_seq and wakes the sleepers (only if some are counted in Header.waiters). With
// seq_cst on the phases, wake_seq and waiters, either the completing rank sees a waiter's
// count, or the waiter sees the completed phases before it sleeps; and a waiter sleeps only
// while wake_seq still has the value it read before checking, so no wake-up is lost.
//
// Every wait has a deadline, sleeps in slices of at most 100 ms (refreshing the heartbeat
// and checking that the master lives), and ends early when the master raises abort_epoch.
#pragma once

#include <cstdint>

#include "shm/futex.h"
#include "shm/layout.h"

namespace shmtrain::shm {

class PhaseBarrier {
 public:
  enum class Result { kOk, kAborted, kTimeout, kOrphaned };

  // self = this rank's block; epoch = the abort_epoch this worker started under.
  PhaseBarrier(Header* header, const WorkerBlock* blocks, int workers, WorkerBlock* self,
               uint32_t epoch);

  // Publishes this rank's phase and wakes the waiters if the phase is now complete.
  void Arrive(uint64_t phase);
  // Waits until every rank's phase >= target; deadline_ns is absolute CLOCK_MONOTONIC.
  Result Wait(uint64_t target, int64_t deadline_ns);
  // Waits until the master has released checkpoint step `step` (Header.released_step), with
  // the same deadline, abort and orphan rules as Wait().
  Result WaitReleased(int64_t step, int64_t deadline_ns);
  // Waits until the master has copied out validation snapshot `k` (Header.eval_ack >= k),
  // same rules.
  Result WaitEvalAck(int64_t k, int64_t deadline_ns);
  // Gradient clipping (sync): publishes this rank's share `sq` of |g|^2 for `step`
  // (WorkerBlock.grad_sq, then grad_sq_step) and wakes the waiters if every rank has now
  // published it. A redone phase publishes the same value again: it is a pure function of the
  // slots.
  void PublishNorm(int64_t step, double sq);
  // Waits until every rank has published its share for `step`, same rules as Wait(); then
  // *sq = the shares summed in rank order (every rank adds the same numbers in the same
  // order, so all get the same bits).
  Result WaitNorms(int64_t step, int64_t deadline_ns, double* sq);
  // Batch norm (sync): this rank's statistics of crossing `seq` are in its slot (layout.h);
  // wakes the waiters (the peers; several hosts: the master's combiner) if every rank's now
  // are. A replacement redoing a step publishes its
  // crossings again, the same values under the same numbers.
  void PublishStats(uint64_t seq);
  // Waits until every rank has published crossing `seq` or a later one, same rules as Wait().
  Result WaitStats(uint64_t seq, int64_t deadline_ns);
  // Several hosts with batch norm: waits until the combiner has published crossing `seq`'s
  // sums over every host in GStats (Header.stats_combined_seq >= seq), same rules as Wait().
  Result WaitStatsCombined(uint64_t seq, int64_t deadline_ns);
  // Several hosts: this rank's slice of the host sum HS of `step` is written; wakes the waiters
  // (the master's combiner) when every rank's is.
  void PublishHostSum(int64_t step);
  // Several hosts: waits until the combiner has published GS of `step` (Header.combined_step
  // >= step), same rules as Wait().
  Result WaitCombined(int64_t step, int64_t deadline_ns);
  // Wait time accumulated by every wait above (Wait() and the others), in ns.
  uint64_t waited_ns() const { return waited_ns_; }

 private:
  bool Complete(uint64_t target) const;
  bool NormsComplete(int64_t step) const;
  template <class Done>
  Result WaitUntil(Done done_now, int64_t deadline_ns);
  Header* h_;
  const WorkerBlock* blocks_;  // every rank's, read only: a rank writes its own through self_
  int workers_;
  WorkerBlock* self_;
  uint32_t epoch_;
  uint64_t waited_ns_ = 0;
  int64_t spin_budget_ns_;  // current spin before sleeping, adapted per wait (<= config)
};

// The sleeping side of every wait on Header.wake_seq: a rank's (PhaseBarrier) and the master's
// combiner's (master/hosts/combiner.cc). Each round counts the waiter in Header.waiters, reads
// wake_seq, then asks look(): kWakeDone ends the wait (look() keeps what it found); any other
// value is the absolute CLOCK_MONOTONIC time to sleep until, a deadline or the end of a slice.
// The sleep ends early when wake_seq moves from the value read before look() asked; a wake-up
// without a reason (spurious, a signal) is harmless, as the next round looks again. After each
// sleep, no longer counted, awake() runs: true ends the wait. seq_cst throughout, as the
// protocol above needs.
inline constexpr int64_t kWakeDone = -1;
template <class Look, class Awake>
void SleepOnWakeSeq(Header* h, Look look, Awake awake) {
  for (;;) {
    AddSeqCst<uint32_t>(h->waiters, 1);
    const uint32_t seq = LoadSeqCst(h->wake_seq);
    const int64_t until = look();
    if (until != kWakeDone) FutexWaitUntil(&h->wake_seq, seq, until);
    SubSeqCst<uint32_t>(h->waiters, 1);
    if (until == kWakeDone || awake()) return;
  }
}

// Master side: raise the abort word and wake every waiter. Only the master calls this.
void RaiseAbort(Header* header);
// Master side: let the ranks paused before checkpoint step `step` go on.
void ReleaseCheckpoint(Header* header, int64_t step);
// Master side: snapshot k is copied out; E[k%R] (R = RunConfig::snapshots, which the master
// sets to 2..16, exactly 2 with early stopping) may be reused. A stop (stop_eval) must be
// stored before the ack that lets ranks past the eval it names.
void AckEval(Header* header, int64_t k);
void RequestStop(Header* header, int64_t stop_eval);
// Several hosts: every rank has written its slice of HS for `step` (the combiner waits for it;
// a rank that completes the set wakes it).
bool HostSumsComplete(const WorkerBlock* blocks, int workers, int64_t step);
// Master side, several hosts: GS and the totals of `step` are written; lets the ranks update.
void PublishCombined(Header* header, int64_t step, int64_t samples, double loss_sum);
// Every rank has published batch norm crossing `seq` or a later one (WorkerBlock.stats_seq).
bool StatsComplete(const WorkerBlock* blocks, int workers, uint64_t seq);
// Master side, several hosts with batch norm: crossing `seq`'s place in GStats is written;
// lets the ranks on.
void PublishStatsCombined(Header* header, uint64_t seq);
// The current abort epoch (a worker records it when it starts).
uint32_t LoadAbortEpoch(const Header& header);

}  // namespace shmtrain::shm
