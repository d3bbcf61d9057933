#include "master/run.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32.h"
#include "data/arrays.h"
#include "data/dataset.h"
#include "data/preprocess.h"
#include "master/checkpoint.h"
#include "master/checkpoint_policy.h"
#include "master/combiner.h"
#include "master/divergence.h"
#include "master/model_file.h"
#include "master/output_path.h"
#include "master/output_write.h"
#include "master/param_server.h"
#include "master/run_lines.h"
#include "master/run_loop.h"
#include "master/run_summary.h"
#include "master/segment_header.h"
#include "master/signals.h"
#include "master/supervisor.h"
#include "master/validation.h"
#include "monitoring/exporter.h"
#include "nn/layer.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "shm/futex.h"
#include "shm/segment.h"

namespace shmtrain::master {

namespace {


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

std::string Count(int64_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// The memory the model's passes take (nn::PassBytes, what the nets allocate), and what for.
struct PassMemory {
  double bytes = 0;
  std::string what;  // "2.1 GiB for each of 2 workers (32 samples a pass), ..."
};

// Each worker's pass over the most rows it takes at once (sync: its share of a batch, or of
// every row; async: a whole minibatch), and the master's evaluations (validation, the final
// loss) beside them.
PassMemory TrainingPasses(const TrainOptions& o, int64_t rows) {
  const int64_t batch = o.batch > 0 ? std::min(o.batch, rows) : rows;
  const int64_t world = int64_t{o.workers} * o.host_count;
  const int64_t n = o.mode == Mode::kAsync ? batch : (batch + world - 1) / world;
  const uint64_t worker = nn::PassBytes(o.model, n, /*backward=*/true);
  const uint64_t eval = nn::EvaluateBytes(o.model, rows);
  const int64_t eval_rows = std::min(nn::EvalChunk(o.model), rows);
  return {static_cast<double>(worker) * o.workers + static_cast<double>(eval),
          Bytes(static_cast<double>(worker)) + " for each of " + Count(o.workers, "worker") + " (" +
              Count(n, "sample") + " a pass), " + Bytes(static_cast<double>(eval)) +
              " for the master's evaluations (" + Count(eval_rows, "sample") + " a pass)"};
}

// The memory check of train, eval and predict: the data as float32 with its targets (the
// master's copy), plus the segment (whose pages are memory too; 0 outside train), plus the
// model's passes.
Status FitsInMemory(const std::string& src, int64_t rows, int features, uint64_t seg,
                    const PassMemory& passes, uint64_t mem_available) {
  const double data = static_cast<double>(rows) * (features + 1.0) * sizeof(float);
  const double need = static_cast<double>(seg) + data + passes.bytes;
  if (mem_available == 0 || need <= static_cast<double>(mem_available)) return Status::Ok();
  const std::string shape = "(" + std::to_string(rows) + " rows x " + std::to_string(features) +
                            " features" + (seg > 0 ? ", and the model)" : ")");
  const std::string parts =
      (seg > 0 ? "a segment of " + Bytes(seg) + " " + shape + ", plus the master's copy of the data"
               : "the data as 32-bit floats " + shape) +
      ", plus the model's activations and scratch: " + passes.what;
  return Status::Resource(src + ": the run needs about " + Bytes(need) + " of memory (" + parts +
                          ") but " + Bytes(mem_available) + " is available");
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

// The flag or file a model's input shape comes from, as messages name it.
std::string InputSource(const TrainOptions& o) {
  if (!o.mlp_layers.empty()) return "--layers";
  if (o.input_shape.c > 0) return "--input-shape";
  if (o.example == "blobs") return "--features";
  if (!o.example.empty()) return "--example " + o.example;
  return o.data_path;
}

// The workers' own check of the run configuration (shm::CheckRunConfig) on a header this run
// builds: what they would refuse is kUsage here, naming the flag or the file behind it.
Status CheckConfig(const TrainOptions& o, const shm::Header& h) {
  const shm::ConfigCheck check = shm::CheckRunConfig(h.config);
  if (check.ok()) return Status::Ok();
  std::string source;
  switch (check.part) {
    case shm::ConfigPart::kInput:
      source = InputSource(o);
      break;
    case shm::ConfigPart::kModel:
      source = o.model_text.empty() ? "--layers" : "--model";
      break;
    case shm::ConfigPart::kData:
      source = o.example.empty() ? o.data_path : "--example " + o.example;
      break;
    case shm::ConfigPart::kOptimizer:
      source = "--optimizer";
      break;
    case shm::ConfigPart::kPrecision:
      source = "--precision bf16";
      break;
    case shm::ConfigPart::kValidation:
      source = "--eval-every";
      break;
    case shm::ConfigPart::kProcesses:
    case shm::ConfigPart::kNone:
      source = "--workers";
      break;
  }
  return Status::Usage(source + ": the workers would refuse this run: " + check.status.message());
}

// The run's configuration as the workers will check it, then its segment against /dev/shm and
// the memory: before a row is made or stored.
Status CheckFits(const std::string& src, int64_t rows, int features, const TrainOptions& o,
                 uint64_t shm_free, uint64_t mem_available) {
  OptimConfig optim;  // its state vectors count towards the segment's size
  if (Status s = nn::ResolveOptim(o, INT64_MAX, &optim); !s.ok()) return s;
  const shm::Header proto = MakeHeader(o, optim, rows, features, 1, EvalEvery(o, rows));
  if (Status s = CheckConfig(o, proto); !s.ok()) return s;
  const uint64_t seg = proto.total_size;
  const std::string shape = "(" + std::to_string(rows) + " rows x " + std::to_string(features) +
                            " features, and the model)";
  if (seg > shm_free) {
    return Status::Resource(src + ": the run needs a shared memory segment of " + Bytes(seg) +
                            " " + shape + " but /dev/shm has " + Bytes(shm_free) +
                            " free; use fewer rows or features, or enlarge /dev/shm");
  }
  return FitsInMemory(src, rows, features, seg, TrainingPasses(o, rows), mem_available);
}

}  // namespace

Status CheckMemory(const std::string& src, int64_t rows, int features, const ModelSpec& model) {
  const int64_t n = std::min(nn::EvalChunk(model), rows);
  const PassMemory eval{static_cast<double>(nn::EvaluateBytes(model, rows)),
                        Bytes(static_cast<double>(nn::EvaluateBytes(model, rows))) +
                            " for evaluation (" + Count(n, "sample") + " a pass)"};
  return FitsInMemory(src, rows, features, 0, eval, MemAvailable());
}

Status CheckImage(const ModelSpec& model, const std::string& model_src, const Shape& image,
                  const std::string& data_src) {
  if (model.input.c == 0 || image == model.input || !nn::TakesImages(model.input, model.layers)) {
    return Status::Ok();
  }
  return Status::Usage(data_src + ": images of " + nn::ImageText(image) +
                       ", but the model's input is " + nn::ImageText(model.input) + " (" +
                       model_src + ")");
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
    const std::string src = "example " + o.example;
    if (Status s = CheckInputs(o, src, features); !s.ok()) return s;
    if (Status s = CheckFits(src, o.example_rows, features, o, shm_free, mem); !s.ok()) return s;
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
  lo.check_image = [&](const Shape& image) {
    return CheckImage(o.model, InputSource(o), image, o.data_path);
  };
  lo.check_size = [&](int64_t rows, int features) {
    // The width is known before a row is read: a mismatch is refused before memory is spent.
    const TrainOptions probe = WithFlatInput(o, features);
    if (o.model.input.c == 0) {
      if (Status s = CheckModel(probe.model, "--model", /*flat_input=*/true); !s.ok()) return s;
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

}  // namespace

// A --model's input shape when --input-shape did not give it: the built-in examples are flat;
// an IDX or NumPy file's header gives one sample's shape ((H, W) is 1xHxW, (C, H, W) is
// CxHxW); other data is flat, its width known once its first rows are read (LoadData).
namespace {

Status ResolveInputBeforeLoading(TrainOptions& o) {
  if (o.model.input.c > 0) return Status::Ok();
  if (!o.example.empty()) {
    o.model.input = {o.example == "blobs" ? o.example_features : 1, 1, 1};
    return CheckModel(o.model, "--model", /*flat_input=*/true);
  }
  std::vector<int64_t> dims;
  const data::LoadOptions lo = LoadOptionsFor(o, TaskOf(o.model.loss));
  if (Status s = data::SampleShape(o.data_path, lo, &dims); !s.ok()) return s;
  const std::optional<Shape> image = data::SampleImage(dims);
  if (!image.has_value()) return Status::Ok();
  o.model.input = *image;
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
    if (Status s = CheckModel(o.model, "--model", /*flat_input=*/true); !s.ok()) return s;
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
    lo.check_image = [&](const Shape& image) {
      return CheckImage(o.model, InputSource(o), image, o.val_data_path);
    };
    if (Status s = data::LoadFile(o.val_data_path, lo, &rd->val); !s.ok()) return s;
  }
  rd->norm = data::Normalizer::Fit(rd->train, o.normalize);
  const std::string src = o.example.empty() ? o.data_path : "example " + o.example;
  if (Status s = rd->norm.Apply(&rd->train, src); !s.ok()) return s;
  return rd->norm.Apply(&rd->val,
                        o.val_data_path.empty() ? "the held-out rows of " + src : o.val_data_path);
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
                                  {"--val-labels", o.val_labels_path}},
                                 OutputKinds::kRegularFile);
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

// Registers the segment's name for main's last-resort handlers while this run owns it
// (RemovedOnDeath; declared right after the segment: forgotten before the segment is removed,
// on every path out). The run's end begins here: the name goes first (the mapping stays for
// the units after it), since under mpirun a host master the job is ending has a grace period
// of about a second before its SIGKILL, and stopping the workers may take that long.
class SegmentName final : public RunUnit {
 public:
  explicit SegmentName(shm::Segment& seg) : seg_(seg), on_death_("/dev/shm/" + seg.name()) {}
  SegmentName(const SegmentName&) = delete;
  SegmentName& operator=(const SegmentName&) = delete;
  void Stop(RunEnd& /*end*/) override {
    seg_.Unlink();
    on_death_.Forget();
  }

 private:
  shm::Segment& seg_;
  RemovedOnDeath on_death_;
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

SupervisorOptions SupervisorOptionsFor(const TrainOptions& o, const DivergenceCause& divergence) {
  SupervisorOptions so;
  so.heartbeat_timeout_ns = static_cast<int64_t>(o.heartbeat_timeout_s * 1e9);
  so.max_restarts = o.max_restarts;
  so.restart_window_ns = static_cast<int64_t>(o.restart_window_s * 1e9);
  so.chaos_every_ns = static_cast<int64_t>(o.chaos_every_s * 1e9);
  so.chaos_seed = o.chaos_seed;
  so.divergence = divergence;
  return so;
}

// This host's share of the run's outputs: only host 0 writes the model and checkpoints (every
// host holds the same parameters at every step), so the others neither pause for checkpoints
// nor check output paths they will not write.
// Async across hosts: every host pauses at every checkpoint for its sync point
// (master/param_server.h), host 0 alone writes.
TrainOptions ForThisHost(const TrainOptions& opts) {
  TrainOptions o = opts;
  if (o.host_index != 0) {
    o.save_path.clear();
    o.checkpoint_path.clear();
    if (o.mode == Mode::kSync) o.checkpoint_every = 0;
  }
  return o;
}

// The options as this host's workers count: async across hosts, --checkpoint-every in this
// host's updates (a multiple of the hosts, checked at the start).
TrainOptions HostUnits(const TrainOptions& o) {
  TrainOptions h = o;
  if (o.mode == Mode::kAsync && o.host_count > 1) h.checkpoint_every /= o.host_count;
  return h;
}

// This host's start: the checks, the data, the resumed checkpoint and the segment, made and
// filled. Its members are what the run loop's units are built from; destroying it removes the
// segment, so a start that fails anywhere leaves nothing behind.
struct Start {
  OutputLock output_locks[2];  // --save, --checkpoint: held for the run's life
  // Their room on disk, taken once the sizes are known (Reserve); used by the writes.
  OutputReservation reserved[2];
  RunData rd;
  int64_t total_steps = 0;  // the run's
  // This host's: the run's, but async across hosts its share of the updates
  // (shm::AsyncHostUpdates), and the evaluations spaced by as many of them.
  int64_t host_steps = 0;
  int64_t eval_every = 0;
  OptimConfig optim;
  uint64_t fingerprint = 0;
  std::string optimizer;
  Checkpoint resume;
  shm::Segment seg;
  std::optional<SegmentName> seg_name;  // set once seg exists
};

// What differs in the run that wrote a checkpoint of fingerprint f, when it is only the count
// of hosts or of workers (the likeliest slips on a resume: another mpirun -np or --workers),
// found by trying those counts with this run's other options; "" otherwise.
constexpr int kMaxResumeHosts = 256;  // the host counts OtherRunExplainer tries

std::function<std::string(uint64_t)> OtherRunExplainer(const TrainOptions& o,
                                                       const OptimConfig& optim,
                                                       const data::Dataset& d) {
  return [&o, &optim, digest = DigestOf(d)](uint64_t f) -> std::string {
    auto shape = [](int hosts, int workers) {
      return std::to_string(hosts) + (hosts == 1 ? " host" : " hosts") + " x " +
             std::to_string(workers) + (workers == 1 ? " worker" : " workers");
    };
    TrainOptions other = o;
    for (int hosts = 1; hosts <= kMaxResumeHosts; ++hosts) {
      for (int workers = 1; workers <= shm::kMaxWorkers; ++workers) {
        other.host_count = hosts;
        other.workers = workers;
        if (RunFingerprint(other, optim, digest) != f) continue;
        return "it was written by a run of " + shape(hosts, workers) + " (mpirun -np " +
               std::to_string(hosts) + ", --workers " + std::to_string(workers) +
               "), and this run is " + shape(o.host_count, o.workers);
      }
    }
    return "";
  };
}

// Async across hosts: a host pushes a part once --push-every of its updates are in, so with
// fewer updates than that in a host's share its parts reach their owners only at the sync
// points (the end, checkpoints). Allowed (a run may want exactly that), but said.
void WarnIfPushesWait(const TrainOptions& o, int64_t total_steps, Logger& log) {
  int64_t least = INT64_MAX;
  int host = 0;
  for (int h = 0; h < o.host_count; ++h) {
    const int64_t share = shm::AsyncHostUpdates(total_steps, o.host_count, h);
    if (share < least) {
      least = share;
      host = h;
    }
  }
  if (o.push_every <= least) return;
  log.Info("warning: --push-every " + std::to_string(o.push_every) + " is more than the " +
               std::to_string(least) + " updates of host " + std::to_string(host) +
               ": its parts reach their owners only at the end of the run (and at checkpoints); "
               "give a smaller --push-every for an exchange during the run",
           JsonLine("push_every_exceeds_share")
               .Int("push_every", o.push_every)
               .Int("host", host)
               .Int("updates", least));
}

// The room the outputs will take, reserved before the training (master/output_write.h): a
// full disk is found now, not after the run, when the model would be lost.
// The model file is read back through the decoder first (this model, its parameters zeros): a
// model the format cannot hold (an input of more than 2^24 values) is refused now, not saved
// after the training as a file that eval, predict and export refuse.
Status Reserve(const TrainOptions& o, const RunData& rd, const OptimConfig& optim,
               const std::string& optimizer, OutputReservation (&out)[2]) {
  if (!o.save_path.empty()) {
    const std::string bytes = EncodeModel(
        {o.model, rd.norm, rd.train.classes, std::vector<float>(o.model.ParamCount())});
    Model back;
    if (Status s = DecodeModel(bytes, o.save_path, &back); !s.ok()) {
      return Status::Usage("--save: the model file of this run could not be read back: " +
                           s.message());
    }
    if (Status s = OutputReservation::Make("--save", o.save_path, bytes.size(), &out[0]); !s.ok()) {
      return s;
    }
  }
  return OutputReservation::Make(
      "--checkpoint", o.checkpoint_path,
      CheckpointSize(static_cast<int64_t>(o.model.ParamCount()),
                     o.mode == Mode::kSync ? static_cast<int>(optim.num_states) : 0, optimizer),
      &out[1]);
}

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
  st->host_steps = st->total_steps;
  st->eval_every = EvalEvery(o, d.rows);
  if (o.mode == Mode::kAsync && o.host_count > 1) {
    st->host_steps = shm::AsyncHostUpdates(st->total_steps, o.host_count, o.host_index);
    if (o.checkpoint_every > 0 && st->total_steps % o.host_count != 0) {
      // Every host must reach every checkpoint's sync point: the hosts' shares must be equal.
      return Status::Usage("--checkpoint-every with --mode async across " +
                           std::to_string(o.host_count) + " hosts needs a run of a multiple of " +
                           std::to_string(o.host_count) + " updates; this one has " +
                           std::to_string(st->total_steps) + " (give --steps)");
    }
    if (st->host_steps == 0) {
      return Status::Usage("--steps " + std::to_string(st->total_steps) + " leaves host " +
                           std::to_string(o.host_index) + " no update: async across " +
                           std::to_string(o.host_count) +
                           " hosts needs at least one update a host");
    }
    if (st->eval_every > 0) {
      st->eval_every =
          std::max<int64_t>(shm::AsyncHostUpdates(st->eval_every, o.host_count, o.host_index), 1);
    }
    WarnIfPushesWait(o, st->total_steps, log);
  }
  if (Status s = nn::ResolveOptim(o, st->total_steps, &st->optim); !s.ok()) return s;
  // Async across hosts: the workers count their host's updates (checkpoints too).
  const shm::Header proto =
      MakeHeader(HostUnits(o), st->optim, d.rows, d.features, st->host_steps, st->eval_every);
  if (Status s = CheckConfig(o, proto); !s.ok()) return s;
  // Resuming: the checkpoint must come from this very run (same options and data).
  st->fingerprint = RunFingerprint(o, st->optim, d);
  st->optimizer = nn::Describe(st->optim);
  if (Status s = Reserve(o, st->rd, st->optim, st->optimizer, st->reserved); !s.ok()) return s;
  if (!o.resume_path.empty()) {
    if (Status s = LoadResume(o.resume_path, o.mode, st->fingerprint, st->optimizer, proto,
                              st->total_steps, OtherRunExplainer(o, st->optim, d), &st->resume);
        !s.ok()) {
      return s;
    }
    // Async across hosts: a checkpoint at the run's update t (a multiple of the hosts, as
    // --checkpoint-every is) is every host at its update t / H.
    if (o.mode == Mode::kAsync && o.host_count > 1) st->resume.step /= o.host_count;
  }
  if (Status s = shm::Segment::Create(shm::MakeSegmentName(), proto, &st->seg); !s.ok()) return s;
  st->seg_name.emplace(st->seg);
  FillSegment(o, &st->rd.train, st->resume, &st->seg);
  return Status::Ok();
}

// Several hosts: every host brings its start to one exchange, failed or not, so that a host
// whose start failed (a missing file, a taken port) ends every host's start the same way: each
// removes its segment and leaves the job (docs/hosts.md). The started hosts must start
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
  const int64_t words[] = {static_cast<int64_t>(st.fingerprint),
                           st.total_steps,
                           c.first_step,
                           o.eval_every,
                           o.early_stop,
                           static_cast<int64_t>(state),
                           o.push_every};
  const uint64_t identity =
      (static_cast<uint64_t>(Crc32(words, sizeof words)) << 32) ^ st.fingerprint;
  return hosts.Agree(here, identity, o.host_timeout_s, stop);
}

// Test hook (--fault-master-throw N): throws once the run reaches step N, so that a test can
// see any exception of the master end in the normal cleanup.
class MasterFault final : public RunUnit {
 public:
  explicit MasterFault(int64_t at_step) : at_(at_step) {}
  Verdict Tick(const RunView& view) override {
    if (at_ >= 0 && view.progress >= at_) throw std::bad_alloc();
    return Verdict::GoOn();
  }

 private:
  int64_t at_;
};

// The model a good end keeps (the last parameters, or those the validation kept): never one
// that is not finite, nor one whose outputs on the training rows are not, and saved with
// --save. Workers stop at the first non-finite loss or gradient; this guards what they cannot
// see (an update that overflowed at the very last step). Its loss over the training rows goes
// into the summary.
class FinalModel final : public RunUnit {
 public:
  FinalModel(const TrainOptions& o, const RunData& rd, const DivergenceCause& divergence,
             OutputReservation* reserved)
      : o_(o), rd_(rd), divergence_(divergence), reserved_(reserved) {}
  // The kept parameters checked, and their loss over the training rows.
  void Collect(RunEnd& end) override {
    if (!end.status.ok()) return;
    const std::string cause = "; " + divergence_.At(end.end_step - 1) + "; no model was saved";
    if (!AllFinite(end.params)) {
      end.status = Status::Diverged("training diverged: the parameters after step " +
                                    std::to_string(end.end_step) +
                                    " are not finite (NaN or infinite)" + cause);
      return;
    }
    const nn::Metrics train =
        nn::Evaluate(o_.model, end.params.data(), end.seg.x(), end.seg.y(), rd_.train.rows);
    end.summary.final_loss = train.loss;
    if (!train.finite()) {
      end.status = Status::Diverged("training diverged: the model after step " +
                                    std::to_string(end.end_step) +
                                    " gives outputs that are not finite (NaN or infinite) in " +
                                    train.nonfinite.Text() + " of the training rows" + cause);
    }
  }
  // Written with --save, into the room reserved at the start.
  void Save(RunEnd& end) override {
    if (!end.status.ok() || o_.save_path.empty()) return;
    Model m{o_.model, rd_.norm, rd_.train.classes, std::move(end.params)};
    end.status = WriteFileDurably(o_.save_path, EncodeModel(m), {.reservation = reserved_});
    end.params = std::move(m.params);
  }

 private:
  const TrainOptions& o_;
  const RunData& rd_;
  const DivergenceCause& divergence_;
  OutputReservation* reserved_;
};

// The summary line of a good end: what the run itself knows (mode, steps, wall time, the
// workers' counters) beside what the units before it put in (the kept model's loss over the
// training rows, restarts, validation, the cross-host combine).
class SummaryLine final : public RunUnit {
 public:
  SummaryLine(const TrainOptions& o, int64_t first_step, int64_t rows, int64_t t_start_ns,
              Logger& log)
      : o_(o), first_(first_step), rows_(rows), t_start_(t_start_ns), log_(log) {}
  void Report(RunEnd& end) override {
    if (!end.status.ok()) return;
    RunSummary& s = end.summary;
    s.mode = o_.mode;
    s.rule = o_.rule;
    s.workers = o_.workers;
    s.first_step = first_;
    s.end_step = end.end_step;
    s.wall_s = (end.end_ns - t_start_) / 1e9;
    ReadWorkerCounters(end.seg, &s);
    if (o_.host_count > 1) {
      s.hosts = o_.host_count;
      if (o_.mode == Mode::kSync) {
        // The rows of every host's workers: each step is the whole global batch, split over them.
        const int64_t batch = o_.batch > 0 ? o_.batch : rows_;
        s.samples = static_cast<uint64_t>((end.end_step - first_) * batch);
      } else {
        AddCrossHostTotals(&s);  // every host's updates (master/param_server.h)
      }
    }
    LogSummary(s, log_);
  }

 private:
  const TrainOptions& o_;
  int64_t first_, rows_, t_start_;
  Logger& log_;
};

}  // namespace

Status RunTrain(const TrainOptions& opts, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts_share,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  Hosts& hosts = *hosts_share;
  TrainOptions o = ForThisHost(opts);  // StartHere sets a --model's input from the data
  std::unique_ptr<monitoring::Exporter>& exporter = *exporter_out;
  Start st;
  const Status started = StartHere(o, log, &exporter, &st);
  if (Status s = AgreeWithHosts(started, o, hosts, st, exporter.get(), log); !s.ok()) return s;
  shm::Segment& seg = st.seg;
  const int64_t first = st.resume.step, total = st.host_steps;
  // Shared with the cross-host thread, whose share may outlive the run (exchange_thread.h).
  const auto run_stats = std::make_shared<monitoring::RunStats>(o.workers);
  monitoring::RunStats& stats = *run_stats;
  if (exporter) exporter->Attach(&seg, &stats, o);
  const DetachOnExit detach(exporter.get());
  LogSegment(o, st.rd, seg, exporter.get(), log);

  // What a run does, each round and at its end, in this order (master/run_loop.h).
  const int64_t t_start = shm::MonotonicNs();  // the clock of the summary and the events
  StopSignal stop(total, o.host_count > 1);
  MasterFault fault(o.fault_master_throw);
  LossLog losses(log, seg.header()->config.log_every, first);
  ProgressLine live(log, first, total, t_start);
  ValidationProtocol validation({.eval_every = st.eval_every,
                                 .early_stop = o.early_stop,
                                 .first_step = first,
                                 .total_steps = total,
                                 .steps_per_epoch = o.StepsPerEpoch(st.rd.train.rows) * total /
                                                    std::max<int64_t>(st.total_steps, 1),
                                 .t_start_ns = t_start},
                                o.model, st.rd.val, seg, log, stats.validation());
  // Several hosts: sync combines every step's sums, async runs the parameter server.
  std::unique_ptr<Combiner> combiner;
  std::unique_ptr<ParamServer> server;
  if (hosts.count() > 1 && o.mode == Mode::kSync) {
    combiner = std::make_unique<Combiner>(
        seg, hosts_share,
        std::shared_ptr<monitoring::DurationHistogram>(run_stats, &stats.combine()),
        o.host_timeout_s);
  } else if (hosts.count() > 1) {
    server = std::make_unique<ParamServer>(seg, hosts_share,
                                           std::shared_ptr<monitoring::PushStats>(run_stats, &stats.pushes()),
                                           ParamServer::Options{.push_every = o.push_every,
                                                                .host_timeout_s = o.host_timeout_s,
                                                                .max_staleness = o.max_staleness});
  }
  const DivergenceCause divergence(o, st.resume);
  Supervisor sup(seg, launcher, log, stats.workers(), SupervisorOptionsFor(o, divergence));
  CheckpointPolicy checkpoints({.path = o.checkpoint_path,
                                .every = HostUnits(o).checkpoint_every,
                                .mode = o.mode,
                                .first_step = first,
                                .total_steps = total,
                                .fingerprint = st.fingerprint,
                                .optimizer = st.optimizer,
                                .cut = server.get(),
                                .hosts = server ? o.host_count : 1,
                                .reservation = &st.reserved[1]},
                               seg, log, stats.checkpoints());
  FinalModel model(o, st.rd, divergence, &st.reserved[0]);
  SummaryLine summary(o, first, st.rd.train.rows, t_start, log);
  RunLoop loop(seg, [&sup](int ms) { sup.Wait(ms); },
               {&*st.seg_name, &stop, &fault, &losses, &live, server.get(), &validation,
                combiner.get(), &sup, &checkpoints, &model, &summary});
  const Status s = loop.Run();
  // A log that cannot be written (a full disk, a closed pipe) does not stop the training it
  // reports on: the run ends, its model saved, and then says that stdout failed.
  if (!s.ok() || log.stdout_status().ok()) return s;
  return Status::Resource(
      log.stdout_status().message() + "; the run finished" +
      (o.save_path.empty() ? "" : " and its model was saved to " + o.save_path));
}

}  // namespace shmtrain::master
