// Creating, attaching and validating the segment (see layout.h for what is in it).
//
// The master Create()s a segment under a name unique per user and run, with O_EXCL and mode
// 0600, reserves its pages up front (so a full /dev/shm fails here with a message, not later
// with SIGBUS), and removes it when the owning Segment is destroyed or Unlink()ed. Workers
// Attach(), which validates the header before anything is written.
//
// Thread-safety contract.
//  - Processes. Exactly one process creates a segment and owns its name: the master that
//    Create()s it (owner: its destruction or Unlink() removes the name; a crash handler removes
//    it through master/run/signals.h). Workers Attach() (not owners: they never remove the name,
//    except a worker orphaned by a SIGKILLed master, worker/worker_main.cc). Any process may
//    ListSegments(), and ReclaimStaleSegments()/RemoveSegment() the names of this user's
//    segments whose creator is gone (`shmtrain cleanup`, a run's start).
//  - Read-only after creation. The master writes the header's identity, sizes, offsets and
//    RunConfig (MakeHeader, Create, which seals the config's fingerprint) and the data X and
//    Y (FillSegment) before it starts any worker, and nobody writes them afterwards: every
//    process reads them without atomics.
//    The starting parameters and protocol words are written plainly then too (FillSegment,
//    ResumeInto); from the first spawn on they and everything else are shared, and layout.h
//    says who writes each word and with which memory order: this class only hands out
//    pointers into the mapping, to const through a const Segment (the read-only view the
//    master's units and the exporter hold) and mutable only through the mutable_ accessors.
//  - Threads of one process. The accessors (header() through grad(), their mutable_ twins,
//    name(), size(), base(), valid()) read only base_ and the read-only offsets: any thread
//    may call them at once (the master's run loop and the exporter's scrapes; the exchange
//    threads take their pointers once, when they are made). Unlink() and LeaveMapped() leave
//    base_ and every accessor valid, so they may run while other threads read through the
//    object. Create(), Attach(), moves and destruction belong to the thread that owns the
//    object (the master's run loop, a worker's only thread); destruction unmaps, so it waits
//    until no other thread reads through the mapping: the exporter is detached
//    (Exporter::Detach) and every exchange thread joined or left with the mapping
//    (ExchangeThread::JoinOrLeave calls LeaveMapped).
//  - ComputeLayout, ConfigFingerprint, CheckRunConfig, Segment::Validate and MakeSegmentName
//    touch only their arguments: any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shm/layout.h"
#include "shmtrain/status.h"

// Declared only: the segment's users need not see Boost.Interprocess (shm/segment.cc does).
namespace boost::interprocess {
class mapped_region;
}  // namespace boost::interprocess

namespace shmtrain::shm {

// Fills the identity, sizes and offsets of *h from h->config (whose fields must be set), its
// fingerprint among them. The same function lays out the segment for the master and checks it
// for the workers. Every sum and product is checked: false (offsets past the failure and
// total_size 0) when a size is negative or the segment would not fit in 64 bits.
bool ComputeLayout(Header* h);

// The fingerprint of a run configuration (Header::config_fingerprint): a 64-bit hash of all
// its bytes (FNV-1a, its result mixed by splitmix64's finaliser). Any change of a byte changes
// it but by a chance of 2^-64; anyone can compute it, so it tells damage, not forgery.
uint64_t ConfigFingerprint(const RunConfig& c);

// "/shmtrain-<uid>-<pid>-<16 hex digits>": unique per user and run; the prefix lets
// `cleanup` find ours and the uid keeps users apart.
std::string MakeSegmentName();
// The prefix every segment of this user starts with, without the leading '/'.
std::string SegmentPrefixForUser();

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); 0 if unknown.
uint64_t ProcessStartTime(pid_t pid);

// One of this user's segments in /dev/shm, as `cleanup` and the stale check see it.
struct SegmentInfo {
  std::string name;     // without the leading '/'
  uint64_t bytes = 0;
  int64_t creator_pid = 0;
  bool live = false;    // its creator (same pid and start time) still runs
  std::string why;      // for a stale one: why it is judged stale
};

// This user's segments (names starting with SegmentPrefixForUser()). Reads headers only.
std::vector<SegmentInfo> ListSegments();
// Removes this user's stale segments (creator gone); never touches a live run's. Returns
// what it removed.
std::vector<SegmentInfo> ReclaimStaleSegments();
// Removes the name of segment `name` (as MakeSegmentName or SegmentInfo spells it, with or
// without the leading '/'); mappings of it stay valid. False if it could not be removed.
bool RemoveSegment(const std::string& name);

// What Segment::Attach and Segment::Validate found: ok, or a Status that names what is wrong
// (kResource: the segment cannot be opened or mapped; kData: its bytes are not what this build
// reads) together with the worker exit code that reports it, so that a worker exits with the
// distinct code the failure model promises (include/shmtrain/status.h). worker_exit is kWorkerOk
// exactly when status is ok.
struct [[nodiscard]] SegmentCheck {
  Status status;
  int worker_exit = kWorkerOk;
  bool ok() const { return status.ok(); }
};

// Which part of a run configuration a refusal is about: the master names the flag or the file
// that set it (master/plan/segment_plan.h, CheckConfig).
enum class ConfigPart {
  kNone,
  kProcesses,   // workers, hosts
  kInput,       // the dimensions of the model's input
  kModel,       // the model text, its shapes, its parameter count
  kPrecision,   // the products' inputs against this CPU's kernels
  kData,        // rows, features against the input, the regions' sizes
  kOptimizer,   // its state vectors
  kValidation,  // the steps between validations, the snapshot ring
  kAugment,     // the augmentation against the model's input
};

// What CheckRunConfig found: ok, or kData saying what is wrong and the part it is about.
struct [[nodiscard]] ConfigCheck {
  Status status;
  ConfigPart part = ConfigPart::kNone;
  bool ok() const { return status.ok(); }
};

// The run configuration as far as the segment's layout relies on it: every size the layout is
// computed from in range and the layout within 64 bits, the model's text ending within its
// field, its input's dimensions within kMaxWidth, a known precision. Segment::Validate makes it
// on every attach, and the master on the header it builds, before a row is stored and before a
// worker starts, so that a run the workers would refuse is refused at its start. The model's
// own reading (its text parsed and its shapes resolved once, the features and the counts
// against it: worker::ReadRunModel) is the workers', once attached; what the options ask of
// this CPU (the precision's kernels, the augmentation: data::CheckRunOptions) the master checks
// on the header it builds and each worker again on its own CPU.
ConfigCheck CheckRunConfig(const RunConfig& c);

class Segment {
 public:
  // Out of line, like the destructor and the moves: they need mapped_region complete.
  Segment();
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;

  // Creates the segment described by proto (from ComputeLayout plus the config, which must be
  // final: nothing writes it afterwards), copies the header in with the config's fingerprint
  // sealed, and owns the name: the destructor unlinks it. kResource on any failure, with the
  // name, the size and the reason (also for a proto whose layout did not fit in 64 bits);
  // nothing is left behind.
  static Status Create(const std::string& name, const Header& proto, Segment* out);

  // Opens and validates an existing segment for a worker; the refusal's message names the
  // segment. Writes nothing.
  static SegmentCheck Attach(const std::string& name, Segment* out);

  // Checks a mapped header against this build, its config against its fingerprint, and the
  // layout against the mapped size (kWorkerBadMagic, kWorkerBadAbi or kWorkerBadLayout on a
  // refusal); used by Attach and by the tests.
  static SegmentCheck Validate(const Header& h, uint64_t mapped_size);

  // Removes the name now (the mapping stays valid until destruction).
  void Unlink();
  // Removes the name and gives the mapping to the process, which never unmaps it: a thread
  // that cannot be stopped may still touch it, and the process is about to exit. This object
  // stays valid and its accessors keep working (the run's end still reads the segment after
  // a thread was left behind); neither its moves nor its destruction unmap it.
  void LeaveMapped();

  bool valid() const { return base_ != nullptr; }
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  const char* base() const { return base_; }

  // ---- The read-only view: what a `const Segment&` gives, pointers to const. A unit that is
  // handed the view can read every region, and every concurrent word through shm/layout.h's
  // load accessors, but a store through it does not compile.
  const Header* header() const { return At<Header>(0); }
  const WorkerBlock* block(int rank) const {
    return At<WorkerBlock>(header()->blocks_offset) + rank;
  }
  const float* x() const { return At<float>(header()->x_offset); }
  const float* y() const { return At<float>(header()->y_offset); }
  const float* params(int64_t step) const { return At<float>(header()->params_offset[step & 1]); }
  // Optimizer state vector k (< K = config.optim.num_states) of buffer step%2; nullptr for
  // k >= K.
  const float* state(int k, int64_t step) const {
    const uint64_t off = header()->state_offset[k][step & 1];
    return off ? At<float>(off) : nullptr;
  }
  int num_states() const { return static_cast<int>(header()->config.optim.num_states); }
  // Sync validation snapshot of eval index k (null when there are none).
  const float* snapshot(int64_t k) const {
    const Header* h = header();
    if (h->snapshot_offset == 0) return nullptr;
    const uint64_t slot = static_cast<uint64_t>(k % h->config.snapshots);
    return At<float>(h->snapshot_offset + slot * h->snapshot_stride);
  }
  // Several hosts: this host's sum of the slots (HS) and every host's (GS); null otherwise.
  const float* host_sum() const { return OptionalAt<float>(header()->host_sum_offset); }
  const float* global_sum() const { return OptionalAt<float>(header()->global_sum_offset); }
  // Rank r's statistics (batch norm, sync): stats_count doubles after its slot's gradient.
  const double* stats(int rank) const {
    const uint64_t vec = (header()->config.param_count * sizeof(float) + kCacheLine - 1) /
                         kCacheLine * kCacheLine;
    return At<double>(header()->slots_offset + header()->slot_stride * rank + sizeof(SlotHeader) +
                      vec);
  }
  // Several hosts with batch norm: every crossing's sums over every host (GStats); null
  // otherwise.
  const double* global_stats() const {
    return OptionalAt<double>(header()->global_stats_offset);
  }
  const SlotHeader* slot(int rank) const {
    return At<SlotHeader>(header()->slots_offset + header()->slot_stride * rank);
  }
  const float* grad(int rank) const {
    return reinterpret_cast<const float*>(reinterpret_cast<const char*>(slot(rank)) +
                                          sizeof(SlotHeader));
  }

  // ---- The writes: the same places, mutable, for the holder of the Segment itself (not of a
  // const view). Each is named so that every write into the segment can be found. The master's:
  // before any worker starts, the filling of the new segment (master/run/run.cc, FillSegment,
  // with a resumed checkpoint's ResumeInto); while they run, master/unit/segment_writes.h (the
  // run loop's units) and the cross-host exchange threads (SegmentWrites::ForExchange). A
  // worker's: through the Segment it attached, which worker/worker_main.cc hands to its loop.
  // Who may write which word while the workers run, and with which memory order, is
  // layout.h's.
  Header* mutable_header() { return Mutable(header()); }
  WorkerBlock* mutable_block(int rank) { return Mutable(block(rank)); }
  float* mutable_x() { return Mutable(x()); }
  float* mutable_y() { return Mutable(y()); }
  float* mutable_params(int64_t step) { return Mutable(params(step)); }
  float* mutable_state(int k, int64_t step) { return Mutable(state(k, step)); }
  float* mutable_snapshot(int64_t k) { return Mutable(snapshot(k)); }
  float* mutable_host_sum() { return Mutable(host_sum()); }
  float* mutable_global_sum() { return Mutable(global_sum()); }
  double* mutable_stats(int rank) { return Mutable(stats(rank)); }
  double* mutable_global_stats() { return Mutable(global_stats()); }
  SlotHeader* mutable_slot(int rank) { return Mutable(slot(rank)); }
  float* mutable_grad(int rank) { return Mutable(grad(rank)); }

 private:
  template <class T>
  const T* At(uint64_t offset) const {
    return reinterpret_cast<const T*>(base_ + offset);
  }
  template <class T>
  const T* OptionalAt(uint64_t offset) const {
    return offset ? At<T>(offset) : nullptr;
  }
  // The mapping itself is writable (PROT_READ | PROT_WRITE): constness is the view's, so the
  // mutable accessors may drop it from what the const ones computed.
  template <class T>
  static T* Mutable(const T* p) {
    return const_cast<T*>(p);
  }
  // Takes the mapping of segment `name`; `owner` removes the name on destruction.
  void Adopt(const std::string& name, std::unique_ptr<boost::interprocess::mapped_region> region,
             bool owner);
  void Release();

  std::string name_;
  // The mapping; its destructor unmaps. Held by pointer so that a Segment moves without
  // remapping and LeaveMapped can hand it to an owner that is never destroyed.
  std::unique_ptr<boost::interprocess::mapped_region> region_;
  char* base_ = nullptr;  // region_'s address, kept here for the inline accessors
  uint64_t size_ = 0;
  bool owner_ = false;
};

}  // namespace shmtrain::shm
