#include "master/run.h"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <ctime>
#include <vector>

#include "data/batch_plan.h"
#include "data/dataset.h"
#include "data/preprocess.h"
#include "master/checkpoint.h"
#include "master/evaluator.h"
#include "master/model_file.h"
#include "master/output_path.h"
#include "master/signals.h"
#include "master/supervisor.h"
#include "monitoring/exporter.h"
#include "nn/metrics.h"
#include "nn/optimizer.h"
#include "nn/update.h"
#include "nn/mlp.h"
#include "shm/barrier.h"
#include "shm/futex.h"
#include "shm/segment.h"

namespace shmtrain::master {

volatile std::sig_atomic_t g_stop_signal = 0;
char g_segment_path[256] = "";

namespace {

// "SIGHUP" for 1, for messages.
std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

constexpr int kPollMs = 5;                    // supervisor tick: death is seen at once via pidfd
constexpr int64_t kProgressNs = 200'000'000;  // live line refresh

shm::Header MakeHeader(const TrainOptions& o, const OptimConfig& optim, int64_t rows,
                       int features, int64_t total_steps, int64_t eval_every) {
  shm::Header proto{};
  shm::RunConfig& c = proto.config;
  c.mode = static_cast<uint32_t>(o.mode);
  c.activation = static_cast<uint32_t>(o.model.activation);
  c.loss = static_cast<uint32_t>(o.model.loss);
  c.num_layers = static_cast<uint32_t>(o.model.layers.size());
  std::copy(o.model.layers.begin(), o.model.layers.end(), c.layers);
  c.workers = static_cast<uint32_t>(o.workers);
  c.param_count = o.model.ParamCount();
  c.rows = rows;
  c.features = features;
  c.batch = o.batch;
  c.total_steps = total_steps;
  c.log_every = o.log_every;
  c.seed = o.seed;
  c.optim = optim;
  c.barrier_timeout_s = o.barrier_timeout_s;
  // Spinning pays only while every worker has a core of its own.
  c.spin_ns =
      o.workers <= static_cast<int>(std::thread::hardware_concurrency()) ? 50'000 : 0;
  c.master_pid = getpid();
  c.fault_rank = o.fault_rank;
  c.fault_step = o.fault_step;
  c.fault_point = static_cast<uint32_t>(o.fault_point);
  c.fault_incarnations = static_cast<uint32_t>(o.fault_incarnations);
  c.checkpoint_every = o.mode == Mode::kSync ? o.checkpoint_every : 0;
  c.rule = static_cast<uint32_t>(o.rule);
  c.lambda = o.LambdaOrDefault();
  c.ms_decay = o.ms_decay;
  c.epsilon = o.epsilon;
  c.max_staleness = o.max_staleness;
  c.eval_every = o.mode == Mode::kSync ? eval_every : 0;
  // The snapshot ring: ranks run up to its length in evaluations ahead of the master's copy
  // (its 1 ms look), so a longer ring keeps fast epochs from waiting. Up to 16 snapshots
  // within 32 MiB, never fewer than 2. Early stopping needs exactly 2 (see run loop).
  const uint64_t vec_bytes = (c.param_count * sizeof(float) + shm::kCacheLine - 1) /
                             shm::kCacheLine * shm::kCacheLine;
  c.snapshots = o.early_stop > 0
                    ? 2
                    : std::clamp<int64_t>(static_cast<int64_t>((32u << 20) / vec_bytes), 2, 16);
  proto.stop_eval = shm::kNoStop;
  proto.diverged_step = shm::kNoStop;
  proto.creator_pid = getpid();
  proto.creator_start_time = shm::ProcessStartTime(getpid());
  shm::ComputeLayout(&proto);
  return proto;
}


std::string Bytes(double b) {
  const char* unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? Fmt("%.0f", b) + " bytes" : Fmt("%.1f", b) + " " + unit[u];
}

// MemAvailable of /proc/meminfo in bytes, or 0 if unknown.
uint64_t MemAvailable() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

uint64_t ShmFree() {
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) return UINT64_MAX;  // let shm_open say what is wrong
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}


int64_t EvalEvery(const TrainOptions& o, int64_t rows) {
  if (o.val_split <= 0 && o.val_data_path.empty()) return 0;
  if (o.eval_every > 0) return o.eval_every;
  if (o.batch > 0) return o.StepsPerEpoch(rows);
  return o.log_every > 0 ? o.log_every : 50;
}

Status CheckFits(const std::string& src, int64_t rows, int features, const TrainOptions& o,
                 uint64_t shm_free, uint64_t mem_available) {
  OptimConfig optim;  // its state vectors count towards the segment's size
  if (Status s = nn::ResolveOptim(o, INT64_MAX, &optim); !s.ok()) return s;
  const shm::Header proto = MakeHeader(o, optim, rows, features, 1, EvalEvery(o, rows));
  const uint64_t seg = proto.total_size;
  const double data = static_cast<double>(rows) * (features + 1.0) * sizeof(float);
  const std::string shape = "(" + std::to_string(rows) + " rows x " + std::to_string(features) +
                            " features, and the model)";
  if (seg > shm_free) {
    return Status::Resource(src + ": the run needs a shared memory segment of " + Bytes(seg) +
                            " " + shape + " but /dev/shm has " + Bytes(shm_free) +
                            " free; use fewer rows or features, or enlarge /dev/shm");
  }
  // The master holds a copy of the data besides the segment (whose pages are memory too).
  if (mem_available > 0 && seg + data > static_cast<double>(mem_available)) {
    return Status::Resource(src + ": the run needs about " + Bytes(seg + data) +
                            " of memory (a segment of " + Bytes(seg) + " " + shape +
                            ", plus the master's copy of the data) but " +
                            Bytes(mem_available) + " is available");
  }
  return Status::Ok();
}

}  // namespace

data::LoadOptions LoadOptionsFor(const TrainOptions& o, Task task) {
  data::LoadOptions lo;
  lo.format = o.format;
  lo.label_col = o.label_col;
  lo.label_name = o.label_name;
  lo.header = o.header;
  lo.delimiter = o.delimiter;
  lo.task = task;
  return lo;
}

namespace {

Status LoadData(const TrainOptions& o, data::Dataset* d) {
  const uint64_t shm_free = ShmFree(), mem = MemAvailable();
  if (o.example == "parabola") {
    *d = data::MakeParabola(o.example_rows);
    return Status::Ok();
  }
  if (o.example == "blobs") {
    if (Status s = CheckFits("example blobs", o.example_rows, o.example_features, o, shm_free, mem);
        !s.ok()) {
      return s;
    }
    *d = data::MakeBlobs(o.example_rows, o.example_features, o.model.outputs(), o.seed);
    std::vector<std::string> names;
    for (int k = 0; k < o.model.outputs(); ++k) names.push_back(std::to_string(k));
    d->classes = data::ClassMap::Build({names.begin(), names.end()});
    return Status::Ok();
  }
  // The whole file is read into memory before it is parsed.
  struct stat st {};
  if (::stat(o.data_path.c_str(), &st) == 0 && mem > 0 && static_cast<uint64_t>(st.st_size) > mem) {
    return Status::Resource(o.data_path + ": the file is " + Bytes(static_cast<double>(st.st_size)) +
                            ", more than the " + Bytes(mem) + " of memory available");
  }
  data::LoadOptions lo = LoadOptionsFor(o, TaskOf(o.model.loss));
  // LIBSVM rows are as wide as the model's input (absent indices are 0); a CSV's columns
  // say its width, checked against the model afterwards.
  lo.libsvm_features = o.model.inputs();
  lo.check_size = [&](int64_t rows, int features) {
    return CheckFits(o.data_path, rows, features, o, shm_free, mem);
  };
  return data::LoadFile(o.data_path, lo, d);
}

Status CheckAgainstData(const TrainOptions& o, const data::Dataset& d) {
  const std::string src = o.example.empty() ? o.data_path : "example " + o.example;
  if (o.model.inputs() != d.features) {
    return Status::Usage("--layers: the first size is " + std::to_string(o.model.inputs()) +
                         " but " + src + " has " + std::to_string(d.features) + " feature" +
                         (d.features == 1 ? "" : "s"));
  }
  if (o.model.loss == Loss::kXent && d.classes.size() != o.model.outputs()) {
    return Status::Usage("--layers: the last size is " + std::to_string(o.model.outputs()) +
                         " but " + src + " has " + std::to_string(d.classes.size()) +
                         " classes (" + d.classes.List() + "); make it one output per class");
  }
  if (o.batch > d.rows) {
    return Status::Usage("--batch: " + std::to_string(o.batch) + " is larger than the " +
                         std::to_string(d.rows) + " rows of " + src);
  }
  return Status::Ok();
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
        const int64_t step = next_ * c.log_every;
        log_.Line("step " + std::to_string(step) + " loss " + Fmt("%.9g", rec.loss),
                  JsonLine("step").Int("step", step).Num("loss", rec.loss));
      }
      ++next_;  // a record overwritten before we read it is skipped
    }
  }

 private:
  const shm::Segment& seg_;
  Logger& log_;
  int64_t next_ = 0;
};

Status CheckShmSpace(uint64_t need) {
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0) return Status::Ok();  // let shm_open say what is wrong
  const uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (need > avail) {
    return Status::Resource("the run needs a shared memory segment of " + Bytes(need) +
                            " but /dev/shm has " + Bytes(avail) + " free");
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
  if (!o.val_data_path.empty()) {
    // The held-out file: same format options, the training data's classes and width.
    data::LoadOptions lo = LoadOptionsFor(o, TaskOf(o.model.loss));
    lo.features = rd->train.features;
    if (lo.task == Task::kClassification) lo.classes = &rd->train.classes;
    if (Status s = data::LoadFile(o.val_data_path, lo, &rd->val); !s.ok()) return s;
  }
  rd->norm = data::Normalizer::Fit(rd->train, o.normalize);
  rd->norm.Apply(&rd->train);
  rd->norm.Apply(&rd->val);
  return Status::Ok();
}


Status RunTrain(const TrainOptions& o, Logger& log, Launcher& launcher,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  // Output paths first: a finished run must not be lost to a path that could never be written.
  if (Status s = CheckOutputPath("--save", o.save_path,
                                 {{"--data", o.data_path},
                                  {"--val-data", o.val_data_path},
                                  {"--resume", o.resume_path},
                                  {"--checkpoint", o.checkpoint_path}});
      !s.ok()) {
    return s;
  }
  if (Status s = CheckOutputPath("--checkpoint", o.checkpoint_path,
                                 {{"--data", o.data_path}, {"--val-data", o.val_data_path}});
      !s.ok()) {
    return s;
  }
  // The endpoint next: a taken port fails the run before anything exists to clean up.
  std::unique_ptr<monitoring::Exporter>& exporter = *exporter_out;
  if (o.metrics) {
    if (Status s = monitoring::Exporter::Start(o.metrics_addr, &exporter); !s.ok()) return s;
    InstallSignalHandlers();  // the server's library has just set SIGPIPE to SIG_IGN
  }
  RunData rd;
  if (Status s = PrepareData(o, &rd); !s.ok()) return s;
  const data::Dataset& d = rd.train;
  // Segments left by runs whose master died (SIGKILL, power loss) are ours to reclaim.
  for (const shm::SegmentInfo& gone : shm::ReclaimStaleSegments()) {
    log.Info("removed stale segment /dev/shm/" + gone.name + ": " + gone.why,
             JsonLine("stale_segment_removed").Str("name", gone.name).Str("why", gone.why));
  }
  const int64_t total_steps = o.TotalSteps(d.rows);
  const int P = o.workers;
  const bool sync = o.mode == Mode::kSync;

  const int64_t eval_every = EvalEvery(o, d.rows);
  OptimConfig optim;
  if (Status s = nn::ResolveOptim(o, total_steps, &optim); !s.ok()) return s;
  const shm::Header proto = MakeHeader(o, optim, d.rows, d.features, total_steps, eval_every);
  if (Status s = CheckShmSpace(proto.total_size); !s.ok()) return s;
  // Resuming: the checkpoint must come from this very run (same options and data).
  Checkpoint resume;
  const uint64_t fingerprint = RunFingerprint(o, optim, d);
  if (!o.resume_path.empty()) {
    if (Status s = LoadCheckpoint(o.resume_path, &resume); !s.ok()) return s;
    if (Status s = CheckResumable(resume, o.resume_path, o, optim, fingerprint,
                                  proto.config.param_count);
        !s.ok()) {
      return s;
    }
  }
  const int64_t first = resume.step;

  shm::Segment seg;
  if (Status s = shm::Segment::Create(shm::MakeSegmentName(), proto, &seg); !s.ok()) return s;
  // Declared after seg: cleared before seg removes the segment, on every path out.
  struct SegmentPathForHandlers {
    explicit SegmentPathForHandlers(const std::string& name) {
      std::snprintf(g_segment_path, sizeof g_segment_path, "/dev/shm/%s", name.c_str());
    }
    ~SegmentPathForHandlers() { g_segment_path[0] = '\0'; }
  } segment_path_for_handlers(seg.name());
  std::copy(d.x.begin(), d.x.end(), seg.x());
  std::copy(d.y.begin(), d.y.end(), seg.y());
  seg.header()->config.first_step = first;
  if (o.resume_path.empty()) {
    nn::InitParams(o.model, o.init, o.seed, seg.params(0));
  } else {
    std::copy(resume.params.begin(), resume.params.end(), seg.params(sync ? first : 0));
    for (int k = 0; k < seg.num_states(); ++k) {
      std::copy(resume.states[k].begin(), resume.states[k].end(), seg.state(k, first));
    }
    for (int r = 0; r < P && sync; ++r) seg.block(r)->phase = 2 * static_cast<uint64_t>(first);
    seg.header()->param_version = static_cast<uint64_t>(sync ? 0 : first);
    seg.header()->claimed = static_cast<uint64_t>(sync ? 0 : first);
    seg.header()->released_step = first;
  }
  for (int r = 0; r < P; ++r) {
    seg.slot(r)->step = -1;
    seg.block(r)->ticket = -1;
  }
  if (eval_every > 0) seg.header()->eval_ack = first / eval_every;
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
                   .Int("first_step", first)
                   .Str("mode", ToString(o.mode)));
  if (exporter) {
    const std::string url = "http://" + exporter->address() + "/metrics";
    log.Info("metrics: " + url,
             JsonLine("metrics").Str("address", exporter->address()).Str("url", url));
  }

  // Checkpoints: copies of W (and V) at a step every rank agrees on, written durably. A
  // checkpoint that cannot be written (disk full, directory gone) is logged and counted, and
  // the run goes on: the next one is tried as planned. Non-finite parameters are never
  // written, so the last finite checkpoint stays usable.
  int64_t last_checkpoint = first;
  // W and the optimizer state of buffer `step` (sync), or the given parameters (async).
  auto copy_out = [&](int64_t step, const float* w) {
    Checkpoint c;
    c.params.assign(w, w + proto.config.param_count);
    for (int k = 0; k < seg.num_states(); ++k) {
      c.states.emplace_back(seg.state(k, step), seg.state(k, step) + proto.config.param_count);
    }
    return c;
  };
  auto write_checkpoint = [&](int64_t step, Checkpoint c) -> Status {
    const int64_t t0 = shm::MonotonicNs();
    c.mode = o.mode;
    c.step = step;
    c.fingerprint = fingerprint;
    c.optimizer = nn::Describe(optim);
    bool finite = AllFinite(c.params);
    for (const std::vector<float>& v : c.states) finite = finite && AllFinite(v);
    Status s = finite
                   ? SaveCheckpoint(o.checkpoint_path, c)
                   : Status::Diverged("the parameters at step " + std::to_string(step) +
                                      " are not finite; the checkpoint was not written");
    if (!s.ok()) {
      stats.AddCheckpointFailure();
      log.Info("warning: checkpoint at step " + std::to_string(step) + " failed: " + s.message() +
                    "; training goes on and the next checkpoint is tried as planned",
                JsonLine("checkpoint_failed")
                    .Str("path", o.checkpoint_path)
                    .Int("step", step)
                    .Str("error", s.message()));
      return s;
    }
    const double took = (shm::MonotonicNs() - t0) * 1e-9;
    stats.ObserveCheckpoint(took, static_cast<double>(std::time(nullptr)));
    last_checkpoint = step;
    log.JsonOnly(JsonLine("checkpoint").Str("path", o.checkpoint_path).Int("step", step).Num(
        "seconds", took));
    return Status::Ok();
  };
  // Async: a copy taken while workers update (each element is some recent value).
  auto async_snapshot = [&](int64_t* step) {
    std::vector<float> w(proto.config.param_count);
    *step = Progress(seg);
    for (size_t i = 0; i < w.size(); ++i) w[i] = nn::SharedAccess::Load(seg.params(0) + i);
    return w;
  };

  SupervisorOptions so;
  so.heartbeat_timeout_ns = static_cast<int64_t>(o.heartbeat_timeout_s * 1e9);
  so.max_restarts = o.max_restarts;
  so.restart_window_ns = static_cast<int64_t>(o.restart_window_s * 1e9);
  so.chaos_every_ns = static_cast<int64_t>(o.chaos_every_s * 1e9);
  so.chaos_seed = o.chaos_seed;

  // Validation: snapshots go to the evaluator thread; results come back in order.
  std::unique_ptr<Evaluator> evaluator;
  if (eval_every > 0) evaluator = std::make_unique<Evaluator>(o.model, rd.val);
  const int64_t per_epoch = o.StepsPerEpoch(d.rows);
  int64_t next_eval = first / std::max<int64_t>(eval_every, 1) + 1;  // index of the next snapshot
  EarlyStop best(o.early_stop);
  bool stop_requested = false;
  auto log_validation = [&](int64_t step, const nn::Metrics& m) {
    const bool xent = o.model.loss == Loss::kXent;
    const double epoch = static_cast<double>(step) / per_epoch;
    const std::string epoch_text =
        step % per_epoch == 0 ? std::to_string(step / per_epoch) : Fmt("%.2f", epoch);
    // The gauges first: a reader of the log line finds them already set.
    stats.SetValidation(m.loss, xent ? m.accuracy : m.rmse);
    JsonLine j("validation");
    j.Int("step", step).Num("epoch", epoch).Num("val_loss", m.loss);
    xent ? j.Num("val_accuracy", m.accuracy) : j.Num("val_rmse", m.rmse);
    log.Line("validation at step " + std::to_string(step) + " (epoch " + epoch_text +
                 "): val loss " + Fmt("%.6g", m.loss) +
                 (xent ? ", val accuracy " + Fmt("%.4f", m.accuracy)
                       : ", val rmse " + Fmt("%.6g", m.rmse)),
             j);
  };
  // Sync with --early-stop (a ring of 2): snapshot k is acked only once it is evaluated, so no
  // rank passes the stop check of eval k + 2 before the master has decided on eval k, and an early stop
  // named there (k + 2) lands at the same step in every run. Without early stopping it is
  // acked as soon as it is copied.
  const bool ack_after_eval = sync && o.early_stop > 0;
  int64_t acked = first / std::max<int64_t>(eval_every, 1);
  auto on_results = [&](std::vector<Evaluator::Result> results) {
    for (Evaluator::Result& r : results) {
      log_validation(r.step, r.metrics);
      const int64_t k = r.index;
      if (best.Observe(r.step, r.metrics, std::move(r.params)) && !stop_requested) {
        stop_requested = true;
        shm::RequestStop(seg.header(), sync ? k + 2 : 0);
        // Sync ranks still run to the eval step k + 2 (and async ones finish their updates),
        // and those evaluations may still find a better model: the line says "so far", and
        // the end of the run names the model kept.
        const std::string until =
            sync ? "at step " + std::to_string(std::min(total_steps, (k + 2) * eval_every))
                 : "at the workers' next update";
        log.Info("early stop: no better validation loss in " + std::to_string(o.early_stop) +
                     " evaluations (best so far " + Fmt("%.6g", best.loss()) + " at step " +
                     std::to_string(best.step()) + "); training stops " + until,
                 JsonLine("early_stop").Int("best_step", best.step()).Num("best_val_loss",
                                                                          best.loss()));
      }
      if (ack_after_eval) {
        shm::AckEval(seg.header(), k);
        acked = k;
      }
    }
  };
  auto poll_evals = [&] {
    if (!evaluator) return;
    if (sync) {
      while (next_eval * eval_every < total_steps) {
        bool all = true;
        for (int r = 0; r < P && all; ++r) {
          all = shm::LoadAcquire(seg.block(r)->snap_eval) >= next_eval;
        }
        if (!all) break;
        const float* e = seg.snapshot(next_eval);
        std::vector<float> w(e, e + proto.config.param_count);
        if (!ack_after_eval) shm::AckEval(seg.header(), next_eval);
        evaluator->Submit(next_eval, next_eval * eval_every, std::move(w));
        ++next_eval;
      }
    } else if (!stop_requested && next_eval * eval_every < total_steps &&
               Progress(seg) >= next_eval * eval_every) {
      int64_t step = 0;
      std::vector<float> w = async_snapshot(&step);
      // The run may have reached its end meanwhile: the final evaluation covers that.
      if (step < total_steps) evaluator->Submit(next_eval, step, std::move(w));
      next_eval = step / eval_every + 1;
    }
    on_results(evaluator->Take());
  };

  const int64_t t_start = shm::MonotonicNs();
  Supervisor sup(seg, launcher, log, stats, so);
  LossLog losses(seg, log);
  Status failure = sup.StartAll();
  int64_t next_progress = t_start;
  const int64_t every = o.checkpoint_every;
  // The next periodic checkpoint: it moves on after each attempt, whether it succeeded or not
  // (sync ranks pause at every multiple of `every` until the master releases them).
  int64_t next_checkpoint = every > 0 ? (first / every + 1) * every : INT64_MAX;
  for (;;) {
    if (!failure.ok()) break;
    if (g_stop_signal != 0) {
      failure = Status::Interrupted("stopped by " + SignalName(g_stop_signal) + " at step " +
                                    std::to_string(Progress(seg)) + " of " +
                                    std::to_string(total_steps));
      break;
    }
    if (o.fault_master_throw >= 0 && Progress(seg) >= o.fault_master_throw) {
      throw std::bad_alloc();  // test hook: any exception must end in the normal cleanup
    }
    // Sync ranks may be waiting for a snapshot's ack: look every millisecond while they
    // validate (with early stopping: while an evaluation is out).
    const bool soon = eval_every > 0 && sync && (!ack_after_eval || acked < next_eval - 1);
    failure = sup.Tick(soon ? 1 : kPollMs);
    losses.Drain();
    poll_evals();
    if (!failure.ok()) break;
    if (sup.AllFinished()) {
      if (!sync) sup.Reconcile();
      if (sync || stop_requested || Progress(seg) >= total_steps) break;
      // Async: updates whose tickets died with a worker are still owed.
      failure = sup.ResumeAsync();
      continue;
    }
    const int64_t progress = Progress(seg);
    if (every > 0 && sync) {
      // Every rank pauses before step next (worker/sync_loop.cc) until it is released.
      const int64_t next = next_checkpoint;
      if (next < total_steps && progress == next) {
        bool all_paused = true;
        for (int r = 0; r < P; ++r) {
          all_paused &= shm::LoadPhase(*seg.block(r)) == 2 * static_cast<uint64_t>(next);
        }
        if (all_paused) {
          Checkpoint copy = copy_out(next, seg.params(next));
          shm::ReleaseCheckpoint(seg.header(), next);  // the copy is taken: train on
          next_checkpoint += every;
          write_checkpoint(next, std::move(copy));
        }
      }
    } else if (every > 0 && progress >= next_checkpoint && progress < total_steps) {
      int64_t step = 0;
      const std::vector<float> w = async_snapshot(&step);
      next_checkpoint = (step / every + 1) * every;
      write_checkpoint(step, copy_out(step, w.data()));
    }
    const int64_t now = shm::MonotonicNs();
    if (now >= next_progress) {
      next_progress = now + kProgressNs;
      const double el = (now - t_start) / 1e9;
      const double rate = el > 0 ? TotalSamples(seg) / el : 0;
      const double eta =
          progress > first ? el * (total_steps - progress) / (progress - first) : NAN;
      // The loss of the latest step (sync) or update (async), as the metrics endpoint shows it,
      // whatever --log-every is; "?" until the first one.
      const double loss = shm::LoadRelaxed(seg.header()->last_loss);
      log.Progress("step " + std::to_string(progress) + "/" + std::to_string(total_steps) +
                   "  loss " + (progress > first ? Fmt("%.6g", loss) : std::string("?")) +
                   "  " + Fmt("%.0f", rate) +
                   " samples/s  ETA " + (std::isfinite(eta) ? Fmt("%.1f", eta) + "s" : "?"));
    }
  }
  if (!failure.ok()) {
    sup.AbortAll();
    log.ClearProgress();
    // Stopped by a signal with a checkpoint configured: every worker is gone, so the state is
    // frozen. Sync: W[t%2] at the lowest completed step t is intact (only step t+1's update
    // would overwrite it, and that needs every rank past step t+1's gradient).
    if (failure.code() == Status::Code::kInterrupted && !o.checkpoint_path.empty()) {
      Status s;
      if (sync) {
        const int64_t t = Progress(seg);
        s = write_checkpoint(t, copy_out(t, seg.params(t)));
      } else {
        int64_t step = 0;
        const std::vector<float> w = async_snapshot(&step);
        s = write_checkpoint(step, copy_out(step, w.data()));
      }
      if (s.ok()) log.Info("checkpoint written to " + o.checkpoint_path + " at step " +
                    std::to_string(last_checkpoint),
                    JsonLine("checkpoint_on_stop").Str("path", o.checkpoint_path).Int(
                        "step", last_checkpoint));
    }
    return failure;  // the segment is removed as `seg` goes out of scope
  }
  losses.Drain();
  log.ClearProgress();
  const int64_t t_end = shm::MonotonicNs();
  // Where training ended: total_steps, or earlier after an early stop.
  const int64_t end_step = Progress(seg);
  if (!sync && !stop_requested && end_step != total_steps) {
    return Status::Internal("async run ended with " + std::to_string(end_step) +
                            " updates applied, expected " + std::to_string(total_steps));
  }
  if (evaluator) on_results(evaluator->Finish());

  Model m;
  m.spec = o.model;
  m.norm = rd.norm;
  m.classes = d.classes;
  const float* w = seg.params(sync ? end_step : 0);
  m.params.assign(w, w + proto.config.param_count);
  nn::Metrics val_m =
      nn::Evaluate(o.model, m.params.data(), rd.val.x.data(), rd.val.y.data(), rd.val.rows);
  if (evaluator) {
    log_validation(end_step, val_m);
    best.Observe(end_step, val_m, {});
    // With --early-stop the model kept is the one with the best validation loss.
    if (o.early_stop > 0 && best.step() != end_step) {
      m.params = best.params();
      val_m = best.metrics();
    }
    if (stop_requested) {
      log.Info("early stop: keeping the model of step " + std::to_string(best.step()) +
                   " (val loss " + Fmt("%.6g", best.loss()) + "), the best evaluated",
               JsonLine("early_stop_model").Int("best_step", best.step()).Num("best_val_loss",
                                                                              best.loss()));
    }
  }
  const nn::Metrics train_m = nn::Evaluate(o.model, m.params.data(), d.x.data(), d.y.data(), d.rows);
  const double wall_s = (t_end - t_start) / 1e9;
  const uint64_t samples = TotalSamples(seg);
  std::vector<double> rec = sup.recoveries();
  std::sort(rec.begin(), rec.end());
  uint64_t dropped = 0, tau_sum = 0;
  std::string per_worker = "[";
  for (int r = 0; r < P; ++r) {
    dropped += shm::LoadRelaxed(seg.block(r)->dropped_total);
    tau_sum += shm::LoadRelaxed(seg.block(r)->staleness_sum);
    per_worker += (r ? "," : "") + std::to_string(shm::LoadRelaxed(seg.block(r)->commit) / 2);
  }
  per_worker += "]";
  const int64_t version = static_cast<int64_t>(shm::LoadAcquire(seg.header()->param_version));
  const int64_t s1 = shm::LoadRelaxed(seg.header()->step1_end_ns);
  const int64_t sl = shm::LoadRelaxed(seg.header()->last_end_ns);
  const int64_t steps_run = std::max<int64_t>(end_step - first, 1);
  const double us_per_step =
      sync ? (steps_run > 1 && s1 > 0 && sl >= s1 ? (sl - s1) / 1e3 / (steps_run - 1) : NAN)
           : wall_s * 1e6 / steps_run;
  seg.Unlink();
  g_segment_path[0] = '\0';

  // Workers stop at the first non-finite loss or gradient; this guards what they cannot see
  // (an update that overflowed at the very last step): no non-finite model is ever written.
  if (!AllFinite(m.params)) {
    return Status::Diverged("training diverged: the parameters after step " +
                            std::to_string(end_step) +
                            " are not finite (NaN or infinite); the learning rate (--lr " +
                            Fmt("%g", o.lr) + ") is probably too large; no model was saved");
  }
  if (!o.save_path.empty()) {
    if (Status s = SaveModel(o.save_path, m); !s.ok()) return s;
  }
  JsonLine summary("summary");
  summary.Int("steps", end_step)
      .Num("final_loss", train_m.loss)
      .Num("wall_s", wall_s)
      .Num("samples_per_s", samples / wall_s)
      .Int("workers", P)
      .Num("us_per_step", us_per_step)
      .Str("mode", ToString(o.mode))
      .Int("first_step", first)
      .Int("restarts", sup.restarts())
      .Int("torn_updates", sup.torn_updates())
      .Int("recoveries", static_cast<int64_t>(rec.size()))
      .Num("recovery_median_s", rec.empty() ? NAN : rec[rec.size() / 2])
      .Num("recovery_max_s", rec.empty() ? NAN : rec.back());
  std::string text = "done: " + std::to_string(end_step) + (sync ? " steps" : " updates") +
                     ", final loss " + Fmt("%.9g", train_m.loss);
  if (o.early_stop > 0) {
    summary.Raw("stopped_early", stop_requested ? "true" : "false").Int("best_step", best.step());
    text += stop_requested ? " (stopped early; model of step " + std::to_string(best.step()) + ")"
                           : " (model of step " + std::to_string(best.step()) + ")";
  }
  if (!sync) {
    const double mean_tau = static_cast<double>(tau_sum) / std::max<int64_t>(end_step, 1);
    summary.Str("rule", ToString(o.rule))
        .Int("updates", end_step)
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
