// The shared-memory segment: a versioned binary contract between the master and the workers.
//
// Layout (every offset from the segment's first byte, every region 64-byte aligned):
//
//   Header                   identity, sizes, offsets, RunConfig, control words, loss ring
//   WorkerBlock[P]           one per rank: phase, heartbeat, pid, counters
//   X  float[rows*features]  the dataset, row-major          (master writes once, then RO)
//   Y  float[rows]           targets / class indices         (master writes once, then RO)
//   W0, W1  float[n]         parameters. Sync: double-buffered (step t reads W[t%2], writes
//                            W[(t+1)%2]). Async: W0 alone, which every worker reads and writes
//                            (nn::SharedAccess, relaxed); W1 is unused.
//   S[k]0, S[k]1 float[n]    optimizer state k < K, double-buffered like W (K = 0..4 by the
//                            optimizer: sgd with momentum 1, adam 2; nn/optimizer.h)
//   Slot[P]                  SlotHeader + float[n] gradient  (rank r writes slot r; async:
//                            the float[n] is rank r's MeanSquare, dc-asgd-a), then, with
//                            batch norm, double[stats_count]: rank r's statistics of the
//                            step (sync: the sums of its rows at each crossing, nn/layer.h,
//                            StatsCrossing; published by its stats_seq)
//   HS, GS  float[n]         several hosts only (hosts > 1): HS this host's sum of the slots
//                            (rank r writes its slice; with P = 1 HS is slot 0's gradient
//                            itself, not a region of its own), GS the sum over every host's
//                            HS, in host order (the master's combiner writes it,
//                            master/hosts/combiner.h)
//   GStats  double[stats_count]  several hosts with batch norm only: each crossing's sums over
//                            every rank of every host (rank order, then host order), at the
//                            crossing's place among the model's statistics (the combiner
//                            writes it, published by stats_combined_seq)
//   E[R]    float[n]         sync validation snapshots, a ring (only when eval_every > 0)
//
// Why offsets and not pointers: each process maps the segment at its own address, so a
// pointer stored by one process means nothing in another. Every reference inside the
// segment is an offset from its base; Segment (segment.h) turns offsets into pointers.
//
// Why plain integers accessed through std::atomic_ref and not std::atomic members: the
// structs stay trivially copyable and standard-layout, so their bytes are the contract and a
// layout test can pin them. Every concurrent access to a word of the header, a WorkerBlock or
// a loss record's tag goes through a named accessor at the end of this file, which says its
// memory order and why. The floats of W that async workers share are the one other place a
// std::atomic_ref is built on the segment: nn::SharedAccess (nn/update.h) loads and stores
// them relaxed, and batch norm's num_batches_tracked, a float in W, is counted up by a relaxed
// fetch_add (worker/async_loop.cc, MoveRunningStats); the master's exchange threads and its
// reads of W use nn::SharedAccess too. Plain data is published by such a word: a slot (its
// header and gradient) by the phase, a slot's statistics by its rank's stats_seq, a slice of
// a snapshot E by its rank's snap_eval, HS by host_sum_step, GS and
// combined_samples/combined_loss by combined_step, GStats by stats_combined_seq, a loss
// record's loss by its tag; it is written before the word's store and read after a load that
// sees it. Writes before any worker starts, or after every worker is reaped, are plain.
//
// Who writes what:
//   Header identity/offsets/config  master, in the prototype it creates the segment from
//                                   (Segment::Create seals the config's fingerprint);
//                                   read-only afterwards.
//   Header.abort_epoch              master only (seq_cst); workers read.
//   Header.wake_seq                 futex word (seq_cst); bumped by whoever makes a waited-for
//                                   condition true: a rank completing a phase, the norms, a
//                                   crossing's statistics or the host sums; the master
//                                   releasing a checkpoint, acking an eval or aborting; the
//                                   combiner publishing GS or a crossing's GStats. Waiters
//                                   sleep on it (the ranks, and the combiner).
//   Header.waiters                  waiters increment before sleeping, decrement after.
//   Header.loss_ring                sync: rank 0 (during the update phase); async: the worker
//                                   whose update has the logged version. Master reads.
//   Header.step1_end_ns, last_end_ns  sync: any rank: the first to pass the run's first step
//                                   sets step1_end_ns; each rank that passes the last step, or
//                                   stops early, stores last_end_ns, and the last store stays;
//                                   master reads. Async: unused.
//   WorkerBlock[r]                  rank r (its current incarnation) writes; master and peers
//                                   read. The master writes incarnation and attached = 0 before
//                                   a spawn, and, while rank r is not running, settles its
//                                   commit and ticket after a death, or hands it an owed
//                                   ticket (through master/unit/segment_writes.h: the
//                                   supervisor, and the async DeathRules, master/kinds/async.cc).
//   Slot[r]                         rank r writes in phase 1; every rank reads in phase 2;
//                                   several hosts: the master's combiner reads its header
//                                   (samples, loss) once HS of the step is whole.
//   Slot[r]'s statistics, stats_seq  rank r, at each crossing of its gradient phase (the
//                                   values, then stats_seq, seq_cst); every rank reads them
//                                   at the crossing and again in phase 2 (the running
//                                   statistics, nn/batch_norm.h); several hosts: the master's
//                                   combiner reads them instead, and the ranks read GStats.
//                                   Crossing k (from 1) of step t
//                                   is sequence number t * (stats_count + 1) + k, so numbers
//                                   grow with t; a slot's values are rewritten only at step
//                                   t + 1, after every rank has passed phase 2t + 2.
//   HS slice r, host_sum_step        rank r, after its slice of the step's host sum is in HS.
//   GS, combined_*                   the master's combiner, once every host's HS of the step
//                                    arrived; combined_step published last (seq_cst).
//   GStats, stats_combined_seq       several hosts with batch norm: the master's combiner, at
//                                    each crossing, once every rank of this host has
//                                    published it (stats_seq) and every host's sums arrived;
//                                    the crossing's place in GStats, then stats_combined_seq =
//                                    its number (seq_cst). The ranks read that place after
//                                    seeing the number, and all of GStats in phase 2 (after
//                                    combined_step of the step, which the combiner publishes
//                                    after the step's last crossing). A place is rewritten
//                                    only at step t + 1's crossing, which no rank of this host
//                                    reaches before every rank has passed phase 2t + 2.
//   E[k%R]                          sync: each rank copies its slice of W[t%2] at eval step t
//                                   = k * eval_every; the master copies it out, then acks k.
//   Header.eval_ack, stop_eval      master only (seq_cst); workers read (eval_ack seq_cst,
//                                   stop_eval acquire).
//
// A process that dies mid-write can leave torn floats in what it writes: sync, its own slot or
// its own slice of W[(t+1)%2] (redone by its replacement); async, the shared W0 (a torn
// update, counted by master/kinds/async.cc). Never in a word someone else owns; every word
// others wait on (phase and the other seq_cst words) is a single aligned store of at most 64
// bits, which cannot tear.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shmtrain/model_spec.h"
#include "shmtrain/optim_config.h"

namespace shmtrain::shm {

// "SHMTRAIN" read as a little-endian 64-bit integer.
inline constexpr uint64_t kMagic = 0x4E494152544D4853ull;
// Bump on every change to any struct in this file or to the meaning of a field.
inline constexpr uint32_t kAbiVersion = 17;
inline constexpr size_t kCacheLine = 64;
inline constexpr int kMaxWorkers = 256;
// Loss records kept for the master's log (by log index modulo this).
inline constexpr int kLossRing = 4096;

inline constexpr uint32_t kDtypeFloat32 = 0;

// Async staleness histogram: bucket k counts updates with tau <= kStalenessBounds[k] (and above
// the previous bound); the last bucket is everything larger.
inline constexpr int kStalenessBuckets = 12;
inline constexpr uint64_t kStalenessBounds[kStalenessBuckets - 1] = {0,  1,  2,   4,   8,  16,
                                                                      32, 64, 128, 256, 512};
// Duration histograms (step time, barrier wait): bucket k counts durations <= the bound (in
// seconds) and above the previous one; the last bucket is everything longer.
inline constexpr int kDurationBuckets = 20;
inline constexpr double kDurationBounds[kDurationBuckets - 1] = {
    1e-5,   2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
    2.5e-2, 5e-2,   0.1,  0.25, 0.5,    1,    2.5,  5,      10};
inline int DurationBucket(int64_t ns) {
  const double s = static_cast<double>(ns) * 1e-9;
  int k = 0;
  while (k < kDurationBuckets - 1 && s > kDurationBounds[k]) ++k;
  return k;
}

inline int StalenessBucket(uint64_t tau) {
  int k = 0;
  while (k < kStalenessBuckets - 1 && tau > kStalenessBounds[k]) ++k;
  return k;
}

// Async across hosts: the updates of a run of `total` that host h of `hosts` applies (its
// tickets u with u * hosts + h < total), and the minibatch of the stream its ticket u trains on.
// One host: all of them, and minibatch u.
inline int64_t AsyncHostUpdates(int64_t total, int hosts, int h) {
  return total > h ? (total - h + hosts - 1) / hosts : 0;
}

// Everything a worker needs to know about the run. Written whole by the master before it
// creates the segment, sealed there by the header's config_fingerprint, and never changed
// afterwards. Enum fields hold the values of include/shmtrain/*.h.
struct RunConfig {
  uint32_t mode;  // Mode
  uint32_t loss;  // Loss
  // The model (include/shmtrain/model_spec.h): one sample's input shape (c, h, w) and the
  // canonical model text (nn/layer.h), NUL-terminated.
  int64_t input_shape[3];
  char model[kMaxModelText];
  uint32_t workers;   // P
  // Several hosts (master/hosts/hosts.h): this segment serves host `host_index` of `hosts`. Sync:
  // its rank r is worker host_index * P + r of hosts * P for the split of the data, and the
  // update waits for the combiner's GS. Async (master/hosts/param_server.h): total_steps is this
  // host's share of the run's updates and its ticket u trains on minibatch
  // u * hosts + host_index of the stream (AsyncMinibatch). hosts = 1: a single-host run, no HS
  // and no GS.
  uint32_t hosts;
  uint32_t host_index;
  uint32_t precision;  // ComputeType: the inputs of the layers' products (nn/gemm.h)
  uint64_t param_count;
  int64_t rows;
  int64_t features;
  int64_t batch;        // 0 = full batch
  int64_t total_steps;  // the run ends after this many updates
  int64_t log_every;    // the loss of every update t with t % log_every == 0 goes into the
                        // loss ring (sync: rank 0; async: the worker of update t)
  uint64_t seed;
  double barrier_timeout_s;
  int64_t spin_ns;     // spin this long at a barrier before sleeping (0 when oversubscribed)
  int64_t master_pid;  // a worker whose parent is not this pid has been orphaned
  // Test hook (worker/fault.h): rank fault_rank, at step (sync) or batch (async) fault_step,
  // at point fault_point, dies while its incarnation < fault_incarnations. -1/0 = off.
  int32_t fault_rank;
  uint32_t fault_point;
  int64_t fault_step;
  // Async mode (nn/update.h): rule (AsyncRule), its lambda, MeanSquare decay and epsilon;
  // a gradient more than max_staleness versions old is dropped (-1 = never).
  uint32_t rule;
  uint32_t fault_incarnations;
  double lambda;
  double ms_decay;
  double epsilon;
  int64_t max_staleness;
  // Checkpoints. Sync: every rank pauses before step t (t % checkpoint_every == 0, t > first)
  // until the master has copied W[t%2] and the optimizer states S[k][t%2] and set
  // released_step >= t. Async: a rank
  // holding ticket u waits before computing it while the checkpoint at the multiple below u
  // is owed (worker/async_loop.cc). 0 = never.
  int64_t checkpoint_every;
  int64_t first_step;  // where the run starts: 0, or the step of the checkpoint it resumed
  // Validation (sync): before step t = k * eval_every (first < t < total_steps), every rank
  // copies its slice of W[t%2] into E[k % snapshots] once eval_ack >= k - snapshots, then
  // publishes snap_eval = k. eval_every 0 = no validation snapshots (async: the master reads
  // W itself). snapshots: the ring's length, >= 2 (exactly 2 with early stopping).
  int64_t eval_every;
  int64_t snapshots;
  // The update (include/shmtrain/optim_config.h): optimizer, hyper-parameters, weight decay,
  // clipping, schedule. With clip_norm > 0 (sync) every rank waits, between its reduce and its
  // update, until every rank has published its slice's share of |g|^2 for the step
  // (WorkerBlock.grad_sq_step), so that all scale by the same global norm.
  OptimConfig optim;
  // --augment (data/augment.h, AugmentSpec::Encode): the augmentation of each training row a
  // worker reads, one item a word in the order given, unused words 0; all 0 = none (the rows
  // are read in place).
  uint32_t augment[4];
  // Batch norm: the doubles of the model's statistics (nn::StatsCount); 0 without batch norm.
  uint64_t stats_count;
};

// Async: the minibatch of the stream that this host's update ticket u trains on (and whose
// place in the learning-rate schedule it takes).
inline int64_t AsyncMinibatch(const RunConfig& c, int64_t ticket) {
  return ticket * static_cast<int64_t>(c.hosts) + static_cast<int64_t>(c.host_index);
}

// stop_eval when no stop is asked for.
inline constexpr int64_t kNoStop = INT64_MAX;

// One record of the loss ring, a sequence lock: its writer (sync: rank 0; async: the worker of
// the logged update) publishes log index k's loss with PublishLoss, and the master reads it
// with ReadLoss, which sees either that loss whole or that the record moved on (a writer
// kLossRing indices ahead overwrote it meanwhile).
struct LossRecord {
  uint64_t tag;
  double loss;
};

struct alignas(kCacheLine) Header {
  // ---- identity: checked by every worker before it touches anything else.
  uint64_t magic;
  uint32_t abi_version;
  uint32_t header_size;        // sizeof(Header)
  uint32_t worker_block_size;  // sizeof(WorkerBlock)
  uint32_t slot_header_size;   // sizeof(SlotHeader)
  uint32_t config_size;        // sizeof(RunConfig)
  uint32_t dtype;              // kDtypeFloat32
  uint64_t total_size;         // bytes of the whole segment
  int64_t creator_pid;
  uint64_t creator_start_time;  // field 22 of /proc/<pid>/stat: tells a reused pid apart
  // ConfigFingerprint(config) (shm/segment.h), sealed by Segment::Create over the config it
  // writes: a worker refuses a segment whose config no longer hashes to it. A check against
  // damage and stray writes, not a signature: a worker still bounds what it reads by the
  // config's sizes (worker/run_model.h).
  uint64_t config_fingerprint;

  // ---- offsets from the segment base.
  uint64_t blocks_offset;
  uint64_t x_offset;
  uint64_t y_offset;
  uint64_t params_offset[2];
  uint64_t state_offset[kMaxStates][2];  // optimizer state k of buffer b; 0 for k >= K
  uint64_t slots_offset;
  uint64_t slot_stride;  // bytes from one slot to the next
  uint64_t snapshot_offset;  // 0 when eval_every == 0
  uint64_t snapshot_stride;  // bytes from one snapshot to the next
  uint64_t host_sum_offset;    // HS; 0 when hosts == 1
  uint64_t global_sum_offset;  // GS; 0 when hosts == 1
  uint64_t global_stats_offset;  // GStats; 0 when hosts == 1 or stats_count == 0

  RunConfig config;

  // ---- control words, a cache line for each group (written by different parties).
  alignas(kCacheLine) uint32_t abort_epoch;  // master only
  alignas(kCacheLine) uint32_t wake_seq;     // futex word
  uint32_t waiters;
  // Checkpoints (sync and async): the master raises released_step (seq_cst) and bumps
  // wake_seq once it has copied a paused step; ranks wait for it like a barrier.
  int64_t released_step;
  // Async: param_version counts applied updates (advanced after each apply, release);
  // claimed hands out update tickets so that exactly total_steps updates are applied.
  alignas(kCacheLine) uint64_t param_version;
  alignas(kCacheLine) uint64_t claimed;
  // Validation and early stopping, written by the master only (seq_cst: AckEval,
  // RequestStop). Workers wait for eval_ack through the barrier (seq_cst) and read stop_eval
  // with an acquire load.
  // eval_ack: the last eval index whose snapshot the master has copied out (with early
  // stopping: copied and evaluated). stop_eval: sync, every rank stops before the eval step of
  // index >= stop_eval (all ranks read it after waiting for eval_ack >= k - R, and the master
  // writes it before acking beyond that, so all agree on the step); async, any value but
  // kNoStop ends the run at the next ticket.
  alignas(kCacheLine) int64_t eval_ack;
  int64_t stop_eval;
  // The first step (sync) or update ticket (async) whose loss or gradient was non-finite, or
  // kNoStop. Any worker lowers it (RecordDivergence) and then exits kWorkerDiverged; the
  // master reads it to name the step.
  int64_t diverged_step;

  // Several hosts: GS holds the sum of step combined_step over every host, of
  // combined_samples rows whose losses sum to combined_loss (the same bits on every host).
  // The combiner writes GS and the totals, then combined_step (seq_cst) and wakes the waiters.
  // Initially first_step - 1.
  alignas(kCacheLine) int64_t combined_step;
  int64_t combined_samples;
  double combined_loss;
  // Several hosts with batch norm: the number of the last crossing (WorkerBlock.stats_seq)
  // whose sums over every host are in GStats. Written by the combiner (seq_cst) after GStats,
  // then it wakes the waiters. Initially 0.
  uint64_t stats_combined_seq;

  // ---- latest values for the metrics (double bits, relaxed): sync, rank 0 after each step;
  // async, any worker after an update.
  alignas(kCacheLine) double last_loss;
  double last_grad_norm;

  // ---- progress (sync), written by any rank: the first to complete the run's first step sets
  // step1_end_ns (StoreIfZero); each rank completing the last step (or stopping early) stores
  // last_end_ns (relaxed; the last store stays, the values differ by a wake-up).
  alignas(kCacheLine) int64_t step1_end_ns;  // CLOCK_MONOTONIC when the first step completed
  int64_t last_end_ns;                       // ... when the last step completed
  LossRecord loss_ring[kLossRing];
};

struct alignas(kCacheLine) WorkerBlock {
  // Sync: 2t+1 once the gradient of step t is in the slot, 2t+2 once this rank's slice of
  // update t is written. Monotonic; the barrier waits on every rank's value. Async
  // (worker/async_loop.cc): 1 at the start gate (each incarnation), 2kN while paused before the
  // checkpoint at update kN, 2 * total_steps once no ticket is left.
  uint64_t phase;
  int64_t heartbeat_ns;  // CLOCK_MONOTONIC, refreshed every step and every wait slice
  int64_t pid;
  uint32_t incarnation;
  uint32_t attached;  // 1 once this incarnation validated the segment
  // Sync: the last eval index whose slice this rank copied into E[k%R] (release).
  int64_t snap_eval;
  // Counters for metrics (relaxed; monotonic across incarnations).
  alignas(kCacheLine) uint64_t steps_total;
  uint64_t samples_total;
  uint64_t barrier_wait_ns_total;
  uint64_t compute_ns_total;  // sync: the gradient phase; async: a whole update
  uint64_t reduce_ns_total;   // sync: the reduce + update phase
  // Async (relaxed): commit = 2 * (updates this rank applied) + applying, where applying is 1
  // from just before its first parameter write until the update is counted. Flag and count
  // share one word so that "counted, flag down" is a single store: a dead rank's odd commit
  // means an interrupted update (torn, or applied with its version advanced but not counted;
  // the master tells them apart at the end from param_version). Then gradients dropped as
  // too stale, the sum of tau, and a moving average of the minibatch loss (as double bits).
  uint64_t commit;
  uint64_t dropped_total;
  uint64_t staleness_sum;
  // Async: the update ticket this rank holds (claimed, its minibatch not yet applied), or -1.
  // Written by the rank (relaxed); the master clears it when a death interrupted the apply,
  // else a replacement takes the ticket over, so no minibatch is lost to a death. Once every
  // rank has finished with updates still owed, the master writes a fresh ticket here before
  // it restarts the rank (AsyncDeaths::AllFinished).
  int64_t ticket;
  alignas(kCacheLine) uint64_t staleness_hist[kStalenessBuckets];
  double loss_ema;
  uint64_t batches;  // async: minibatches drawn so far (the next batch of this rank's stream)
  // Sync: this rank's share of the squared norm of step `grad_sq_step`'s mean gradient.
  // With --clip-norm the rank stores grad_sq, then grad_sq_step (seq_cst, PublishNorm), and
  // WaitNorms loads grad_sq_step first; without, both are relaxed and published by phase 2t+2
  // (rank 0 reads grad_sq after its wait for it). grad_sq_step is initially -1.
  double grad_sq;
  int64_t grad_sq_step;
  // Several hosts: the last step whose slice of HS this rank has written (seq_cst, waking the
  // combiner when it completes the set). Initially -1.
  int64_t host_sum_step;
  // Sync with batch norm: the sequence number of the last crossing whose statistics this rank
  // has written into its slot (seq_cst; the layout of Slot above). Initially 0.
  uint64_t stats_seq;
  // Sync with batch norm: the time this rank waited in its crossings (relaxed; a part of
  // barrier_wait_ns_total): what the statistics across workers cost.
  uint64_t crossing_wait_ns_total;
  // Durations (relaxed counters): every barrier wait (sync; async, the start gate's and the
  // checkpoint pauses'); every step as rank 0 sees it (sync) or every update of this rank
  // (async).
  alignas(kCacheLine) uint64_t barrier_wait_hist[kDurationBuckets];
  uint64_t step_duration_hist[kDurationBuckets];
  uint64_t step_duration_ns_total;
};

// Precedes each rank's gradient. The gradient itself starts kCacheLine bytes after it.
struct alignas(kCacheLine) SlotHeader {
  int64_t step;      // the step whose gradient the slot holds
  int64_t samples;   // rows in this rank's share
  double loss_sum;   // sum of the per-sample loss over the share
};

// ---- what the layout relies on, each with its reason.
static_assert(std::is_trivially_copyable_v<Header> && std::is_standard_layout_v<Header>,
              "the header's bytes are the contract: no vtables, no hidden members");
static_assert(std::is_trivially_copyable_v<WorkerBlock> && std::is_standard_layout_v<WorkerBlock>,
              "worker blocks are plain bytes shared between processes");
static_assert(std::is_trivially_copyable_v<SlotHeader>, "slots are plain bytes");
// Every type an atomic_ref is built on in the segment: the words below (uint64_t, int64_t,
// uint32_t, double) and W's floats, which every async update loads and stores (nn::SharedAccess)
// and whose batch norm count it adds to. A type that is not lock-free would be guarded by a
// lock in the standard library's process-private table: another process would not see it, and
// a holder that dies would leave it held. Lock-free at most 8 bytes is also one plain load,
// which writes nothing: the load accessors below may take a const view's word (see there).
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free &&
                  std::atomic_ref<int64_t>::is_always_lock_free &&
                  std::atomic_ref<uint32_t>::is_always_lock_free &&
                  std::atomic_ref<double>::is_always_lock_free &&
                  std::atomic_ref<float>::is_always_lock_free,
              "a lock inside an atomic would be process-private and die with its holder");
static_assert(std::atomic_ref<uint64_t>::required_alignment == alignof(uint64_t) &&
                  std::atomic_ref<int64_t>::required_alignment == alignof(int64_t) &&
                  std::atomic_ref<uint32_t>::required_alignment == alignof(uint32_t) &&
                  std::atomic_ref<double>::required_alignment == alignof(double) &&
                  std::atomic_ref<float>::required_alignment == alignof(float),
              "the shared words are plain members and floats at their natural alignment, which "
              "must be all an atomic_ref asks");
static_assert(alignof(WorkerBlock) == kCacheLine && sizeof(WorkerBlock) % kCacheLine == 0,
              "each rank's block on its own cache lines: no false sharing between ranks");
static_assert(sizeof(SlotHeader) == kCacheLine, "the gradient starts one cache line in");
static_assert(sizeof(WorkerBlock::phase) == 8 && offsetof(WorkerBlock, phase) % 8 == 0,
              "a phase is one aligned 64-bit store: a rank that dies cannot leave it torn");
static_assert(sizeof(Header::wake_seq) == 4 && offsetof(Header, wake_seq) % 4 == 0,
              "futex(2) waits on an aligned 32-bit word");
static_assert(offsetof(Header, abort_epoch) % kCacheLine == 0 &&
                  offsetof(Header, wake_seq) % kCacheLine == 0 &&
                  offsetof(Header, param_version) % kCacheLine == 0 &&
                  offsetof(Header, claimed) % kCacheLine == 0 &&
                  offsetof(Header, eval_ack) % kCacheLine == 0 &&
                  offsetof(Header, combined_step) % kCacheLine == 0,
              "each group of control words starts a cache line of its own: its writers do not "
              "share a line with another group's");
static_assert(sizeof(float) == 4, "parameters are IEEE float32");
static_assert(std::endian::native == std::endian::little, "the magic is read little-endian");

// ---- the named accessors for every concurrent word.
//
// Loads take a const reference, so that a holder of the read-only view (a const Segment,
// shm/segment.h, whose pointers are to const) can read every word, and build their atomic_ref
// on a const_cast of it: C++20's std::atomic_ref<T> needs a non-const T, and the load writes
// nothing (lock-free, at most 8 bytes: asserted above) into a mapping that is writable anyway.
// Stores, adds and exchanges take a mutable reference, which a const view cannot give.

// Plain loads/stores of a published word: seq_cst, because the barrier's "last arriver
// wakes" argument needs one total order over the phase stores and the waiters counter.
inline uint64_t LoadPhase(const WorkerBlock& b) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(b.phase)).load();
}
inline void StorePhase(WorkerBlock& b, uint64_t v) { std::atomic_ref<uint64_t>(b.phase).store(v); }

// The other words that a futex waiter checks (released_step, eval_ack, grad_sq_step with
// --clip-norm, host_sum_step, combined_step, stats_seq, stats_combined_seq) and the futex
// protocol's own (wake_seq, waiters, abort_epoch): seq_cst, for the same reason as the phase
// words. The master stores stop_eval seq_cst too (RequestStop); it is read with LoadAcquire.
// The adds return the previous value.
template <class T>
inline T LoadSeqCst(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load();
}
template <class T>
inline void StoreSeqCst(T& v, T x) {
  std::atomic_ref<T>(v).store(x);
}
template <class T>
inline T AddSeqCst(T& v, T x) {
  return std::atomic_ref<T>(v).fetch_add(x);
}
template <class T>
inline T SubSeqCst(T& v, T x) {
  return std::atomic_ref<T>(v).fetch_sub(x);
}

// Counters, heartbeats and tickets: relaxed; nobody orders other data by them (claimed hands
// out each ticket once, which needs atomicity only). AddRelaxed returns the previous value.
template <class T>
inline T LoadRelaxed(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_relaxed);
}
template <class T>
inline void StoreRelaxed(T& v, T x) {
  std::atomic_ref<T>(v).store(x, std::memory_order_relaxed);
}
template <class T>
inline T AddRelaxed(T& v, T x) {
  return std::atomic_ref<T>(v).fetch_add(x, std::memory_order_relaxed);
}
// Publication with release/acquire: the data written before StoreRelease is visible after a
// LoadAcquire that sees it (loss ring tags, attached flags, incarnation, snap_eval; stop_eval's
// and param_version's loads).
template <class T>
inline T LoadAcquire(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_acquire);
}
template <class T>
inline void StoreRelease(T& v, T x) {
  std::atomic_ref<T>(v).store(x, std::memory_order_release);
}
// Async param_version: advanced (release) after an update's parameter writes, so a reader
// that acquires the version sees at least the updates it counts. Returns the previous value.
inline uint64_t AddRelease(uint64_t& v, uint64_t x) {
  return std::atomic_ref<uint64_t>(v).fetch_add(x, std::memory_order_release);
}

// Sets v to x if it is still 0 (step1_end_ns: the first rank past the first step wins, the
// others' values differ by a wake-up). seq_cst, as the other one-shot words.
inline void StoreIfZero(int64_t& v, int64_t x) {
  int64_t zero = 0;
  std::atomic_ref<int64_t>(v).compare_exchange_strong(zero, x);
}

// The loss record's sequence lock: the tag goes to 0 (nothing readable) before the loss is
// written and to k + 1 after it (release); a reader that sees k + 1, reads the loss, and sees
// k + 1 again after an acquire fence read a loss written entirely under tag k + 1.
inline void PublishLoss(LossRecord& rec, uint64_t k, double loss) {
  StoreRelaxed<uint64_t>(rec.tag, 0);
  std::atomic_thread_fence(std::memory_order_release);
  StoreRelaxed(rec.loss, loss);
  StoreRelease<uint64_t>(rec.tag, k + 1);
}
// The tag seen (below k + 1: not written yet, or being written (0), so look again later; above:
// overwritten), and with it, when it is k + 1 and stayed so, the loss of index k in *loss.
inline uint64_t ReadLoss(const LossRecord& rec, uint64_t k, double* loss) {
  const uint64_t tag = LoadAcquire(rec.tag);
  if (tag != k + 1) return tag;
  const double value = LoadRelaxed(rec.loss);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t again = LoadRelaxed(rec.tag);
  if (again != tag) return again;  // rewritten meanwhile: 0 while a writer is at it
  *loss = value;
  return tag;
}

// The async commit word: relaxed, as the master reads it only of exited ranks (waitpid orders).
inline uint64_t LoadCommit(const WorkerBlock& b) { return LoadRelaxed(b.commit); }

// Lowers diverged_step to `step` (relaxed: the worker's exit, seen by the master through
// waitpid, orders it before the master's read).
inline void RecordDivergence(Header* h, int64_t step) {
  std::atomic_ref<int64_t> d(h->diverged_step);
  int64_t cur = d.load(std::memory_order_relaxed);
  while (step < cur && !d.compare_exchange_weak(cur, step, std::memory_order_relaxed)) {
  }
}

}  // namespace shmtrain::shm
