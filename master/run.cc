#include "master/run.h"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "data/batch_plan.h"
#include "data/dataset.h"
#include "data/preprocess.h"
#include "master/model_file.h"
#include "monitoring/exporter.h"
#include "nn/metrics.h"
#include "nn/mlp.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shm/segment.h"

namespace shmtrain::master {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {

constexpr int kPollMs = 5;                    // supervisor tick: death is seen at once via pidfd
constexpr int64_t kLeaveNs = 1'000'000'000;   // time workers get to leave after an abort
constexpr int64_t kProgressNs = 200'000'000;  // live line refresh

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

Status LoadData(const TrainOptions& o, data::Dataset* d) {
  if (o.example == "parabola") {
    *d = data::MakeParabola(o.example_rows);
    return Status::Ok();
  }
  if (o.example == "blobs") {
    *d = data::MakeBlobs(o.example_rows, o.example_features, o.model.outputs(), o.seed);
    return Status::Ok();
  }
  data::CsvOptions co;
  co.label_col = o.label_col;
  co.header = o.header;
  co.classes = o.model.loss == Loss::kXent ? o.model.outputs() : 0;
  return data::LoadCsv(o.data_path, co, d);
}

Status CheckAgainstData(const TrainOptions& o, const data::Dataset& d) {
  const std::string src = o.example.empty() ? o.data_path : "example " + o.example;
  if (o.model.inputs() != d.features) {
    return Status::Usage("--layers: the first size is " + std::to_string(o.model.inputs()) +
                         " but " + src + " has " + std::to_string(d.features) + " feature" +
                         (d.features == 1 ? "" : "s"));
  }
  if (o.batch > d.rows) {
    return Status::Usage("--batch: " + std::to_string(o.batch) + " is larger than the " +
                         std::to_string(d.rows) + " rows of " + src);
  }
  return Status::Ok();
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + " (SIG" +
           (abbrev ? abbrev : "?") + ")";
  }
  const int code = WEXITSTATUS(status);
  return "exited with code " + std::to_string(code) + " (" + WorkerExitName(code) + ")";
}

// One worker process as the supervisor sees it.
struct Child {
  pid_t pid = -1;
  int pidfd = -1;
  bool running = false;
  int status = 0;
};

class Supervisor {
 public:
  Supervisor(shm::Segment& seg, Launcher& launcher, Logger& log, monitoring::SupervisorStats& stats)
      : seg_(seg),
        launcher_(launcher),
        log_(log),
        stats_(stats),
        kids_(seg.header()->config.workers) {}
  ~Supervisor() { KillAll(); }

  Status StartAll() {
    for (int r = 0; r < static_cast<int>(kids_.size()); ++r) {
      if (Status s = Start(r, 0); !s.ok()) return s;
    }
    return Status::Ok();
  }

  // Waits up to timeout_ms for a death; returns the rank of a worker that ended, or -1.
  int PollExit(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    for (int r = 0; r < static_cast<int>(kids_.size()); ++r) {
      if (kids_[r].running) {
        fds.push_back({kids_[r].pidfd, POLLIN, 0});
        ranks.push_back(r);
      }
    }
    if (fds.empty()) return -1;
    if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return -1;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0 && Reap(ranks[i])) return ranks[i];
    }
    return -1;
  }

  bool any_running() const {
    return std::any_of(kids_.begin(), kids_.end(), [](const Child& c) { return c.running; });
  }
  const Child& child(int r) const { return kids_[r]; }

  // Abort word up, then a bounded wait for the workers to leave, then SIGKILL for the rest.
  void AbortAll() {
    shm::RaiseAbort(seg_.header());
    const int64_t deadline = shm::MonotonicNs() + kLeaveNs;
    while (any_running()) {
      const int64_t left_ms = (deadline - shm::MonotonicNs()) / 1'000'000;
      if (left_ms <= 0) break;
      PollExit(static_cast<int>(std::min<int64_t>(left_ms, 50)));
    }
    KillAll();
  }

 private:
  Status Start(int rank, uint32_t incarnation) {
    shm::WorkerBlock* b = seg_.block(rank);
    shm::StoreRelease(b->incarnation, incarnation);
    pid_t pid = -1;
    if (Status s = launcher_.Spawn(seg_.name(), rank, incarnation, &pid); !s.ok()) return s;
    Child& c = kids_[rank];
    c.pid = pid;
    c.running = true;
    stats_.SetUp(rank, true);
    c.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (c.pidfd < 0) {
      const int e = errno;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      c.running = false;
      return Status::Resource("cannot watch worker " + std::to_string(rank) +
                              ": pidfd_open: " + std::strerror(e));
    }
    log_.JsonOnly(JsonLine("worker_started").Int("rank", rank).Int("pid", pid).Int(
        "incarnation", incarnation));
    return Status::Ok();
  }

  bool Reap(int r) {
    Child& c = kids_[r];
    int st = 0;
    const pid_t p = waitpid(c.pid, &st, WNOHANG);
    if (p != c.pid) return false;
    c.status = st;
    c.running = false;
    stats_.SetUp(r, false);
    close(c.pidfd);
    c.pidfd = -1;
    return true;
  }

  void KillAll() {
    for (Child& c : kids_) {
      if (!c.running) continue;
      kill(c.pid, SIGKILL);
      // Bounded: a SIGKILLed process is reaped by the kernel without its cooperation.
      waitpid(c.pid, &c.status, 0);
      c.running = false;
      stats_.SetUp(static_cast<int>(&c - kids_.data()), false);
      close(c.pidfd);
      c.pidfd = -1;
    }
  }

  shm::Segment& seg_;
  Launcher& launcher_;
  Logger& log_;
  monitoring::SupervisorStats& stats_;
  std::vector<Child> kids_;
};

// The lowest step every worker has completed.
int64_t CompletedSteps(const shm::Segment& seg) {
  const auto& c = seg.header()->config;
  uint64_t lo = UINT64_MAX;
  for (uint32_t r = 0; r < c.workers; ++r) lo = std::min(lo, shm::LoadPhase(*seg.block(r)));
  return static_cast<int64_t>(lo / 2);
}

uint64_t TotalSamples(const shm::Segment& seg) {
  uint64_t s = 0;
  for (uint32_t r = 0; r < seg.header()->config.workers; ++r) {
    s += shm::LoadRelaxed(seg.block(r)->samples_total);
  }
  return s;
}

// Prints the loss records published since the last call: sync, by rank 0 for every logged
// step; async, by whichever worker's update got a logged version number.
class LossLog {
 public:
  LossLog(const shm::Segment& seg, Logger& log) : seg_(seg), log_(log) {}
  void Drain() {
    const auto& c = seg_.header()->config;
    if (c.log_every <= 0) return;
    for (;;) {
      if (next_ * c.log_every >= c.total_steps) return;
      const shm::LossRecord& rec = seg_.header()->loss_ring[next_ % shm::kLossRing];
      const uint64_t tag = shm::LoadAcquire(rec.tag);
      if (tag < static_cast<uint64_t>(next_ + 1)) return;  // not written yet
      if (tag == static_cast<uint64_t>(next_ + 1)) {
        last_loss_ = rec.loss;
        const int64_t step = next_ * c.log_every;
        log_.Line("step " + std::to_string(step) + " loss " + Fmt("%.9g", rec.loss),
                  JsonLine("step").Int("step", step).Num("loss", rec.loss));
      }
      ++next_;  // a record overwritten before we read it is skipped
    }
  }
  double last_loss() const { return last_loss_; }

 private:
  const shm::Segment& seg_;
  Logger& log_;
  int64_t next_ = 0;
  double last_loss_ = NAN;
};

Status CheckShmSpace(uint64_t need) {
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) return Status::Ok();  // let shm_open say what is wrong
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (need > avail) {
    return Status::Resource("the run needs a shared memory segment of " +
                            Fmt("%.1f", need / 1048576.0) + " MiB but /dev/shm has " +
                            Fmt("%.1f", avail / 1048576.0) + " MiB free");
  }
  return Status::Ok();
}

}  // namespace

Status PrepareData(const TrainOptions& o, RunData* rd) {
  data::Dataset all;
  if (Status s = LoadData(o, &all); !s.ok()) return s;
  if (Status s = data::SplitValidation(all, o.val_split, o.seed, &rd->train, &rd->val); !s.ok()) {
    return s;
  }
  if (Status s = CheckAgainstData(o, rd->train); !s.ok()) return s;
  rd->norm = data::Normalizer::Fit(rd->train, o.normalize);
  rd->norm.Apply(&rd->train);
  rd->norm.Apply(&rd->val);
  return Status::Ok();
}

namespace {

shm::Header MakeHeader(const TrainOptions& o, const data::Dataset& d, int64_t total_steps) {
  shm::Header proto{};
  shm::RunConfig& c = proto.config;
  c.mode = static_cast<uint32_t>(o.mode);
  c.activation = static_cast<uint32_t>(o.model.activation);
  c.loss = static_cast<uint32_t>(o.model.loss);
  c.num_layers = static_cast<uint32_t>(o.model.layers.size());
  std::copy(o.model.layers.begin(), o.model.layers.end(), c.layers);
  c.workers = static_cast<uint32_t>(o.workers);
  c.param_count = o.model.ParamCount();
  c.rows = d.rows;
  c.features = d.features;
  c.batch = o.batch;
  c.total_steps = total_steps;
  c.log_every = o.log_every;
  c.seed = o.seed;
  c.lr = o.lr;
  c.momentum = o.momentum;
  c.barrier_timeout_s = o.barrier_timeout_s;
  // Spinning pays only while every worker has a core of its own.
  c.spin_ns =
      o.workers <= static_cast<int>(std::thread::hardware_concurrency()) ? 50'000 : 0;
  c.master_pid = getpid();
  c.fault_rank = o.fault_rank;
  c.fault_step = o.fault_step;
  c.rule = static_cast<uint32_t>(o.rule);
  c.lambda = o.LambdaOrDefault();
  c.ms_decay = o.ms_decay;
  c.epsilon = o.epsilon;
  c.max_staleness = o.max_staleness;
  proto.creator_pid = getpid();
  proto.creator_start_time = shm::ProcessStartTime(getpid());
  shm::ComputeLayout(&proto);
  return proto;
}

// Updates applied so far: sync steps every rank completed, or async param_version.
int64_t Progress(const shm::Segment& seg) {
  if (static_cast<Mode>(seg.header()->config.mode) == Mode::kSync) return CompletedSteps(seg);
  return static_cast<int64_t>(shm::LoadAcquire(seg.header()->param_version));
}

}  // namespace

Status RunTrain(const TrainOptions& o, Logger& log, Launcher& launcher,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  // The endpoint first: a taken port fails the run before anything exists to clean up.
  std::unique_ptr<monitoring::Exporter>& exporter = *exporter_out;
  if (o.metrics) {
    if (Status s = monitoring::Exporter::Start(o.metrics_addr, &exporter); !s.ok()) return s;
  }
  RunData rd;
  if (Status s = PrepareData(o, &rd); !s.ok()) return s;
  const data::Dataset& d = rd.train;
  const int64_t total_steps = o.TotalSteps(d.rows);
  const int P = o.workers;
  const bool sync = o.mode == Mode::kSync;

  const shm::Header proto = MakeHeader(o, d, total_steps);
  if (Status s = CheckShmSpace(proto.total_size); !s.ok()) return s;
  shm::Segment seg;
  if (Status s = shm::Segment::Create(shm::MakeSegmentName(), proto, &seg); !s.ok()) return s;
  std::copy(d.x.begin(), d.x.end(), seg.x());
  std::copy(d.y.begin(), d.y.end(), seg.y());
  nn::InitParams(o.model, o.init, o.seed, seg.params(0));
  for (int r = 0; r < P; ++r) seg.slot(r)->step = -1;
  monitoring::SupervisorStats stats(P);
  if (exporter) exporter->Attach(&seg, &stats, o);
  // Declared after seg and stats: destroyed first, so no scrape reads them once they are gone.
  struct DetachOnExit {
    monitoring::Exporter* e;
    ~DetachOnExit() {
      if (e) e->Detach();
    }
  } detach{exporter.get()};
  log.JsonOnly(JsonLine("segment")
                   .Str("name", seg.name())
                   .Int("bytes", static_cast<int64_t>(seg.size()))
                   .Int("params", static_cast<int64_t>(proto.config.param_count))
                   .Int("rows", d.rows)
                   .Int("val_rows", rd.val.rows)
                   .Int("steps", total_steps)
                   .Str("mode", ToString(o.mode)));
  if (exporter) {
    const std::string url = "http://" + exporter->address() + "/metrics";
    log.Info("metrics: " + url,
             JsonLine("metrics").Str("address", exporter->address()).Str("url", url));
  }

  const int64_t t_start = shm::MonotonicNs();
  Supervisor sup(seg, launcher, log, stats);
  LossLog losses(seg, log);
  Status failure = sup.StartAll();
  int64_t next_progress = t_start;
  int done = 0;
  while (failure.ok() && done < P) {
    if (g_stop_signal != 0) {
      failure = Status::Interrupted(std::string("stopped by ") +
                                    (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM") +
                                    " at step " + std::to_string(Progress(seg)) + " of " +
                                    std::to_string(total_steps));
      break;
    }
    const int r = sup.PollExit(kPollMs);
    losses.Drain();
    if (r >= 0) {
      const Child& ch = sup.child(r);
      const bool clean = WIFEXITED(ch.status) && WEXITSTATUS(ch.status) == 0;
      // A sync worker leaves only after its last step; an async one once the update budget
      // is claimed.
      const bool finished =
          clean && (!sync || shm::LoadPhase(*seg.block(r)) == 2 * static_cast<uint64_t>(total_steps));
      if (finished) {
        ++done;
      } else {
        failure = Status::WorkerFailed("worker " + std::to_string(r) + " (pid " +
                                       std::to_string(ch.pid) + ") " + DescribeExit(ch.status) +
                                       " at step " + std::to_string(Progress(seg)) + " of " +
                                       std::to_string(total_steps) + "; the run was abandoned");
      }
    }
    const int64_t now = shm::MonotonicNs();
    if (now >= next_progress) {
      next_progress = now + kProgressNs;
      const int64_t step = Progress(seg);
      const double el = (now - t_start) / 1e9;
      const double rate = el > 0 ? TotalSamples(seg) / el : 0;
      const double eta = step > 0 ? el * (total_steps - step) / step : NAN;
      const double loss = losses.last_loss();
      log.Progress("step " + std::to_string(step) + "/" + std::to_string(total_steps) +
                   "  loss " + Fmt("%.6g", loss) + "  " + Fmt("%.0f", rate) +
                   " samples/s  ETA " + (std::isfinite(eta) ? Fmt("%.1f", eta) + "s" : "?"));
    }
  }
  if (!failure.ok()) {
    sup.AbortAll();
    log.ClearProgress();
    return failure;  // the segment is removed as `seg` goes out of scope
  }
  losses.Drain();
  log.ClearProgress();
  const int64_t t_end = shm::MonotonicNs();
  if (!sync && Progress(seg) != total_steps) {
    return Status::Internal("async run ended with " + std::to_string(Progress(seg)) +
                            " updates applied, expected " + std::to_string(total_steps));
  }

  Model m;
  m.spec = o.model;
  const float* w = seg.params(sync ? total_steps : 0);
  m.params.assign(w, w + proto.config.param_count);
  const nn::Metrics train_m = nn::Evaluate(o.model, m.params.data(), d.x.data(), d.y.data(), d.rows);
  const nn::Metrics val_m =
      nn::Evaluate(o.model, m.params.data(), rd.val.x.data(), rd.val.y.data(), rd.val.rows);
  const double wall_s = (t_end - t_start) / 1e9;
  const uint64_t samples = TotalSamples(seg);
  uint64_t dropped = 0, tau_sum = 0;
  std::string per_worker = "[";
  for (int r = 0; r < P; ++r) {
    dropped += shm::LoadRelaxed(seg.block(r)->dropped_total);
    tau_sum += shm::LoadRelaxed(seg.block(r)->staleness_sum);
    per_worker += (r ? "," : "") + std::to_string(shm::LoadRelaxed(seg.block(r)->updates_total));
  }
  per_worker += "]";
  const int64_t version = static_cast<int64_t>(shm::LoadAcquire(seg.header()->param_version));
  const int64_t s1 = shm::LoadRelaxed(seg.header()->step1_end_ns);
  const int64_t sl = shm::LoadRelaxed(seg.header()->last_end_ns);
  const double us_per_step = sync ? (total_steps > 1 ? (sl - s1) / 1e3 / (total_steps - 1) : NAN)
                                  : wall_s * 1e6 / total_steps;
  seg.Unlink();

  if (!o.save_path.empty()) {
    if (Status s = SaveModel(o.save_path, m); !s.ok()) return s;
  }
  JsonLine summary("summary");
  summary.Int("steps", total_steps)
      .Num("final_loss", train_m.loss)
      .Num("wall_s", wall_s)
      .Num("samples_per_s", samples / wall_s)
      .Int("workers", P)
      .Num("us_per_step", us_per_step)
      .Str("mode", ToString(o.mode));
  std::string text = "done: " + std::to_string(total_steps) + (sync ? " steps" : " updates") +
                     ", final loss " + Fmt("%.9g", train_m.loss);
  if (!sync) {
    const double mean_tau = static_cast<double>(tau_sum) / total_steps;
    summary.Str("rule", ToString(o.rule))
        .Int("updates", total_steps)
        .Int("param_version", version)
        .Raw("worker_updates", per_worker)
        .Int("dropped", static_cast<int64_t>(dropped))
        .Num("mean_staleness", mean_tau);
    text += " (" + std::string(ToString(o.rule)) + ", mean staleness " + Fmt("%.2f", mean_tau) +
            ", " + std::to_string(dropped) + " dropped)";
  }
  if (rd.val.rows > 0) {
    summary.Num("val_loss", val_m.loss);
    text += ", val loss " + Fmt("%.6g", val_m.loss);
    if (o.model.loss == Loss::kXent) {
      summary.Num("val_accuracy", val_m.accuracy);
      text += ", val accuracy " + Fmt("%.4f", val_m.accuracy);
    } else {
      summary.Num("val_rmse", val_m.rmse);
      text += ", val rmse " + Fmt("%.6g", val_m.rmse);
    }
  }
  text += ", " + Fmt("%.3f", wall_s) + " s, " + Fmt("%.0f", samples / wall_s) + " samples/s, " +
          std::to_string(P) + " worker" + (P == 1 ? "" : "s") + ", " +
          Fmt("%.2f", us_per_step) + " us/step";
  log.Line(text, summary);
  return Status::Ok();
}

}  // namespace shmtrain::master
