#include "master/plan/resolve.h"

#include <utility>
#include <vector>

#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "master/files/predict.h"
#include "master/plan/segment_plan.h"
#include "nn/net.h"
#include "nn/optimizer.h"

namespace shmtrain::plan {
namespace {

using master::JsonLine;

DataDescription Describe(const TrainOptions& o, const data::RunData& rd) {
  DataDescription d;
  d.source = o.example.empty() ? o.data_path : "example " + o.example;
  d.rows = rd.train.rows;
  d.features = rd.train.features;
  d.val_rows = rd.val.rows;
  d.classes = o.model.loss == Loss::kXent ? static_cast<int64_t>(rd.train.classes.size()) : 0;
  return d;
}

// The model file this run will save, encoded with zeros for parameters and read back: its size,
// or kUsage when the format cannot hold the model (an input of more than 2^24 values).
Status ModelFileBytes(const TrainOptions& o, const data::RunData& rd, uint64_t* bytes) {
  *bytes = 0;
  if (o.save_path.empty()) return Status::Ok();
  const std::string encoded = EncodeModel({rd.model.spec, rd.norm, rd.train.classes,
                                           std::vector<float>(rd.model.param_count.value_or(0))});
  Model back;
  if (Status s = DecodeModel(encoded, o.save_path, &back); !s.ok()) {
    return Status::Usage("--save: the model file of this run could not be read back: " +
                         s.message());
  }
  *bytes = encoded.size();
  return Status::Ok();
}

// --precision auto, resolved when the flags were read (master/flags/flags.cc): said once.
void LogPrecision(const TrainOptions& o, master::Logger& log) {
  if (o.As("--precision", "") != "auto") return;
  const std::string chosen(ToString(o.precision));
  log.Info("precision auto: " + chosen +
               (o.precision == ComputeType::kBf16 ? " (this CPU has avx512_bf16)"
                                                  : " (the CPU path in use has no avx512_bf16)"),
           JsonLine("precision").Str("precision", chosen).Bool("auto", true));
}

// The run's length and this host's share of it, the optimizer over that length, and the
// segment's header checked as the workers will check it.
Status PlanRun(const TrainOptions& o, const RunKind& kind, master::Logger& log, Resolved* r) {
  const int64_t rows = r->data.rows;
  r->total_steps = o.TotalSteps(rows);
  if (Status s = kind.Plan(o, r->total_steps, EvalEvery(o, rows), log, &r->host); !s.ok()) {
    return s;
  }
  r->steps_per_epoch = o.StepsPerEpoch(rows) * r->host.steps / std::max<int64_t>(r->total_steps, 1);
  if (Status s = nn::ResolveOptim(o, r->total_steps, &r->optim); !s.ok()) return s;
  r->optimizer = nn::Describe(r->optim);
  // The workers count this host's steps or updates (checkpoints too).
  r->header = MakeHeader(kind, HostUnits(o, r->host), r->model, r->optim, rows, r->data.features,
                         r->host.steps, r->host.eval_every);
  return CheckConfig(o, r->header);
}

}  // namespace

Status Resolve(TrainOptions& o, const master::RunKind& kind, master::Logger& log, data::RunData* rd,
               Resolved* out) {
  const data::RunSizing sizing = SizingOf(kind);
  if (Status s = data::PrepareData(o, sizing, rd); !s.ok()) return s;
  master::WarnSkippedFiles(rd->train, o.data_path, log);
  master::WarnSkippedFiles(rd->val, o.val_data_path, log);
  Resolved r;
  r.model = rd->model;
  r.data = Describe(o, *rd);
  r.worker_batch_rows = sizing.worker_batch_rows(o, rd->train.rows);
  r.worker_pass_bytes = nn::PassBytes(r.model, r.worker_batch_rows, /*backward=*/true);
  if (Status s = PlanRun(o, kind, log, &r); !s.ok()) return s;
  // Resuming: the checkpoint must come from this very run (same options and data).
  r.fingerprint = RunFingerprint(o, r.optim, rd->train);
  if (Status s = ModelFileBytes(o, *rd, &r.model_bytes); !s.ok()) return s;
  r.checkpoint_bytes = CheckpointSize(static_cast<int64_t>(r.model.param_count.value_or(0)),
                                      kind.CheckpointStates(r.optim), r.optimizer);
  LogPrecision(o, log);
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace shmtrain::plan
