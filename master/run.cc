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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32.h"
#include "data/arrays.h"
#include "data/batch_plan.h"
#include "data/dataset.h"
#include "data/preprocess.h"
#include "master/checkpoint.h"
#include "master/checkpoint_policy.h"
#include "master/combiner.h"
#include "master/model_file.h"
#include "master/output_path.h"
#include "master/run_summary.h"
#include "master/segment_reads.h"
#include "master/signals.h"
#include "master/supervisor.h"
#include "master/validation.h"
#include "monitoring/exporter.h"
#include "nn/metrics.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"
#include "nn/model.h"
#include "shm/futex.h"
#include "shm/segment.h"

namespace shmtrain::master {

std::atomic<int> g_stop_signal{0};
char g_segment_path[256] = "";

namespace {

// "SIGHUP" for 1, for messages.
std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

constexpr int kPollMs = 5;                    // supervisor tick: death is seen at once via pidfd
constexpr int64_t kProgressNs = 200'000'000;  // live line refresh

shm::Header MakeHeader(const TrainOptions& o, const OptimConfig& optim, int64_t rows,
                       int features, int64_t total_steps, int64_t eval_every) {
  shm::Header proto{};
  shm::RunConfig& c = proto.config;
  c.mode = static_cast<uint32_t>(o.mode);
  c.loss = static_cast<uint32_t>(o.model.loss);
  c.input_shape[0] = o.model.input.c;
  c.input_shape[1] = o.model.input.h;
  c.input_shape[2] = o.model.input.w;
  const std::string text = o.model.Text();  // shorter than the field (TrainOptions::Validate)
  std::snprintf(c.model, sizeof c.model, "%s", text.c_str());
  c.workers = static_cast<uint32_t>(o.workers);
  c.hosts = static_cast<uint32_t>(o.host_count);
  c.host_index = static_cast<uint32_t>(o.host_index);
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
  c.spin_ns = o.workers * o.host_local_count <=
                      static_cast<int>(std::thread::hardware_concurrency())
                  ? 50'000
                  : 0;
  c.master_pid = getpid();
  c.fault_rank = o.host_index == o.fault_host ? o.fault_rank : -1;
  c.fault_step = o.fault_step;
  c.fault_point = static_cast<uint32_t>(o.fault_point);
  c.fault_incarnations = static_cast<uint32_t>(o.fault_incarnations);
  c.checkpoint_every = o.checkpoint_every;
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
  if (statvfs("/dev/shm", &vfs) != 0) return UINT64_MAX;  // let the segment's creation say what is wrong
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}


int64_t EvalEvery(const TrainOptions& o, int64_t rows) {
  if (o.val_split <= 0 && o.val_data_path.empty()) return 0;
  if (o.eval_every > 0) return o.eval_every;
  if (o.batch > 0) return o.StepsPerEpoch(rows);
  return o.log_every > 0 ? o.log_every : 50;
}

// The memory check of train, eval and predict: the data as float32 with its targets (the
// master's copy), plus the segment (whose pages are memory too; 0 outside train).
Status FitsInMemory(const std::string& src, int64_t rows, int features, uint64_t seg,
                    uint64_t mem_available) {
  const double data = static_cast<double>(rows) * (features + 1.0) * sizeof(float);
  if (mem_available == 0 || seg + data <= static_cast<double>(mem_available)) return Status::Ok();
  const std::string shape = "(" + std::to_string(rows) + " rows x " + std::to_string(features) +
                            " features" + (seg > 0 ? ", and the model)" : ")");
  const std::string parts =
      seg > 0 ? "a segment of " + Bytes(seg) + " " + shape + ", plus the master's copy of the data"
              : "the data as 32-bit floats " + shape;
  return Status::Resource(src + ": the run needs about " + Bytes(seg + data) + " of memory (" +
                          parts + ") but " + Bytes(mem_available) + " is available");
}

// The model's inputs against the data's features.
Status CheckInputs(const TrainOptions& o, const std::string& src, int features) {
  if (o.model.inputs() == features) return Status::Ok();
  const std::string has = src + " has " + std::to_string(features) + " feature" +
                          (features == 1 ? "" : "s");
  if (o.model_text.empty()) {
    return Status::Usage("--layers: the first size is " + std::to_string(o.model.inputs()) +
                         " but " + has);
  }
  return Status::Usage(std::string(o.input_shape.c > 0 ? "--input-shape" : "--model") +
                       ": the input " + o.model.input.Text() + " is " +
                       std::to_string(o.model.inputs()) + " values but " + has);
}

// A --model whose input the data gives: flat, its rows' width (known once a file's first rows
// are read).
TrainOptions WithFlatInput(const TrainOptions& o, int features) {
  TrainOptions probe = o;
  if (probe.model.input.c == 0) probe.model.input = {features, 1, 1};
  return probe;
}

Status CheckFits(const std::string& src, int64_t rows, int features, const TrainOptions& o,
                 uint64_t shm_free, uint64_t mem_available) {
  OptimConfig optim;  // its state vectors count towards the segment's size
  if (Status s = nn::ResolveOptim(o, INT64_MAX, &optim); !s.ok()) return s;
  const shm::Header proto = MakeHeader(o, optim, rows, features, 1, EvalEvery(o, rows));
  const uint64_t seg = proto.total_size;
  const std::string shape = "(" + std::to_string(rows) + " rows x " + std::to_string(features) +
                            " features, and the model)";
  if (seg > shm_free) {
    return Status::Resource(src + ": the run needs a shared memory segment of " + Bytes(seg) +
                            " " + shape + " but /dev/shm has " + Bytes(shm_free) +
                            " free; use fewer rows or features, or enlarge /dev/shm");
  }
  return FitsInMemory(src, rows, features, seg, mem_available);
}

}  // namespace

Status CheckMemory(const std::string& src, int64_t rows, int features) {
  return FitsInMemory(src, rows, features, 0, MemAvailable());
}

data::LoadOptions LoadOptionsFor(const TrainOptions& o, Task task) {
  data::LoadOptions lo;
  lo.format = o.format;
  lo.label_col = o.label_col;
  lo.label_name = o.label_name;
  lo.header = o.header;
  lo.delimiter = o.delimiter;
  lo.decimal = o.decimal;
  lo.labels_path = o.labels_path;
  lo.x_key = o.npz_x;
  lo.y_key = o.npz_y;
  lo.task = task;
  return lo;
}

namespace {

// The data, checked against /dev/shm and the memory before a row is made or read: the run's
// one look at either. The segment laid out then holds every row, so the one the run creates
// (from the training rows alone) is never larger.
Status LoadData(const TrainOptions& o, data::Dataset* d) {
  const uint64_t shm_free = ShmFree(), mem = MemAvailable();
  if (!o.example.empty()) {
    const int features = o.example == "blobs" ? o.example_features : 1;
    if (Status s = CheckFits("example " + o.example, o.example_rows, features, o, shm_free, mem);
        !s.ok()) {
      return s;
    }
  }
  if (o.example == "parabola") {
    *d = data::MakeParabola(o.example_rows);
    return Status::Ok();
  }
  if (o.example == "blobs") {
    *d = data::MakeBlobs(o.example_rows, o.example_features, o.model.outputs(), o.seed);
    std::vector<std::string> names;
    for (int k = 0; k < o.model.outputs(); ++k) names.push_back(std::to_string(k));
    d->classes = data::ClassMap::Build({names.begin(), names.end()});
    return Status::Ok();
  }
  // Files are read a block at a time: only the rows' floats must fit, which check_size
  // judges once the shape is known, before a row is stored.
  data::LoadOptions lo = LoadOptionsFor(o, TaskOf(o.model.loss));
  // LIBSVM rows are as wide as the model's input (absent indices are 0); a CSV's columns
  // say its width, checked against the model afterwards.
  lo.libsvm_features = static_cast<int>(o.model.inputs());
  lo.check_size = [&](int64_t rows, int features) {
    // The width is known before a row is read: a mismatch is refused before memory is spent.
    const TrainOptions probe = WithFlatInput(o, features);
    if (o.model.input.c == 0) {
      if (Status s = CheckModel(probe.model, "--model"); !s.ok()) return s;
    }
    if (Status s = CheckInputs(probe, o.data_path, features); !s.ok()) return s;
    return CheckFits(o.data_path, rows, features, probe, shm_free, mem);
  };
  return data::LoadFile(o.data_path, lo, d);
}

Status CheckAgainstData(const TrainOptions& o, const data::Dataset& d) {
  const std::string src = o.example.empty() ? o.data_path : "example " + o.example;
  if (Status s = CheckInputs(o, src, d.features); !s.ok()) return s;
  if (o.model.loss == Loss::kXent && d.classes.size() != o.model.outputs()) {
    const std::string says = o.model_text.empty() ? "--layers: the last size is "
                                                  : "--model: the model's outputs are ";
    return Status::Usage(says + std::to_string(o.model.outputs()) + " but " + src + " has " +
                         std::to_string(d.classes.size()) + " classes (" + d.classes.List() +
                         "); make it one output per class");
  }
  if (o.batch > d.rows) {
    return Status::Usage("--batch: " + std::to_string(o.batch) + " is larger than the " +
                         std::to_string(d.rows) + " rows of " + src);
  }
  return Status::Ok();
}

// Prints the loss records published since the last call: sync, by rank 0 for every logged
// step; async, by whichever worker's update got a logged version number. A resumed run's
// first record is that of the first logged step at or after the step it resumed from.
class LossLog {
 public:
  LossLog(const shm::Segment& seg, Logger& log, int64_t first_step) : seg_(seg), log_(log) {
    const int64_t every = seg.header()->config.log_every;
    if (every > 0) next_ = (first_step + every - 1) / every;
  }
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
        // The rate of the step: in JSON always; in text when the schedule changes it, so a
        // constant-rate run's lines stay "step S loss L".
        const double lr = nn::LearningRate(c.optim, step);
        const bool varies = nn::RateVaries(c.optim);
        log_.Line("step " + std::to_string(step) + " loss " + Fmt("%.9g", rec.loss) +
                      (varies ? " lr " + Fmt("%.6g", lr) : std::string()),
                  JsonLine("step").Int("step", step).Num("loss", rec.loss).Num("lr", lr));
      }
      if (tag > static_cast<uint64_t>(next_ + 1)) ++lost_;  // overwritten before we read it
      ++next_;
    }
  }
  // The records the workers overwrote before the master read them (the ring holds
  // shm::kLossRing): their lines are missing, and the run says so once, at its end.
  void ReportLost() const {
    if (lost_ == 0) return;
    log_.Info("warning: the losses of " + std::to_string(lost_) +
                  " logged steps were overwritten before they were printed (the workers "
                  "logged faster than the master ran; the ring holds the last " +
                  std::to_string(shm::kLossRing) + "): a larger --log-every keeps every line",
              JsonLine("log_lines_lost").Int("count", lost_));
  }

 private:
  const shm::Segment& seg_;
  Logger& log_;
  int64_t next_ = 0;
  int64_t lost_ = 0;
};

}  // namespace

// A --model's input shape when --input-shape did not give it: the built-in examples are flat;
// an IDX or NumPy file's header gives one sample's shape ((H, W) is 1xHxW, (C, H, W) is
// CxHxW); other data is flat, its width known once its first rows are read (LoadData).
namespace {

Status ResolveInputBeforeLoading(TrainOptions& o) {
  if (o.model.input.c > 0) return Status::Ok();
  if (o.example == "parabola") {
    o.model.input = {1, 1, 1};
  } else if (o.example == "blobs") {
    o.model.input = {o.example_features, 1, 1};
  } else {
    std::vector<int64_t> dims;
    const data::LoadOptions lo = LoadOptionsFor(o, TaskOf(o.model.loss));
    if (Status s = data::SampleShape(o.data_path, lo, &dims); !s.ok()) return s;
    if (dims.size() == 2) o.model.input = {1, dims[0], dims[1]};
    if (dims.size() == 3) o.model.input = {dims[0], dims[1], dims[2]};
  }
  if (o.model.input.c == 0) return Status::Ok();
  return CheckModel(o.model, "--model");
}

}  // namespace

Status PrepareData(TrainOptions& o, RunData* rd) {
  if (Status s = ResolveInputBeforeLoading(o); !s.ok()) return s;
  data::Dataset all;
  if (Status s = LoadData(o, &all); !s.ok()) return s;
  if (o.model.input.c == 0) {
    // Flat data: the model's input is a row (LoadData's check_size has checked that it fits).
    o.model.input = {all.features, 1, 1};
    if (Status s = CheckModel(o.model, "--model"); !s.ok()) return s;
  }
  if (Status s = data::SplitValidation(std::move(all), o.val_split, o.seed, &rd->train, &rd->val); !s.ok()) {
    return s;
  }
  if (Status s = CheckAgainstData(o, rd->train); !s.ok()) return s;
  if (!o.val_data_path.empty()) {
    // The held-out file: same format options, the training data's classes and width.
    data::LoadOptions lo = LoadOptionsFor(o, TaskOf(o.model.loss));
    lo.features = rd->train.features;
    lo.labels_path = o.val_labels_path;
    lo.x_key = o.val_npz_x;
    lo.y_key = o.val_npz_y;
    if (lo.task == Task::kClassification) lo.classes = &rd->train.classes;
    if (Status s = data::LoadFile(o.val_data_path, lo, &rd->val); !s.ok()) return s;
  }
  rd->norm = data::Normalizer::Fit(rd->train, o.normalize);
  rd->norm.Apply(&rd->train);
  rd->norm.Apply(&rd->val);
  return Status::Ok();
}


namespace {

// Output paths first: a finished run must not be lost to a path that could never be written,
// nor to another run writing the same one (they stay locked until the run ends).
Status CheckOutputPaths(const TrainOptions& o, OutputLock (&locks)[2]) {
  if (Status s = CheckOutputPath("--save", o.save_path,
                                 {{"--data", o.data_path},
                                  {"--labels", o.labels_path},
                                  {"--val-data", o.val_data_path},
                                  {"--val-labels", o.val_labels_path},
                                  {"--resume", o.resume_path},
                                  {"--checkpoint", o.checkpoint_path}});
      !s.ok()) {
    return s;
  }
  if (Status s = CheckOutputPath("--checkpoint", o.checkpoint_path,
                                 {{"--data", o.data_path},
                                  {"--labels", o.labels_path},
                                  {"--val-data", o.val_data_path},
                                  {"--val-labels", o.val_labels_path}});
      !s.ok()) {
    return s;
  }
  if (Status s = OutputLock::Acquire("--save", o.save_path, &locks[0]); !s.ok()) return s;
  return OutputLock::Acquire("--checkpoint", o.checkpoint_path, &locks[1]);
}

// Segments left by runs whose master died (SIGKILL, power loss) are ours to reclaim.
void ReclaimStale(Logger& log) {
  for (const shm::SegmentInfo& gone : shm::ReclaimStaleSegments()) {
    log.Info("removed stale segment /dev/shm/" + gone.name + ": " + gone.why,
             JsonLine("stale_segment_removed").Str("name", gone.name).Str("why", gone.why));
  }
}

// Names the segment in g_segment_path for main's last-resort handlers. Declared right after
// the segment: cleared before the segment is removed, on every path out.
class SegmentPathForHandlers {
 public:
  explicit SegmentPathForHandlers(const std::string& name) {
    std::snprintf(g_segment_path, sizeof g_segment_path, "/dev/shm/%s", name.c_str());
  }
  ~SegmentPathForHandlers() { g_segment_path[0] = '\0'; }
  SegmentPathForHandlers(const SegmentPathForHandlers&) = delete;
  SegmentPathForHandlers& operator=(const SegmentPathForHandlers&) = delete;
};

// Stops the exporter's reads of the run. Declared after the segment and the stats: destroyed
// first, so no scrape reads them once they are gone.
class DetachOnExit {
 public:
  explicit DetachOnExit(monitoring::Exporter* e) : e_(e) {}
  ~DetachOnExit() {
    if (e_) e_->Detach();
  }
  DetachOnExit(const DetachOnExit&) = delete;
  DetachOnExit& operator=(const DetachOnExit&) = delete;

 private:
  monitoring::Exporter* e_;
};

// A fresh segment, before any worker starts: the training rows, and the state the run starts
// from (initial parameters, or the resumed checkpoint's state and protocol words).
// Copies the training rows into the segment and frees the master's own copy of them: from
// here on the segment holds the only one (the run reads them there), so a large dataset is in
// memory once, not twice, for the whole run.
void FillSegment(const TrainOptions& o, data::Dataset* d, const Checkpoint& resume,
                 shm::Segment* seg) {
  std::copy(d->x.begin(), d->x.end(), seg->x());
  std::copy(d->y.begin(), d->y.end(), seg->y());
  std::vector<float>().swap(d->x);
  std::vector<float>().swap(d->y);
  seg->header()->config.first_step = resume.step;
  seg->header()->combined_step = resume.step - 1;
  if (o.resume_path.empty()) {
    nn::InitParams(o.model, o.init, o.seed, seg->params(0));
  } else {
    ResumeInto(resume, seg);
  }
  for (int r = 0; r < o.workers; ++r) {
    seg->slot(r)->step = -1;
    seg->block(r)->ticket = -1;
  }
}

void LogSegment(const TrainOptions& o, const RunData& rd, const shm::Segment& seg,
                const monitoring::Exporter* exporter, Logger& log) {
  const shm::RunConfig& c = seg.header()->config;
  log.JsonOnly(JsonLine("segment")
                   .Str("name", seg.name())
                   .Int("bytes", static_cast<int64_t>(seg.size()))
                   .Int("params", static_cast<int64_t>(c.param_count))
                   .Int("rows", rd.train.rows)
                   .Int("val_rows", rd.val.rows)
                   .Int("steps", c.total_steps)
                   .Int("first_step", c.first_step)
                   .Str("mode", ToString(o.mode)));
  if (exporter) {
    const std::string url = "http://" + exporter->address() + "/metrics";
    log.Info("metrics: " + url,
             JsonLine("metrics").Str("address", exporter->address()).Str("url", url));
  }
}

SupervisorOptions SupervisorOptionsFor(const TrainOptions& o) {
  SupervisorOptions so;
  so.heartbeat_timeout_ns = static_cast<int64_t>(o.heartbeat_timeout_s * 1e9);
  so.max_restarts = o.max_restarts;
  so.restart_window_ns = static_cast<int64_t>(o.restart_window_s * 1e9);
  so.chaos_every_ns = static_cast<int64_t>(o.chaos_every_s * 1e9);
  so.chaos_seed = o.chaos_seed;
  so.divergence_hint = o.DivergenceHint();
  return so;
}

// The live line on a terminal: step, loss, samples/s and ETA, refreshed every kProgressNs.
class ProgressLine {
 public:
  ProgressLine(const shm::Segment& seg, Logger& log, int64_t first_step, int64_t total_steps,
               int64_t t_start)
      : seg_(seg),
        log_(log),
        first_(first_step),
        total_(total_steps),
        t_start_(t_start),
        next_ns_(t_start) {}

  void Update(int64_t progress) {
    const int64_t now = shm::MonotonicNs();
    if (now < next_ns_) return;
    next_ns_ = now + kProgressNs;
    const double el = (now - t_start_) / 1e9;
    const double rate = el > 0 ? TotalSamples(seg_) / el : 0;
    const double eta = progress > first_ ? el * (total_ - progress) / (progress - first_) : NAN;
    // The loss of the latest step (sync) or update (async), as the metrics endpoint shows it,
    // whatever --log-every is; "?" until the first one.
    const double loss = shm::LoadRelaxed(seg_.header()->last_loss);
    const auto& optim = seg_.header()->config.optim;
    const double lr = nn::LearningRateAfter(optim, progress);
    log_.Progress("step " + std::to_string(progress) + "/" + std::to_string(total_) +
                  "  loss " + (progress > first_ ? Fmt("%.6g", loss) : std::string("?")) +
                  "  lr " + Fmt("%.4g", lr) + "  " +
                  Fmt("%.0f", rate) + " samples/s  ETA " +
                  (std::isfinite(eta) ? Fmt("%.1f", eta) + "s" : "?"));
  }

 private:
  const shm::Segment& seg_;
  Logger& log_;
  int64_t first_, total_, t_start_;
  int64_t next_ns_;
};

// This host's share of the run's outputs: only host 0 writes the model and checkpoints (every
// host holds the same parameters at every step), so the others neither pause for checkpoints
// nor check output paths they will not write.
TrainOptions ForThisHost(const TrainOptions& opts) {
  TrainOptions o = opts;
  if (o.host_index != 0) {
    o.save_path.clear();
    o.checkpoint_path.clear();
    o.checkpoint_every = 0;
  }
  return o;
}

// This host's start: the checks, the data, the resumed checkpoint and the segment, made and
// filled. Its members are what the run loop's units are built from; destroying it removes the
// segment, so a start that fails anywhere leaves nothing behind.
struct Start {
  OutputLock output_locks[2];  // --save, --checkpoint: held for the run's life
  RunData rd;
  int64_t total_steps = 0;
  int64_t eval_every = 0;
  OptimConfig optim;
  uint64_t fingerprint = 0;
  std::string optimizer;
  Checkpoint resume;
  shm::Segment seg;
  std::optional<SegmentPathForHandlers> seg_path;  // set once seg exists
};

Status StartHere(TrainOptions& o, Logger& log, std::unique_ptr<monitoring::Exporter>* exporter,
                 Start* st) {
  if (Status s = CheckOutputPaths(o, st->output_locks); !s.ok()) return s;
  // The endpoint next: a taken port fails the run before anything exists to clean up.
  if (o.metrics) {
    if (Status s = StartHostMetrics(o.metrics_addr, o.host_local, exporter); !s.ok()) return s;
    InstallSignalHandlers();  // the server's library has just set SIGPIPE to SIG_IGN
  }
  if (Status s = PrepareData(o, &st->rd); !s.ok()) return s;
  ReclaimStale(log);
  const data::Dataset& d = st->rd.train;
  st->total_steps = o.TotalSteps(d.rows);
  st->eval_every = EvalEvery(o, d.rows);
  if (Status s = nn::ResolveOptim(o, st->total_steps, &st->optim); !s.ok()) return s;
  const shm::Header proto =
      MakeHeader(o, st->optim, d.rows, d.features, st->total_steps, st->eval_every);
  // Resuming: the checkpoint must come from this very run (same options and data).
  st->fingerprint = RunFingerprint(o, st->optim, d);
  st->optimizer = nn::Describe(st->optim);
  if (!o.resume_path.empty()) {
    if (Status s = LoadResume(o.resume_path, o.mode, st->fingerprint, st->optimizer, proto,
                              st->total_steps, &st->resume);
        !s.ok()) {
      return s;
    }
  }
  if (Status s = shm::Segment::Create(shm::MakeSegmentName(), proto, &st->seg); !s.ok()) return s;
  st->seg_path.emplace(st->seg.name());
  FillSegment(o, &st->rd.train, st->resume, &st->seg);
  return Status::Ok();
}

// Several hosts: every host brings its start to one exchange, failed or not, so that a host
// whose start failed (a missing file, a taken port) ends every host's start the same way: each
// removes its segment and leaves the job (README "Several hosts"). The started hosts must start
// the same run (options, data, validation and length) from the same state, or their sums would
// mix different models: kUsage naming a host that differs, kHostLost when one does not answer.
// In json mode every started host names its segment and pid (the "host" event), so that an
// operator (or a test) can find its workers.
Status AgreeWithHosts(const Status& here, const TrainOptions& o, Hosts& hosts, const Start& st,
                      const monitoring::Exporter* exporter, Logger& log) {
  if (hosts.count() == 1) return here;
  auto stop = [] { return g_stop_signal.load() != 0; };
  if (!here.ok()) return hosts.Agree(here, 0, o.host_timeout_s, stop);
  const shm::Segment& seg = st.seg;
  log.Always(JsonLine("host")
                 .Int("host", hosts.index())
                 .Int("hosts", hosts.count())
                 .Str("name", hosts.Describe(hosts.index()))
                 .Int("pid", getpid())
                 .Str("segment", seg.name())
                 .Str("metrics", exporter ? exporter->address() : ""));
  const shm::RunConfig& c = seg.header()->config;
  const int64_t n = static_cast<int64_t>(c.param_count);
  uint32_t state = Crc32(seg.params(c.first_step), static_cast<size_t>(n) * sizeof(float));
  for (int k = 0; k < seg.num_states(); ++k) {
    state = Crc32(seg.state(k, c.first_step), static_cast<size_t>(n) * sizeof(float), state);
  }
  state = Crc32(st.rd.val.x.data(), st.rd.val.x.size() * sizeof(float), state);
  state = Crc32(st.rd.val.y.data(), st.rd.val.y.size() * sizeof(float), state);
  const int64_t words[] = {static_cast<int64_t>(st.fingerprint), c.total_steps, c.first_step,
                           o.eval_every,  o.early_stop, static_cast<int64_t>(state)};
  const uint64_t identity =
      (static_cast<uint64_t>(Crc32(words, sizeof words)) << 32) ^ st.fingerprint;
  return hosts.Agree(here, identity, o.host_timeout_s, stop);
}

// A run whose segment exists and is filled: the units the run loop composes.
struct RunParts {
  const TrainOptions& o;
  const RunData& rd;
  Logger& log;
  shm::Segment& seg;
  Supervisor& sup;
  CheckpointPolicy& checkpoints;
  ValidationProtocol& validation;
  LossLog& losses;
  Combiner* combiner;  // several hosts only
  int64_t first_step;
  int64_t total_steps;
  int64_t t_start;  // just before the workers start
};

// Starts the workers and supervises them until every one has finished (Ok) or the run must
// end: a stop signal (kInterrupted), a crash loop, a divergence, ... (the reason).
Status Supervise(RunParts& run) {
  const bool sync = run.o.mode == Mode::kSync;
  ProgressLine progress_line(run.seg, run.log, run.first_step, run.total_steps, run.t_start);
  Status failure = run.sup.StartAll();
  while (failure.ok()) {
    if (g_stop_signal.load() != 0) {
      const int sig = g_stop_signal.load();
      const bool from_mpirun = run.o.host_count > 1 && sig == SIGTERM;
      return Status::Interrupted(
          "stopped by " + SignalName(sig) + " at step " + std::to_string(Progress(run.seg)) +
          " of " + std::to_string(run.total_steps) +
          (from_mpirun ? " (under mpirun, SIGTERM comes from mpirun: it ends the job this way "
                         "when it is interrupted or when another host master has failed; its "
                         "message, or that host's, tells which)"
                       : ""));
    }
    if (run.o.fault_master_throw >= 0 && Progress(run.seg) >= run.o.fault_master_throw) {
      throw std::bad_alloc();  // test hook: any exception must end in the normal cleanup
    }
    failure = run.sup.Tick(run.validation.wants_fast_poll() ? 1 : kPollMs);
    if (failure.ok() && run.combiner != nullptr) failure = run.combiner->status();
    run.losses.Drain();
    run.validation.Poll();
    if (!failure.ok()) break;
    if (run.sup.AllFinished()) {
      if (!sync) run.sup.Reconcile();
      if (sync || run.validation.stop_requested() || Progress(run.seg) >= run.total_steps) break;
      // Async: updates whose tickets died with a worker are still owed.
      failure = run.sup.ResumeAsync();
      continue;
    }
    const int64_t progress = Progress(run.seg);
    run.checkpoints.Tick(run.seg, progress);
    progress_line.Update(progress);
  }
  return failure;
}

// The run must end: every worker is stopped; stopped by a signal, the state is checkpointed.
Status Abandon(RunParts& run, Status failure) {
  // The name goes first (the mapping stays for the checkpoint): under mpirun a process the
  // job is ending has a grace period of about a second before its SIGKILL, and stopping the
  // workers may take that long.
  run.seg.Unlink();
  g_segment_path[0] = '\0';
  run.sup.AbortAll();
  run.log.ClearProgress();
  if (failure.code() == Status::Code::kInterrupted) {
    (void)run.checkpoints.WriteOnStop(run.seg);  // a failure is logged and counted
  }
  return failure;
}

// What the summary reports besides the model's losses and the workers' counters. After the
// validation's Finish(): the evaluations it waits for may still decide an early stop.
RunSummary SummaryOf(const RunParts& run, int64_t end_step, double wall_s) {
  RunSummary s;
  s.mode = run.o.mode;
  s.rule = run.o.rule;
  s.workers = run.o.workers;
  s.first_step = run.first_step;
  s.end_step = end_step;
  s.wall_s = wall_s;
  s.restarts = run.sup.restarts();
  s.torn_updates = run.sup.torn_updates();
  s.recoveries = run.sup.recoveries();
  s.early_stop = run.o.early_stop > 0;
  s.stopped_early = run.validation.stop_requested();
  s.best_step = s.early_stop ? run.validation.best_step() : -1;
  s.val_rows = run.rd.val.rows;
  s.classification = run.o.model.loss == Loss::kXent;
  return s;
}

// Every worker has finished: the model kept (the last, or the best evaluated one), saved, and
// the summary.
Status Finish(RunParts& run) {
  const TrainOptions& o = run.o;
  const data::Dataset& d = run.rd.train;
  const bool sync = o.mode == Mode::kSync;
  run.losses.Drain();
  run.log.ClearProgress();
  run.losses.ReportLost();
  const int64_t t_end = shm::MonotonicNs();
  const int64_t end_step = Progress(run.seg);  // total_steps, or earlier after an early stop
  if (!sync && !run.validation.stop_requested() && end_step != run.total_steps) {
    return Status::Internal("async run ended with " + std::to_string(end_step) +
                            " updates applied, expected " + std::to_string(run.total_steps));
  }
  const float* w = run.seg.params(sync ? end_step : 0);
  std::vector<float> params(w, w + run.seg.header()->config.param_count);
  const nn::Metrics val = run.validation.Finish(end_step, &params);  // may stop early, too
  RunSummary summary = SummaryOf(run, end_step, (t_end - run.t_start) / 1e9);
  summary.val = val;
  summary.final_loss = nn::Evaluate(o.model, params.data(), run.seg.x(), run.seg.y(), d.rows).loss;
  ReadWorkerCounters(run.seg, &summary);
  if (o.host_count > 1) {
    // The rows of every host's workers: each step is the whole global batch, split over them.
    summary.hosts = o.host_count;
    summary.combine_us = run.combiner->MeanUs();
    summary.samples = static_cast<uint64_t>((end_step - run.first_step) * (o.batch > 0 ? o.batch : d.rows));
  }
  run.seg.Unlink();
  g_segment_path[0] = '\0';

  // Workers stop at the first non-finite loss or gradient; this guards what they cannot see
  // (an update that overflowed at the very last step): no non-finite model is ever written.
  if (!AllFinite(params)) {
    return Status::Diverged("training diverged: the parameters after step " +
                            std::to_string(end_step) + " are not finite (NaN or infinite); " +
                            o.DivergenceHint() + "; no model was saved");
  }
  if (!o.save_path.empty()) {
    const Model m{o.model, run.rd.norm, d.classes, std::move(params)};
    if (Status s = SaveModel(o.save_path, m); !s.ok()) return s;
  }
  LogSummary(summary, run.log);
  return Status::Ok();
}

}  // namespace

Status RunTrain(const TrainOptions& opts, Logger& log, Launcher& launcher, Hosts& hosts,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  TrainOptions o = ForThisHost(opts);  // StartHere sets a --model's input from the data
  std::unique_ptr<monitoring::Exporter>& exporter = *exporter_out;
  Start st;
  const Status started = StartHere(o, log, &exporter, &st);
  if (Status s = AgreeWithHosts(started, o, hosts, st, exporter.get(), log); !s.ok()) return s;
  const RunData& rd = st.rd;
  shm::Segment& seg = st.seg;
  const int64_t first = st.resume.step;
  const int64_t total_steps = st.total_steps;
  const int64_t eval_every = st.eval_every;
  const uint64_t fingerprint = st.fingerprint;
  const std::string& optimizer = st.optimizer;
  monitoring::RunStats stats(o.workers);
  if (exporter) exporter->Attach(&seg, &stats, o);
  const DetachOnExit detach(exporter.get());
  LogSegment(o, rd, seg, exporter.get(), log);

  CheckpointPolicy checkpoints({.path = o.checkpoint_path,
                                .every = o.checkpoint_every,
                                .mode = o.mode,
                                .first_step = first,
                                .total_steps = total_steps,
                                .fingerprint = fingerprint,
                                .optimizer = optimizer},
                               log, stats.checkpoints());
  const int64_t t_start = shm::MonotonicNs();  // the clock of the summary and the events
  ValidationProtocol validation({.eval_every = eval_every,
                                 .early_stop = o.early_stop,
                                 .first_step = first,
                                 .total_steps = total_steps,
                                 .steps_per_epoch = o.StepsPerEpoch(rd.train.rows),
                                 .t_start_ns = t_start},
                                o.model, rd.val, seg, log, stats.validation());
  Supervisor sup(seg, launcher, log, stats.workers(), SupervisorOptionsFor(o));
  LossLog losses(seg, log, first);
  std::unique_ptr<Combiner> combiner;
  if (hosts.count() > 1) combiner = std::make_unique<Combiner>(seg, hosts, stats.combine(), o.host_timeout_s);
  RunParts run{o,      rd,         log,          seg,   sup,        checkpoints,
               validation, losses, combiner.get(), first, total_steps, t_start};
  if (Status failure = Supervise(run); !failure.ok()) return Abandon(run, std::move(failure));
  return Finish(run);
}

}  // namespace shmtrain::master
