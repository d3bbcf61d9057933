#include "master/plan/validate.h"

#include <string>

#include "core/decimal.h"
#include "data/augment.h"
#include "data/format.h"
#include "data/pipeline.h"
#include "nn/layer.h"
#include "nn/optimizer.h"

namespace shmtrain::plan {
namespace {

Status Bad(const std::string& flag, const std::string& what) {
  return Status::Usage(flag + ": " + what);
}

// A flag given on the command line that the run would ignore: an error, so that nobody
// believes it took effect. Returns the first such flag's message, in this order. (The flags
// of one mode, and the async rules' own, are the run kind's: master/kinds/kind.h.)
Status CheckApplies(const TrainOptions& o) {
  if (o.Given("--metrics-addr") && !o.metrics) {
    return Bad("--metrics-addr", "does not apply with --no-metrics (no metrics are served)");
  }
  if (o.Given("--init") && !o.init_from_path.empty()) {
    return Bad("--init", "does not apply with --init-from " + o.init_from_path +
                             " (the file gives every parameter)");
  }
  if (o.Given("--chaos-seed") && o.chaos_every_s == 0) {
    return Bad("--chaos-seed", "needs --chaos-kill-every D (no chaos kills without it)");
  }
  const bool file = !o.data_path.empty();
  if (o.Given("--rows") && file) {
    return Bad("--rows", "applies to a built-in --example only, not to --data FILE");
  }
  if (o.Given("--features") && o.example != "blobs") {
    return Bad("--features", "applies to --example blobs only");
  }
  for (const char* f : {"--format", "--label-col", "--header", "--delimiter", "--decimal",
                        "--labels", "--npz-x", "--npz-y"}) {
    if (o.Given(f) && !file) {
      return Bad(f, "applies to --data FILE only, not to a built-in example");
    }
  }
  if (Status s = data::CheckFormatFlags(o); !s.ok()) return s;
  for (const char* f : {"--val-labels", "--val-npz-x", "--val-npz-y"}) {
    if (o.Given(f) && o.val_data_path.empty()) return Bad(f, "applies with --val-data FILE only");
  }
  return Status::Ok();
}

// Held-out data and validation: the fraction or file, and what needs them.
Status CheckHeldOut(const TrainOptions& o) {
  if (o.val_split > 0 && !o.val_data_path.empty()) {
    return Status::Usage("give at most one of --val-split F and --val-data FILE");
  }
  const bool has_val = o.val_split > 0 || !o.val_data_path.empty();
  if (o.eval_every > 0 && !has_val) {
    return Bad("--eval-every", "needs held-out data (--val-split F or --val-data FILE)");
  }
  if (o.early_stop > 0 && !has_val) {
    return Bad("--early-stop", "needs held-out data (--val-split F or --val-data FILE)");
  }
  if (!o.val_data_path.empty() && !o.example.empty()) {
    return Bad("--val-data", "goes with --data FILE, not with a built-in example");
  }
  if (!o.file.label_name.empty() && !o.example.empty()) {
    return Bad("--label-col", "names a column of --data FILE; a built-in example has none");
  }
  return Status::Ok();
}

// Deadlines, restarts, chaos and checkpoints.
Status CheckFaultTolerance(const TrainOptions& o) {
  if (o.heartbeat_timeout_s >= o.barrier_timeout_s) {
    return Bad("--heartbeat-timeout",
               Fmt("%gs", o.heartbeat_timeout_s) + " must be shorter than --barrier-timeout (" +
                   Fmt("%gs", o.barrier_timeout_s) +
                   "): a silent worker must be found and replaced before the healthy ones give "
                   "up waiting for it at the barrier");
  }
  if (o.checkpoint_every > 0 && o.checkpoint_path.empty()) {
    return Bad("--checkpoint-every", "needs --checkpoint PATH");
  }
  if (!o.init_from_path.empty() && !o.resume_path.empty()) {
    return Status::Usage("--init-from " + o.init_from_path + " and --resume " + o.resume_path +
                         ": give one of them (--resume continues a run from its checkpoint, which "
                         "holds the parameters; --init-from starts a new run from weights)");
  }
  return Status::Ok();
}

}  // namespace

Status BuildModel(TrainOptions* opts) {
  TrainOptions& o = *opts;
  if (!o.mlp_layers.empty() && !o.model_text.empty()) {
    return Status::Usage("--layers and --model: give one of them (--layers N0,N1,...,NL is the "
                         "model linear(N1),<activation>,...,linear(NL) on N0 inputs)");
  }
  if (o.input_shape.c != 0 && o.model_text.empty()) {
    return Bad("--input-shape", "goes with --model (--layers gives the inputs as its first size)");
  }
  if (o.Given("--activation") && !o.model_text.empty()) {
    return Bad("--activation", "goes with --layers (--model names each activation as a layer)");
  }
  if (!o.mlp_layers.empty()) {
    o.model = ModelSpec::Mlp(o.mlp_layers, o.activation, o.model.loss);
  } else if (!o.model_text.empty()) {
    if (Status s = nn::ParseModelText(o.model_text, &o.model.layers); !s.ok()) {
      return Bad("--model", s.message());
    }
    o.model.input = o.input_shape;
  }
  return Status::Ok();
}

namespace {

// Validate's steps, in its order: the first refusal is the one reported.

// Where the rows come from.
Status CheckSource(const TrainOptions& o) {
  if (o.data_path.empty() == o.example.empty()) {
    return Status::Usage("give exactly one of --data FILE and --example parabola");
  }
  if (!o.example.empty() && o.example != "parabola" && o.example != "blobs") {
    return Bad("--example", "unknown example '" + o.example + "' (known: parabola, blobs)");
  }
  if (o.example == "blobs" && o.model.loss != Loss::kXent) {
    return Bad("--example", "blobs is a classification set: use --loss xent");
  }
  return Status::Ok();
}

// --layers' count and sizes, that there is a model, its text's length, and its shapes when its
// input is known.
Status CheckModelOptions(const TrainOptions& o) {
  const auto& layers = o.mlp_layers;
  if (!layers.empty() && (layers.size() < 2 || layers.size() > kMaxMlpSizes)) {
    return Bad("--layers", "needs 2 to " + std::to_string(kMaxMlpSizes) +
                               " sizes, e.g. 1,5,1; got " + std::to_string(layers.size()));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 1 || layers[i] > kMaxWidth) {
      return Bad("--layers", "size " + std::to_string(i + 1) + " must be between 1 and " +
                                 std::to_string(kMaxWidth) + ", got " + std::to_string(layers[i]));
    }
  }
  if (o.model.layers.empty()) {
    return Status::Usage("--layers or --model is required (--layers 1,5,1 for an MLP, or "
                         "--model with layers such as \"linear(5),tanh,linear(1)\")");
  }
  if (o.model.Text().size() >= kMaxModelText) {
    return Bad("--model", "the model's text is " + std::to_string(o.model.Text().size()) +
                              " bytes written out, more than the " +
                              std::to_string(kMaxModelText - 1) + " a run holds");
  }
  // A --model's input may come from the data (master/run/run.cc checks it then).
  if (o.model.input.c == 0) return Status::Ok();
  return data::CheckModel(o.model, o.model_text.empty() ? "--layers" : "--model");
}

// --augment on the model's input, where the command line already tells it: --layers' and the
// built-in examples' rows are flat; a --model's input from the data is checked with the run's
// configuration (master/plan/segment_plan.h, CheckConfig).
Status CheckAugmentOptions(const TrainOptions& o) {
  if (o.augment.empty()) return Status::Ok();
  data::AugmentSpec spec;
  if (Status s = data::ParseAugment(o.augment, &spec); !s.ok()) {
    return Bad("--augment", s.message());
  }
  if (!o.mlp_layers.empty()) {
    return Bad("--augment", "augments images, and --layers' input is a flat row (give --model "
                            "and --input-shape C,H,W)");
  }
  if (o.model.input.c == 0 && !o.example.empty()) {
    return Bad("--augment", "augments images, and the rows of --example " + o.example +
                                " are flat (give --input-shape C,H,W)");
  }
  if (o.model.input.c == 0) return Status::Ok();
  if (Status s = data::CheckAugment(spec, o.model.input); !s.ok()) {
    return Bad("--augment", s.message());
  }
  return Status::Ok();
}

// The learning rate and the run's length.
Status CheckRateAndLength(const TrainOptions& o) {
  if (o.lr == 0 && !o.Given("--lr")) return Status::Usage("--lr is required (the learning rate)");
  if ((o.steps > 0 || o.Given("--steps")) == (o.epochs > 0)) {
    return Status::Usage("give exactly one of --steps N and --epochs E");
  }
  // --steps 0: a model saved from --init-from's weights (master/run/zero_steps.h).
  if (o.Given("--steps") && o.steps == 0) {
    if (o.init_from_path.empty() || o.save_path.empty()) {
      return Bad("--steps",
                 "0 needs --init-from W.npz and --save M.bin (it saves the weights "
                 "as a model without training)");
    }
    if (!o.checkpoint_path.empty()) {
      return Bad("--checkpoint", "does not apply with --steps 0 (no step to checkpoint)");
    }
  }
  return Status::Ok();
}

// --task against a --loss given with it.
Status CheckTask(const TrainOptions& o) {
  if (!o.task || !o.loss_given || TaskOf(o.model.loss) == *o.task) return Status::Ok();
  const Loss needs = *o.task == Task::kClassification ? Loss::kXent : Loss::kMse;
  return Bad("--task", std::string(ToString(*o.task)) + " needs --loss " + ToString(needs) +
                           ", got --loss " + ToString(o.model.loss));
}

// --normalize channel on an input known to be flat before the data is read: --layers, a
// built-in example, a flat --input-shape. A --model's input read from the data is checked where
// the statistics are fitted (data/preprocess.h).
Status CheckNormalize(const TrainOptions& o) {
  if (o.normalize != Normalize::kChannel) return Status::Ok();
  std::string flat;
  if (!o.mlp_layers.empty()) {
    flat = "--layers takes flat features";
  } else if (!o.example.empty()) {
    flat = "the example " + o.example + " has flat features";
  } else if (o.model.input.c > 0 && o.model.input.Flat()) {
    flat = "--input-shape " + o.As("--input-shape", o.model.input.Text()) + " is flat features";
  }
  if (flat.empty()) return Status::Ok();
  return Bad("--normalize", "channel scales each channel of an image (rows of c x h x w, a "
                            "--model on an image input), but " +
                                flat + ": --normalize standard scales each feature");
}

Status CheckMetricsAddr(const TrainOptions& o) {
  if (o.metrics_addr.empty() || !o.metrics) return Status::Ok();
  HostPort hp;
  if (Status st = ParseHostPort(o.metrics_addr, &hp); !st.ok()) {
    return Bad("--metrics-addr " + o.metrics_addr, st.message());
  }
  return Status::Ok();
}

}  // namespace

Status Validate(const TrainOptions& o) {
  for (Status (*step)(const TrainOptions&) :
       {CheckSource, CheckModelOptions, CheckAugmentOptions, CheckRateAndLength,
        nn::CheckOptimizerOptions, CheckHeldOut, CheckTask, CheckNormalize, CheckFaultTolerance,
        CheckMetricsAddr, CheckApplies}) {
    if (Status st = step(o); !st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace shmtrain::plan
