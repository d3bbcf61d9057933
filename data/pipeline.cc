// The data pipeline (data/pipeline.h): its steps in order, the size checks of the data and of
// the run it makes against /dev/shm and the memory, and the image check.
#include "data/pipeline.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/decimal.h"
#include "data/arrays.h"
#include "data/augment.h"
#include "data/format.h"
#include "nn/batch_norm.h"
#include "nn/cpu.h"
#include "nn/layer.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "nn/net.h"

namespace shmtrain::data {

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

// MemAvailable of /proc/meminfo in bytes, or 0 if unknown; less when the room left under
// the process's own limits (ulimit -v) is less.
uint64_t MemAvailable() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  unsigned long long kib = 0;
  if (f != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
    }
    std::fclose(f);
  }
  const uint64_t machine = kib * 1024, room = RoomUnderMemoryLimits(nullptr);
  if (machine == 0) return room == UINT64_MAX ? 0 : room;
  return std::min(machine, room);
}

// " (under ...)" when the limits, not the machine, leave `mem` bytes.
std::string LimitNote(uint64_t mem) {
  std::string what;
  const uint64_t room = RoomUnderMemoryLimits(&what);
  return room <= mem ? " (" + what + ")" : "";
}

uint64_t ShmFree() {
  struct statvfs vfs {};
  if (statvfs("/dev/shm", &vfs) != 0)
    return UINT64_MAX;  // let the segment's creation say what is wrong
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

// The memory the model's passes take (nn::PassBytes, what the nets allocate), and what for.
struct PassMemory {
  double bytes = 0;
  std::string what;  // "2.1 GiB for each of 2 workers (32 samples a pass), ..."
};

// Each worker's pass over the most rows it takes at once (n: run.worker_batch_rows), and the
// master's evaluations (validation, the final loss) beside them.
PassMemory TrainingPasses(const TrainOptions& o, const nn::ResolvedModel& model, int64_t n,
                          int64_t rows) {
  const uint64_t worker = nn::PassBytes(model, n, /*backward=*/true);
  const uint64_t eval = nn::EvaluateBytes(model, rows);
  const int64_t eval_rows = std::min(nn::EvalChunk(model), rows);
  return {static_cast<double>(worker) * o.workers + static_cast<double>(eval),
          Bytes(static_cast<double>(worker)) + " for each of " + Plural(o.workers, "worker") +
              " (" + Plural(n, "sample") + " a pass), " + Bytes(static_cast<double>(eval)) +
              " for the master's evaluations (" + Plural(eval_rows, "sample") + " a pass)"};
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
                          ") but " + Bytes(mem_available) + " is available" +
                          LimitNote(mem_available));
}

// How to read a file as `file` says, for a model of this loss.
LoadOptions ReadAs(const DataFileOptions& file, Loss loss) {
  LoadOptions lo;
  lo.file = file;
  lo.task = TaskOf(loss);
  return lo;
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

// The run's segment (its configuration as the workers will check it: run.segment_bytes)
// against /dev/shm, then it and the data against the memory: before a row is made or stored.
Status CheckFits(const std::string& src, int64_t rows, int features, const TrainOptions& o,
                 const nn::ResolvedModel& model, const RunSizing& run, uint64_t shm_free,
                 uint64_t mem_available) {
  uint64_t seg = 0;
  if (Status s = run.segment_bytes(o, model, rows, features, &seg); !s.ok()) return s;
  const std::string shape = "(" + std::to_string(rows) + " rows x " + std::to_string(features) +
                            " features, and the model)";
  if (seg > shm_free) {
    return Status::Resource(src + ": the run needs a shared memory segment of " + Bytes(seg) +
                            " " + shape + " but /dev/shm has " + Bytes(shm_free) +
                            " free; use fewer rows or features, or enlarge /dev/shm");
  }
  const PassMemory passes = TrainingPasses(o, model, run.worker_batch_rows(o, rows), rows);
  return FitsInMemory(src, rows, features, seg, passes, mem_available);
}

// The built-in example, checked against the model and the memory before a row is made.
Status MakeExample(const TrainOptions& o, const RunSizing& run, const nn::ResolvedModel& model,
                   Dataset* d) {
  const int features = o.example == "blobs" ? o.example_features : 1;
  const std::string src = "example " + o.example;
  if (Status s = CheckInputs(o, src, features); !s.ok()) return s;
  if (Status s =
          CheckFits(src, o.example_rows, features, o, model, run, ShmFree(), MemAvailable());
      !s.ok()) {
    return s;
  }
  if (o.example == "parabola") {
    *d = MakeParabola(o.example_rows);
    return Status::Ok();
  }
  *d = MakeBlobs(o.example_rows, o.example_features, model.outputs, o.seed);
  std::vector<std::string> names;
  for (int k = 0; k < model.outputs; ++k) names.push_back(std::to_string(k));
  d->classes = ClassMap::Build({names.begin(), names.end()});
  return Status::Ok();
}

// --data, checked against the model, /dev/shm and the memory before a row is read: the run's
// one look at either. The segment laid out then holds every row, so the one the run creates
// (from the training rows alone) is never larger. A model whose input is the data's rows is
// resolved into *model the first time their width is known.
Status LoadData(const TrainOptions& o, const RunSizing& run, nn::ResolvedModel* model,
                Dataset* d) {
  if (!o.example.empty()) return MakeExample(o, run, *model, d);
  const uint64_t shm_free = ShmFree(), mem = MemAvailable();
  // Files are read a block at a time: only the rows' floats must fit, which check_size
  // judges once the shape is known, before a row is stored.
  LoadOptions lo = ReadAs(o.file, o.model.loss);
  // LIBSVM rows are as wide as the model's input (absent indices are 0); a CSV's columns
  // say its width, checked against the model afterwards.
  lo.libsvm_features = static_cast<int>(o.model.inputs());
  lo.check_image = [&](const Shape& image) {
    return CheckImage(o.model, InputSource(o), image, o.data_path);
  };
  lo.check_size = [&](int64_t rows, int features) {
    // The width is known before a row is read: a mismatch is refused before memory is spent.
    const TrainOptions probe = WithFlatInput(o, features);
    if (model->shapes.empty()) {
      if (Status s = CheckModel(probe.model, "--model", /*flat_input=*/true, model); !s.ok()) {
        return s;
      }
    }
    if (Status s = CheckInputs(probe, o.data_path, features); !s.ok()) return s;
    return CheckFits(o.data_path, rows, features, probe, *model, run, shm_free, mem);
  };
  return LoadFile(o.data_path, lo, d);
}

Status CheckAgainstData(const TrainOptions& o, const nn::ResolvedModel& model, const Dataset& d) {
  const std::string src = o.example.empty() ? o.data_path : "example " + o.example;
  if (Status s = CheckInputs(o, src, d.features); !s.ok()) return s;
  if (o.model.loss == Loss::kXent && d.classes.size() != model.outputs) {
    const std::string says = o.model_text.empty() ? "--layers: the last size is "
                                                  : "--model: the model's outputs are ";
    return Status::Usage(says + std::to_string(model.outputs) + " but " + src + " has " +
                         std::to_string(d.classes.size()) + " classes (" + d.classes.List() +
                         "); make it one output per class");
  }
  if (o.batch > d.rows) {
    return Status::Usage("--batch: " + std::to_string(o.batch) + " is larger than the " +
                         std::to_string(d.rows) + " rows of " + src);
  }
  return CheckBatchNormBatches(o, model, d.rows);
}

// A --model's input shape when --input-shape did not give it: the built-in examples are flat;
// an IDX or NumPy file's header gives one sample's shape ((H, W) is 1xHxW, (C, H, W) is
// CxHxW); other data is flat, its width known once its first rows are read (LoadData). A model
// whose input is known here is resolved into *model.
Status ResolveInputBeforeLoading(TrainOptions& o, nn::ResolvedModel* model) {
  if (o.model.input.c > 0) {
    return CheckModel(o.model, o.model_text.empty() ? "--layers" : "--model", false, model);
  }
  if (!o.example.empty()) {
    o.model.input = {o.example == "blobs" ? o.example_features : 1, 1, 1};
    return CheckModel(o.model, "--model", /*flat_input=*/true, model);
  }
  std::vector<int64_t> dims;
  const LoadOptions lo = ReadAs(o.file, o.model.loss);
  if (Status s = SampleShape(o.data_path, lo, &dims); !s.ok()) return s;
  const std::optional<Shape> image = SampleImage(dims);
  if (!image.has_value()) return Status::Ok();
  o.model.input = *image;
  return CheckModel(o.model, "--model", /*flat_input=*/false, model);
}

// The held-out file: the same format options but its own arrays, the training data's classes
// and width.
Status LoadHeldOut(const TrainOptions& o, const Dataset& train, Dataset* val) {
  LoadOptions lo = ReadAs(o.file, o.model.loss);
  lo.file.arrays = o.val_arrays;
  lo.features = train.features;
  if (lo.task == Task::kClassification) lo.classes = &train.classes;
  lo.check_image = [&](const Shape& image) {
    return CheckImage(o.model, InputSource(o), image, o.val_data_path);
  };
  return LoadFile(o.val_data_path, lo, val);
}

}  // namespace

Status CheckModel(const ModelSpec& model, const char* flag, bool flat_input,
                  nn::ResolvedModel* resolved) {
  nn::ResolvedModel r;
  if (Status s = nn::ResolveModel(model, flat_input, &r); !s.ok()) {
    return Status::Usage(std::string(flag) + ": " + s.message());
  }
  const int64_t out = r.outputs;
  const std::string last =
      std::string(flag) == "--layers" ? "the last layer has " : "the model has ";
  if (model.loss == Loss::kMse && out != 1) {
    return Status::Usage(std::string(flag) + ": loss mse needs one output, " + last +
                         std::to_string(out));
  }
  if (model.loss == Loss::kXent && out < 2) {
    return Status::Usage(std::string(flag) +
                         ": loss xent needs an output per class (at least 2), " + last +
                         std::to_string(out));
  }
  if (resolved != nullptr) *resolved = std::move(r);
  return Status::Ok();
}

Status CheckBatchNormBatches(const TrainOptions& o, const nn::ResolvedModel& model, int64_t rows) {
  // Full batch: one batch of every row. Otherwise the smallest batch the run meets: --batch,
  // or the last of an epoch (rows % batch) once the run reaches an epoch's last step.
  const int64_t batch = o.batch > 0 ? o.batch : rows;
  const int64_t last = rows % batch;
  const bool meets_last = last != 0 && o.TotalSteps(rows) >= o.StepsPerEpoch(rows);
  const int64_t smallest = meets_last ? last : batch;
  const std::string layer = nn::LoneValueLayer(model, smallest);
  if (layer.empty()) return Status::Ok();
  const std::string why = " gives " + layer +
                          " one value per channel, and batch norm needs more than one to "
                          "normalise by in training (PyTorch: \"Expected more than 1 value per "
                          "channel when training\")";
  const std::string b = "--batch " + o.As("--batch", std::to_string(o.batch));
  if (o.batch == 0) {
    return Status::Usage("the training data has " + std::to_string(rows) +
                         " row: a full batch of it" + why);
  }
  if (!meets_last || smallest == batch) {
    return Status::Usage(b + ": a training batch of " + std::to_string(smallest) + " sample" + why +
                         "; give a larger --batch");
  }
  return Status::Usage(b + ": the " + std::to_string(rows) + " training rows leave the last batch "
                       "of every epoch " + std::to_string(last) + " sample (" +
                       std::to_string(rows) + " = " + std::to_string(rows / batch) + " x " +
                       std::to_string(batch) + " + 1), which" + why +
                       "; give a --batch that does not divide " + std::to_string(rows - 1));
}

Status PrepareData(TrainOptions& o, const RunSizing& run, RunData* rd) {
  rd->model = {};
  if (Status s = ResolveInputBeforeLoading(o, &rd->model); !s.ok()) return s;
  Dataset all;
  if (Status s = LoadData(o, run, &rd->model, &all); !s.ok()) return s;
  if (o.model.input.c == 0) {
    // Flat data: the model's input is a row (LoadData's check_size has resolved it on one).
    o.model.input = {all.features, 1, 1};
    if (rd->model.spec.input != o.model.input) {
      if (Status s = CheckModel(o.model, "--model", true, &rd->model); !s.ok()) return s;
    }
  }
  if (Status s = SplitValidation(std::move(all), o.val_split, o.seed, &rd->train, &rd->val);
      !s.ok()) {
    return s;
  }
  if (Status s = CheckAgainstData(o, rd->model, rd->train); !s.ok()) return s;
  if (!o.val_data_path.empty()) {
    if (Status s = LoadHeldOut(o, rd->train, &rd->val); !s.ok()) return s;
  }
  if (Status s = Normalizer::Fit(rd->train, o.normalize, o.model.input, &rd->norm); !s.ok()) {
    return s;
  }
  const std::string src = o.example.empty() ? o.data_path : "example " + o.example;
  if (Status s = rd->norm.Apply(&rd->train, src); !s.ok()) return s;
  return rd->norm.Apply(&rd->val,
                        o.val_data_path.empty() ? "the held-out rows of " + src : o.val_data_path);
}

Status LoadForModel(const std::string& path, const DataFileOptions& file, const ModelSpec& model,
                    const ClassMap& classes, const std::string& model_src, bool labels,
                    Dataset* out) {
  LoadOptions lo = ReadAs(file, model.loss);
  lo.features = static_cast<int>(model.inputs());
  lo.no_labels = !labels;
  if (lo.task == Task::kClassification) lo.classes = &classes;
  lo.check_image = [&](const Shape& image) { return CheckImage(model, model_src, image, path); };
  lo.check_size = [&](int64_t rows, int features) {
    return CheckMemory(path, rows, features, model);
  };
  return LoadFile(path, lo, out);
}

uint64_t RoomUnderMemoryLimits(std::string* what) {
  // The address space in use and the data part of it: /proc/self/statm's pages.
  // Read without allocating: this runs after an allocation has failed too (master/cli/main.cc).
  char buf[256] = {};
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  const ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  if (fd >= 0) close(fd);
  unsigned long long size = 0, resident = 0, shared = 0, text = 0, lib = 0, data = 0;
  if (n <= 0 || std::sscanf(buf, "%llu %llu %llu %llu %llu %llu", &size, &resident, &shared,
                            &text, &lib, &data) != 6) {
    return UINT64_MAX;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t room = UINT64_MAX;
  for (const auto& [resource, used, name] :
       {std::tuple{RLIMIT_AS, size * page, "the address-space limit (ulimit -v, RLIMIT_AS)"},
        std::tuple{RLIMIT_DATA, data * page, "the data limit (ulimit -d, RLIMIT_DATA)"}}) {
    rlimit lim{};
    if (getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) continue;
    const uint64_t left = lim.rlim_cur > used ? lim.rlim_cur - used : 0;
    if (left >= room) continue;
    room = left;
    if (what != nullptr) {
      *what = Bytes(static_cast<double>(left)) + " left under " + name + " of " +
              Bytes(static_cast<double>(lim.rlim_cur)) + "; raise it or give less data";
    }
  }
  return room;
}

Status CheckMemory(const std::string& src, int64_t rows, int features, const ModelSpec& spec) {
  nn::ResolvedModel model;
  if (Status s = nn::ResolveModel(spec, /*flat_input=*/false, &model); !s.ok()) return s;
  const int64_t n = std::min(nn::EvalChunk(model), rows);
  const uint64_t bytes = nn::EvaluateBytes(model, rows);
  const PassMemory eval{
      static_cast<double>(bytes),
      Bytes(static_cast<double>(bytes)) + " for evaluation (" + Plural(n, "sample") + " a pass)"};
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

std::string InputSource(const TrainOptions& o) {
  if (!o.mlp_layers.empty()) return "--layers";
  if (o.input_shape.c > 0) return "--input-shape";
  if (o.example == "blobs") return "--features";
  if (!o.example.empty()) return "--example " + o.example;
  return o.data_path;
}

shm::ConfigCheck CheckRunOptions(const shm::RunConfig& c) {
  if (c.precision == static_cast<uint32_t>(ComputeType::kBf16) && !nn::UsedCpu().avx512_bf16) {
    return {Status::Data(nn::DetectedCpu().avx512_bf16
                             ? "bf16 products need avx512_bf16, which SHMTRAIN_CPU hides on this "
                               "CPU"
                             : "bf16 products need a CPU with avx512_bf16 (vdpbf16ps: bf16 pairs "
                               "summed into float), and this one has none; bf16 without it "
                               "would be slower than float"),
            shm::ConfigPart::kPrecision};
  }
  AugmentSpec augment;
  Status aug = AugmentSpec::Decode(c.augment, &augment);
  if (aug.ok()) aug = CheckAugment(augment, {c.input_shape[0], c.input_shape[1], c.input_shape[2]});
  if (!aug.ok()) return {Status::Data(aug.message()), shm::ConfigPart::kAugment};
  return {};
}

}  // namespace shmtrain::data
