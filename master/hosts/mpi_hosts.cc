// Hosts over Open MPI: one rank per host master (master/hosts/hosts.h).
//
// The combine is a reduce-scatter followed by an allgather, both written as point-to-point
// messages between every pair of hosts:
//   1. host h receives part h (BatchPlan::ShareOf(n, h, H)) of every other host's sum and
//      adds the H parts in host order 0, 1, ..., H-1 (its own in its place);
//   2. host h sends its finished part to every other host and receives theirs.
// Each host sends and receives (H-1)/H of the vector twice, the same bytes a ring allreduce
// moves; and the order of the additions is fixed by the host numbers alone, so the result is
// the same bits on every host and in every run with the same H and P, whatever MPI's
// collective tuning would pick. Point-to-point requests also tell, at a deadline, which host
// has not sent its part, so the message can name it; a collective could not.
//
// A batch norm crossing's statistics are a few hundred doubles: each host sends its sums whole
// to every other host and adds the H of them in host order itself, one message's latency
// instead of the two rounds above.
//
// Threads: MPI is initialised MPI_THREAD_SERIALIZED. The main thread calls Agree() and
// AbortJob()/Finish(); one exchange thread calls the rest, only between them: the combiner's
// Combine() and CombineStats() (sync), or the parameter server's Send/Receive/Test/Cancel
// (async), and either one's Send/Receive/Test/Cancel for the workers' states
// (master/hosts/worker_states.h).
#include <mpi.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data/batch_plan.h"
#include "master/hosts/hosts.h"
#include "shm/futex.h"

namespace shmtrain::master {
namespace {

constexpr int kTagPart = 1;    // step 1: a part of a host's sum, to the host that reduces it
constexpr int kTagTotals = 2;  // step 1: a host's StepTotals, to every other host
constexpr int kTagSum = 3;     // step 2: a reduced part, to every other host
constexpr int kTagStats = 4;   // a crossing's number and this host's sums, to every other host
constexpr int kNameBytes = 64;
// ShareFromFirst's messages: host 0's read status and byte count, then chunks of its bytes.
constexpr int kTagShareHead = 5;
constexpr int kTagShareBody = 6;
// ShareFromFirst sends host 0's bytes in chunks of at most this many: MPI counts in int, and a
// checkpoint may be larger than 2 GiB. Each chunk is a wait of its own, so the deadline bounds
// a pause in the transfer, not the transfer of the whole file.
constexpr int64_t kShareChunk = int64_t{1} << 26;
// Polling: MPI over TCP moves a large message only while someone calls into MPI, so the wait
// keeps testing, yielding the core between tests (others on it run first), for as long as a
// combine of a large model takes; past that, a slow peer costs no core: it sleeps this long
// between tests. A sleep under load can last a scheduler tick, which is why it is not the rule.
constexpr int64_t kSpinNs = 50'000'000;
constexpr long kSleepNs = 50'000;
constexpr int64_t kStalledNs = 500'000'000;

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

class MpiHosts final : public Hosts {
 public:
  Status Join(int* argc, char*** argv);
  ~MpiHosts() override = default;

  int count() const override { return count_; }
  int index() const override { return index_; }
  int local() const override { return local_; }
  int local_count() const override { return local_count_; }
  std::string Describe(int host) const override {
    return "host " + std::to_string(host) + " (" + names_[static_cast<size_t>(host)] + ")";
  }
  Status Agree(const Status& here, uint64_t identity, double timeout_s,
               const std::function<bool()>& stop) override;
  Status ShareFromFirst(const std::string& what, std::string* bytes, const Status& read,
                        double timeout_s, const std::function<bool()>& stop) override;
  bool failed_together() const override { return failed_together_; }
  Status Combine(const float* in, float* out, int64_t n, StepTotals* totals, int64_t deadline_ns,
                 const std::function<bool()>& stop) override;
  Status CombineStats(const double* in, double* out, int64_t n, uint64_t seq,
                      const std::string& what, int64_t deadline_ns,
                      const std::function<bool()>& stop) override;
  Status Send(int to, int tag, const void* data, int64_t bytes, Message* m) override;
  Status Receive(int from, int tag, void* data, int64_t bytes, Message* m) override;
  Status Test(Message* m, bool* done) override;
  void Cancel(Message* m) override;
  [[noreturn]] void AbortJob(int code) override {
    MPI_Abort(comm_, code);
    std::_Exit(code);
  }
  void Finish() override { MPI_Finalize(); }

 private:
  // A pending request and the host at its other end (for the message at a deadline).
  struct Pending {
    MPI_Request request;
    int peer;
    bool receive;
  };
  // Waits until every request has completed; kHostLost naming the first host a receive still
  // waits for at the deadline, kInterrupted when stop() turns true.
  Status WaitAll(std::vector<Pending>* pending, int64_t deadline_ns,
                 const std::function<bool()>& stop, const std::string& what);
  // ShareFromFirst's one message: host 0 sends `len` bytes at data to every other host, the
  // others receive them from host 0; within timeout_s.
  Status ShareChunk(void* data, int64_t len, int tag, double timeout_s,
                    const std::function<bool()>& stop, const std::string& what);
  // Combine's step 1 posted: this host's part `len` long (of n) from every other host into
  // parts_, their totals into totals_, and to each its part of `in` and *totals.
  std::vector<Pending> PostParts(const float* in, int64_t n, int64_t len,
                                 const StepTotals* totals);
  // The parts of this host's part summed into o (own: this host's) and the totals into
  // *totals.
  void SumInHostOrder(const float* own, int64_t len, float* o, StepTotals* totals) const;
  // Combine's step 2 posted: the finished part o (`len` long) to every other host, and their
  // parts of out (of n) from them.
  std::vector<Pending> PostSum(const float* o, int64_t len, float* out, int64_t n);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int count_ = 1, index_ = 0, local_ = 0, local_count_ = 1;
  std::vector<std::string> names_;
  std::vector<float> parts_;  // step 1: the other hosts' parts of this host's part
  std::vector<StepTotals> totals_;
  // A crossing's messages: host j's at j * (n + 1), its number's bits then its n sums.
  std::vector<double> stats_;
  bool failed_together_ = false;
};

Status MpiHosts::Join(int* argc, char*** argv) {
  int provided = 0;
  if (const int e = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
      e != MPI_SUCCESS) {
    return Status::Resource("cannot initialise MPI: " + MpiError(e));
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return Status::Resource("MPI offers thread level " + std::to_string(provided) +
                            "; shmtrain's combiner thread needs MPI_THREAD_SERIALIZED");
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_size(comm_, &count_);
  MPI_Comm_rank(comm_, &index_);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, index_, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local_count_);
  MPI_Comm_rank(node, &local_);
  MPI_Comm_free(&node);
  char mine[kNameBytes] = {};
  int len = 0;
  char full[MPI_MAX_PROCESSOR_NAME] = {};
  MPI_Get_processor_name(full, &len);
  std::memcpy(mine, full, static_cast<size_t>(std::min(len, kNameBytes - 1)));
  std::vector<char> all(static_cast<size_t>(kNameBytes) * count_);
  if (const int e =
          MPI_Allgather(mine, kNameBytes, MPI_CHAR, all.data(), kNameBytes, MPI_CHAR, comm_);
      e != MPI_SUCCESS) {
    return Status::HostLost("the host masters could not exchange their names: " + MpiError(e));
  }
  for (int h = 0; h < count_; ++h) names_.emplace_back(all.data() + h * kNameBytes);
  return Status::Ok();
}

Status MpiHosts::WaitAll(std::vector<Pending>* pending, int64_t deadline_ns,
                         const std::function<bool()>& stop, const std::string& what) {
  const int64_t spin_until = shm::MonotonicNs() + kSpinNs;
  int64_t last_poll = shm::MonotonicNs();
  for (;;) {
    bool all_done = true;
    for (Pending& p : *pending) {
      if (p.request == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (const int e = MPI_Test(&p.request, &done, MPI_STATUS_IGNORE); e != MPI_SUCCESS) {
        return Status::HostLost(what + ": the exchange with " + Describe(p.peer) + " failed: " +
                                MpiError(e));
      }
      all_done &= done != 0;
    }
    if (all_done) return Status::Ok();
    if (stop()) return Status::Interrupted(what + ": stopped");
    const int64_t now = shm::MonotonicNs();
    // A gap between two polls means this process itself did not run (stopped, or starved):
    // that time is not the other hosts' fault, so the deadline moves by it.
    if (now - last_poll > kStalledNs) deadline_ns += now - last_poll;
    last_poll = now;
    if (now >= deadline_ns) {
      for (const Pending& p : *pending) {
        if (p.request != MPI_REQUEST_NULL && p.receive) {
          return Status::HostLost(what + ": nothing arrived from " + Describe(p.peer) +
                                  " by the deadline");
        }
      }
      for (const Pending& p : *pending) {
        if (p.request != MPI_REQUEST_NULL) {
          return Status::HostLost(what + ": " + Describe(p.peer) +
                                  " did not take what this host sent by the deadline");
        }
      }
    }
    if (now < spin_until) {
      sched_yield();
    } else {
      const timespec nap{0, kSleepNs};
      nanosleep(&nap, nullptr);
    }
  }
}

// Another host's failure, as this host's status: the same exit code, so that the job's code
// does not depend on which host mpirun hears from first.
Status OtherHostFailed(int exit_code, const std::string& msg) {
  switch (exit_code) {
    case kExitUsage: return Status::Usage(msg);
    case kExitResource: return Status::Resource(msg);
    case kExitInternal: return Status::Internal(msg);
    default: return Status::HostLost(msg + " (exit " + std::to_string(exit_code) + ")");
  }
}

Status MpiHosts::Agree(const Status& here, uint64_t identity, double timeout_s,
                       const std::function<bool()>& stop) {
  // Two words a host: its start's exit code (0 = started) and its identity.
  const uint64_t mine[2] = {static_cast<uint64_t>(here.exit_code()), here.ok() ? identity : 0};
  std::vector<uint64_t> all(2 * static_cast<size_t>(count_));
  std::vector<Pending> pending(1);
  pending[0].peer = 0;
  pending[0].receive = true;
  MPI_Iallgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm_, &pending[0].request);
  const int64_t deadline = shm::MonotonicNs() + static_cast<int64_t>(timeout_s * 1e9);
  if (Status s = WaitAll(&pending, deadline, stop, "the start of the run"); !s.ok()) {
    if (s.code() == Status::Code::kInterrupted) return s;
    return Status::HostLost("the start of the run: not every host master answered within " +
                            std::to_string(static_cast<int64_t>(timeout_s)) + "s (" +
                            s.message() + ")");
  }
  for (int h = 0; h < count_; ++h) {
    const uint64_t code = all[2 * static_cast<size_t>(h)];
    if (code == 0) continue;
    failed_together_ = true;
    return here.ok() ? OtherHostFailed(static_cast<int>(code),
                                       Describe(h) +
                                           " could not start the run (its message says "
                                           "why); this host removed its segment and "
                                           "leaves the job")
                     : here;
  }
  for (int h = 1; h < count_; ++h) {
    if (all[2 * static_cast<size_t>(h) + 1] != all[1]) {
      failed_together_ = true;
      return Status::Usage("the host masters do not run the same training: " + Describe(h) +
                           " differs from " + Describe(0) + " in its options, data or resumed "
                           "checkpoint (every host must be given the same flags and the same "
                           "files)");
    }
  }
  return Status::Ok();
}

Status MpiHosts::ShareFromFirst(const std::string& what, std::string* bytes, const Status& read,
                                double timeout_s, const std::function<bool()>& stop) {
  const std::string at = "the start of the run: " + what + " from " + Describe(0);
  // Two words: host 0's read (its exit code, 0 = read) and the count of bytes that follow.
  uint64_t head[2] = {static_cast<uint64_t>(read.exit_code()), read.ok() ? bytes->size() : 0};
  if (Status s = ShareChunk(head, sizeof head, kTagShareHead, timeout_s, stop, at); !s.ok()) {
    return s;
  }
  if (head[0] != 0) {
    if (index_ == 0) return read;
    return OtherHostFailed(static_cast<int>(head[0]),
                           Describe(0) + " could not read " + what + " (its message says why)");
  }
  if (index_ != 0) bytes->assign(head[1], '\0');
  for (uint64_t at_byte = 0; at_byte < head[1]; at_byte += kShareChunk) {
    const int64_t len = static_cast<int64_t>(std::min<uint64_t>(kShareChunk, head[1] - at_byte));
    if (Status s = ShareChunk(bytes->data() + at_byte, len, kTagShareBody, timeout_s, stop, at);
        !s.ok()) {
      return s;
    }
  }
  return read;
}

Status MpiHosts::ShareChunk(void* data, int64_t len, int tag, double timeout_s,
                            const std::function<bool()>& stop, const std::string& what) {
  static_assert(kShareChunk <= INT_MAX, "a chunk is one MPI message");
  std::vector<Pending> pending;
  for (int j = 0; j < count_; ++j) {
    if (j == index_ || (index_ != 0 && j != 0)) continue;  // host 0 to each, each from host 0
    Pending p{MPI_REQUEST_NULL, j, index_ != 0};
    const int e = p.receive
                      ? MPI_Irecv(data, static_cast<int>(len), MPI_BYTE, j, tag, comm_, &p.request)
                      : MPI_Isend(data, static_cast<int>(len), MPI_BYTE, j, tag, comm_, &p.request);
    if (e != MPI_SUCCESS) {
      return Status::HostLost(what + ": the exchange with " + Describe(j) +
                              " failed: " + MpiError(e));
    }
    pending.push_back(p);
  }
  const int64_t deadline = shm::MonotonicNs() + static_cast<int64_t>(timeout_s * 1e9);
  Status s = WaitAll(&pending, deadline, stop, what);
  // A receive given up on must not write into the caller's buffer later.
  for (Pending& p : pending) {
    if (s.ok() || !p.receive || p.request == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&p.request);
    MPI_Request_free(&p.request);
  }
  return s;
}

Status MpiHosts::Combine(const float* in, float* out, int64_t n, StepTotals* totals,
                         int64_t deadline_ns, const std::function<bool()>& stop) {
  const int H = count_, me = index_;
  const auto mine = data::BatchPlan::ShareOf(n, me, H);
  const int64_t len = mine.end - mine.begin;
  if (len > INT_MAX) return Status::Resource("a host's part of the parameters exceeds MPI's count");
  const std::string what = "step " + std::to_string(totals->step);
  parts_.resize(static_cast<size_t>(len * H));
  totals_.assign(static_cast<size_t>(H), StepTotals{});
  totals_[static_cast<size_t>(me)] = *totals;

  // ---- 1: every host's share of my part, and every host's totals.
  std::vector<Pending> pending = PostParts(in, n, len, totals);
  if (Status s = WaitAll(&pending, deadline_ns, stop, what); !s.ok()) return s;
  for (int j = 0; j < H; ++j) {
    if (totals_[static_cast<size_t>(j)].step != totals->step) {
      return Status::Internal(what + ": " + Describe(j) + " sent its sum of step " +
                              std::to_string(totals_[static_cast<size_t>(j)].step));
    }
  }
  float* o = out + mine.begin;
  SumInHostOrder(in + mine.begin, len, o, totals);

  // ---- 2: my finished part to everyone, theirs to me.
  pending = PostSum(o, len, out, n);
  return WaitAll(&pending, deadline_ns, stop, what);
}

std::vector<MpiHosts::Pending> MpiHosts::PostParts(const float* in, int64_t n, int64_t len,
                                                   const StepTotals* totals) {
  const int H = count_, me = index_;
  std::vector<Pending> pending;
  for (int j = 0; j < H; ++j) {
    if (j == me) continue;
    const auto part = data::BatchPlan::ShareOf(n, j, H);
    Pending p{MPI_REQUEST_NULL, j, true};
    MPI_Irecv(parts_.data() + j * len, static_cast<int>(len), MPI_FLOAT, j, kTagPart, comm_,
              &p.request);
    pending.push_back(p);
    MPI_Irecv(&totals_[static_cast<size_t>(j)], sizeof(StepTotals), MPI_BYTE, j, kTagTotals, comm_,
              &p.request);
    pending.push_back(p);
    p.receive = false;
    MPI_Isend(in + part.begin, static_cast<int>(part.end - part.begin), MPI_FLOAT, j, kTagPart,
              comm_, &p.request);
    pending.push_back(p);
    MPI_Isend(totals, sizeof(StepTotals), MPI_BYTE, j, kTagTotals, comm_, &p.request);
    pending.push_back(p);
  }
  return pending;
}

// The sum in host order: the same additions, in the same order, on every host.
void MpiHosts::SumInHostOrder(const float* own, int64_t len, float* o, StepTotals* totals) const {
  const int H = count_, me = index_;
  auto part_of = [&](int j) { return j == me ? own : parts_.data() + j * len; };
  std::copy(part_of(0), part_of(0) + len, o);
  for (int j = 1; j < H; ++j) {
    const float* __restrict src = part_of(j);
    for (int64_t i = 0; i < len; ++i) o[i] += src[i];
  }
  StepTotals sum{totals->step, 0, 0};
  for (const StepTotals& t : totals_) {
    sum.samples += t.samples;
    sum.loss_sum += t.loss_sum;
  }
  *totals = sum;
}

std::vector<MpiHosts::Pending> MpiHosts::PostSum(const float* o, int64_t len, float* out,
                                                 int64_t n) {
  const int H = count_, me = index_;
  std::vector<Pending> pending;
  for (int j = 0; j < H; ++j) {
    if (j == me) continue;
    const auto part = data::BatchPlan::ShareOf(n, j, H);
    Pending p{MPI_REQUEST_NULL, j, true};
    MPI_Irecv(out + part.begin, static_cast<int>(part.end - part.begin), MPI_FLOAT, j, kTagSum,
              comm_, &p.request);
    pending.push_back(p);
    p.receive = false;
    MPI_Isend(o, static_cast<int>(len), MPI_FLOAT, j, kTagSum, comm_, &p.request);
    pending.push_back(p);
  }
  return pending;
}

Status MpiHosts::CombineStats(const double* in, double* out, int64_t n, uint64_t seq,
                              const std::string& what, int64_t deadline_ns,
                              const std::function<bool()>& stop) {
  const int H = count_, me = index_;
  const int64_t len = n + 1;
  if (len * static_cast<int64_t>(sizeof(double)) > INT_MAX) {
    return Status::Resource(what + ": the statistics exceed MPI's count");
  }
  const int bytes = static_cast<int>(len * static_cast<int64_t>(sizeof(double)));
  stats_.resize(static_cast<size_t>(len * H));
  auto message = [&](int j) { return stats_.data() + j * len; };
  std::memcpy(message(me), &seq, sizeof seq);
  std::copy(in, in + n, message(me) + 1);
  std::vector<Pending> pending;
  for (int j = 0; j < H; ++j) {
    if (j == me) continue;
    Pending p{MPI_REQUEST_NULL, j, true};
    MPI_Irecv(message(j), bytes, MPI_BYTE, j, kTagStats, comm_, &p.request);
    pending.push_back(p);
    p.receive = false;
    MPI_Isend(message(me), bytes, MPI_BYTE, j, kTagStats, comm_, &p.request);
    pending.push_back(p);
  }
  if (Status s = WaitAll(&pending, deadline_ns, stop, what); !s.ok()) return s;
  for (int j = 0; j < H; ++j) {
    uint64_t theirs = 0;
    std::memcpy(&theirs, message(j), sizeof theirs);
    if (theirs != seq) {
      return Status::Internal(what + ": " + Describe(j) + " sent the sums of crossing number " +
                              std::to_string(theirs) + ", not " + std::to_string(seq));
    }
  }
  // Host order: the same additions, in the same order, on every host.
  std::copy(message(0) + 1, message(0) + len, out);
  for (int j = 1; j < H; ++j) {
    const double* __restrict src = message(j) + 1;
    for (int64_t i = 0; i < n; ++i) out[i] += src[i];
  }
  return Status::Ok();
}

// A Message holds Open MPI's request handle (a pointer) as an integer; MPI_REQUEST_NULL, which
// MPI_Test leaves behind, becomes 0.
static_assert(sizeof(MPI_Request) <= sizeof(uintptr_t));
MPI_Request RequestOf(const Message& m) {
  MPI_Request r;
  std::memcpy(&r, &m.handle, sizeof r);
  return r;
}
void Hold(MPI_Request r, Message* m) {
  m->handle = 0;
  if (r != MPI_REQUEST_NULL) std::memcpy(&m->handle, &r, sizeof r);
}

Status MpiHosts::Send(int to, int tag, const void* data, int64_t bytes, Message* m) {
  if (bytes > INT_MAX)
    return Status::Resource("a message to " + Describe(to) + " exceeds MPI's count");
  MPI_Request r = MPI_REQUEST_NULL;
  if (const int e = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, to, tag, comm_, &r);
      e != MPI_SUCCESS) {
    return Status::HostLost("a send to " + Describe(to) + " failed: " + MpiError(e));
  }
  Hold(r, m);
  return Status::Ok();
}

Status MpiHosts::Receive(int from, int tag, void* data, int64_t bytes, Message* m) {
  if (bytes > INT_MAX)
    return Status::Resource("a message from " + Describe(from) + " exceeds MPI's count");
  MPI_Request r = MPI_REQUEST_NULL;
  if (const int e = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, from, tag, comm_, &r);
      e != MPI_SUCCESS) {
    return Status::HostLost("a receive from " + Describe(from) + " failed: " + MpiError(e));
  }
  Hold(r, m);
  return Status::Ok();
}

Status MpiHosts::Test(Message* m, bool* done) {
  *done = !m->pending();
  if (*done) return Status::Ok();
  MPI_Request r = RequestOf(*m);
  int flag = 0;
  if (const int e = MPI_Test(&r, &flag, MPI_STATUS_IGNORE); e != MPI_SUCCESS) {
    return Status::HostLost("a message between host masters failed: " + MpiError(e));
  }
  if (flag) m->handle = 0;
  *done = flag != 0;
  return Status::Ok();
}

void MpiHosts::Cancel(Message* m) {
  if (!m->pending()) return;
  MPI_Request r = RequestOf(*m);
  MPI_Cancel(&r);
  MPI_Request_free(&r);
  m->handle = 0;
}

}  // namespace

Status JoinMpiHosts(int* argc, char*** argv, std::unique_ptr<Hosts>* out) {
  auto hosts = std::make_unique<MpiHosts>();
  if (Status s = hosts->Join(argc, argv); !s.ok()) return s;
  *out = std::move(hosts);
  return Status::Ok();
}

}  // namespace shmtrain::master
