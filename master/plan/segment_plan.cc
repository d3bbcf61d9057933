#include "master/plan/segment_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "data/pipeline.h"
#include "master/flags/flags.h"
#include "nn/layer.h"
#include "nn/optimizer.h"
#include "shm/segment.h"

namespace shmtrain::plan {

using master::FlagDef;
using master::Flags;

shm::Header MakeHeader(const RunKind& kind, const TrainOptions& o, const nn::ResolvedModel& model,
                       const OptimConfig& optim, int64_t rows, int features, int64_t total_steps,
                       int64_t eval_every) {
  shm::Header proto{};
  shm::RunConfig& c = proto.config;
  for (const FlagDef& f : Flags()) {
    if (f.to_workers != nullptr) f.to_workers(o, &c);
  }
  c.mode = static_cast<uint32_t>(kind.mode());
  const ModelSpec& spec = model.spec;
  c.loss = static_cast<uint32_t>(spec.loss);
  c.input_shape[0] = spec.input.c;
  c.input_shape[1] = spec.input.h;
  c.input_shape[2] = spec.input.w;
  const std::string text = spec.Text();  // shorter than the field (plan::Validate)
  std::snprintf(c.model, sizeof c.model, "%s", text.c_str());
  c.hosts = static_cast<uint32_t>(o.host_count);
  c.host_index = static_cast<uint32_t>(o.host_index);
  c.param_count = model.param_count.value_or(0);
  c.stats_count = static_cast<uint64_t>(model.stats_count);
  c.rows = rows;
  c.features = features;
  c.total_steps = total_steps;
  c.optim = optim;
  // Spinning pays only while every worker has a core of its own.
  c.spin_ns =
      o.workers * o.host_local_count <= static_cast<int>(std::thread::hardware_concurrency())
          ? 50'000
          : 0;
  c.master_pid = getpid();
  c.eval_every = kind.WorkersEvalEvery(eval_every);
  // The snapshot ring: ranks run up to its length in evaluations ahead of the master's copy
  // (its 1 ms look), so a longer ring keeps fast epochs from waiting. Up to 16 snapshots
  // within 32 MiB, never fewer than 2. Early stopping needs exactly 2 (see run loop).
  const uint64_t vec_bytes =
      (c.param_count * sizeof(float) + shm::kCacheLine - 1) / shm::kCacheLine * shm::kCacheLine;
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

int64_t EvalEvery(const TrainOptions& o, int64_t rows) {
  if (o.val_split <= 0 && o.val_data_path.empty()) return 0;
  if (o.eval_every > 0) return o.eval_every;
  if (o.batch > 0) return o.StepsPerEpoch(rows);
  return o.log_every > 0 ? o.log_every : 50;
}

Status CheckConfig(const TrainOptions& o, const shm::Header& h) {
  shm::ConfigCheck check = shm::CheckRunConfig(h.config);
  if (check.ok()) check = data::CheckRunOptions(h.config);
  if (check.ok()) return Status::Ok();
  std::string source;
  switch (check.part) {
    case shm::ConfigPart::kInput:
      source = data::InputSource(o);
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
    case shm::ConfigPart::kAugment:
      source = "--augment";
      break;
    case shm::ConfigPart::kProcesses:
    case shm::ConfigPart::kNone:
      source = "--workers";
      break;
  }
  return Status::Usage(source + ": the workers would refuse this run: " + check.status.message());
}

TrainOptions HostUnits(const TrainOptions& o, const HostPlan& plan) {
  TrainOptions h = o;
  h.checkpoint_every = plan.checkpoint_every;
  return h;
}

int64_t WorkerBatchRows(const KindPlan& kind, const TrainOptions& o, int64_t rows) {
  const int64_t batch = o.batch > 0 ? std::min(o.batch, rows) : rows;
  const int64_t world = int64_t{o.workers} * o.host_count;
  return kind.WorkerBatchRows(batch, static_cast<int>(world));
}

namespace {

// The segment of a run of o's `model` on rows x features, before the data is read: its
// configuration checked as the workers will (CheckConfig), and its size in *bytes.
Status SegmentBytes(const RunKind& kind, const TrainOptions& o, const nn::ResolvedModel& model,
                    int64_t rows, int features, uint64_t* bytes) {
  OptimConfig optim;  // its state vectors count towards the segment's size
  if (Status s = nn::ResolveOptim(o, INT64_MAX, &optim); !s.ok()) return s;
  const shm::Header proto =
      MakeHeader(kind, o, model, optim, rows, features, 1, EvalEvery(o, rows));
  if (Status s = CheckConfig(o, proto); !s.ok()) return s;
  *bytes = proto.total_size;
  return Status::Ok();
}

}  // namespace

data::RunSizing SizingOf(const RunKind& kind) {
  return {[&kind](const TrainOptions& o, int64_t rows) { return WorkerBatchRows(kind, o, rows); },
          [&kind](const TrainOptions& o, const nn::ResolvedModel& model, int64_t rows, int features,
                  uint64_t* bytes) { return SegmentBytes(kind, o, model, rows, features, bytes); }};
}

}  // namespace shmtrain::plan
