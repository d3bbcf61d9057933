#include "shmtrain/options.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/decimal.h"
#include "data/augment.h"
#include "data/format.h"
#include "nn/batch_norm.h"
#include "nn/layer.h"
#include "nn/optimizer.h"

namespace shmtrain {
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
  for (const char* f : {"--format", "--label-col", "--header", "--delimiter", "--decimal", "--labels",
                        "--npz-x", "--npz-y"}) {
    if (o.Given(f) && !file) return Bad(f, "applies to --data FILE only, not to a built-in example");
  }
  if (Status s = CheckFormatFlags(o); !s.ok()) return s;
  for (const char* f : {"--val-labels", "--val-npz-x", "--val-npz-y"}) {
    if (o.Given(f) && o.val_data_path.empty()) return Bad(f, "applies with --val-data FILE only");
  }
  return Status::Ok();
}

}  // namespace

Status CheckFormatFlags(const TrainOptions& o) {
  const data::DataFormatDef* d = o.file.format;
  if (d == nullptr) return Status::Ok();  // auto: the loader checks the format it finds
  for (const data::FormatFlag& f : data::DataFormatFlags()) {
    if (!o.Given(f.name) || d->Takes(f.name)) continue;
    const std::string format = d->name;
    return Bad(f.name, "applies to " + data::AppliesTo(f.name) +
                           (f.labels ? ", not to --format " + format +
                                           " (whose labels " + d->labels + ")"
                                     : " only, not to --format " + format));
  }
  return Status::Ok();
}

std::optional<char> ParseDelimiter(std::string_view s) {
  if (s == ",") return ',';
  if (s == ";") return ';';
  if (s == "tab" || s == "\t") return '\t';
  return std::nullopt;
}

std::optional<char> ParseDecimal(std::string_view s) {
  if (s == "." || s == ",") return s[0];
  return std::nullopt;
}

Status ParseHostPort(std::string_view addr, HostPort* out) {
  HostPort hp;
  std::string_view port_s;
  if (!addr.empty() && addr.front() == '[') {
    // [IPV6]:PORT, as in URLs: the brackets keep the address's colons apart from the port's.
    const size_t close = addr.find(']');
    if (close == std::string_view::npos || close + 1 >= addr.size() || addr[close + 1] != ':') {
      return Status::Usage("expected [IPV6]:PORT, e.g. [::1]:9464");
    }
    hp.host = std::string(addr.substr(1, close - 1));
    hp.ipv6 = true;
    if (hp.host.empty() || hp.host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos ||
        hp.host.find(':') == std::string::npos) {
      return Status::Usage("'" + hp.host + "' is not an IPv6 address");
    }
    port_s = addr.substr(close + 2);
  } else {
    const size_t colon = addr.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Status::Usage("expected HOST:PORT (or [IPV6]:PORT)");
    }
    hp.host = std::string(addr.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) {
      return Status::Usage("an IPv6 address goes in brackets: [" + hp.host + "]:PORT");
    }
    port_s = addr.substr(colon + 1);
  }
  const auto [p, ec] = std::from_chars(port_s.data(), port_s.data() + port_s.size(), hp.port);
  if (port_s.empty() || ec != std::errc() || p != port_s.data() + port_s.size() || hp.port < 0 ||
      hp.port > 65535) {
    return Status::Usage("port must be a number 0..65535");
  }
  *out = std::move(hp);
  return Status::Ok();
}

namespace {

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
  return Status::Ok();
}

}  // namespace

Status CheckModel(const ModelSpec& model, const char* flag, bool flat_input) {
  std::vector<Shape> shapes;
  if (Status s = nn::ResolveShapes(model.input, model.layers, &shapes, flat_input); !s.ok()) {
    return Bad(flag, s.message());
  }
  const int64_t out = model.outputs();
  const std::string last = std::string(flag) == "--layers" ? "the last layer has " : "the model has ";
  if (model.loss == Loss::kMse && out != 1) {
    return Bad(flag, "loss mse needs one output, " + last + std::to_string(out));
  }
  if (model.loss == Loss::kXent && out < 2) {
    return Bad(flag, "loss xent needs an output per class (at least 2), " + last +
                         std::to_string(out));
  }
  return Status::Ok();
}

Status CheckBatchNormBatches(const TrainOptions& o, int64_t rows) {
  // Full batch: one batch of every row. Otherwise the smallest batch the run meets: --batch,
  // or the last of an epoch (rows % batch) once the run reaches an epoch's last step.
  const int64_t batch = o.batch > 0 ? o.batch : rows;
  const int64_t last = rows % batch;
  const bool meets_last = last != 0 && o.TotalSteps(rows) >= o.StepsPerEpoch(rows);
  const int64_t smallest = meets_last ? last : batch;
  const std::string layer = nn::LoneValueLayer(o.model, smallest);
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

Status TrainOptions::BuildModel() {
  if (!mlp_layers.empty() && !model_text.empty()) {
    return Status::Usage("--layers and --model: give one of them (--layers N0,N1,...,NL is the "
                         "model linear(N1),<activation>,...,linear(NL) on N0 inputs)");
  }
  if (input_shape.c != 0 && model_text.empty()) {
    return Bad("--input-shape", "goes with --model (--layers gives the inputs as its first size)");
  }
  if (Given("--activation") && !model_text.empty()) {
    return Bad("--activation", "goes with --layers (--model names each activation as a layer)");
  }
  if (!mlp_layers.empty()) {
    model = ModelSpec::Mlp(mlp_layers, activation, model.loss);
  } else if (!model_text.empty()) {
    if (Status s = nn::ParseModelText(model_text, &model.layers); !s.ok()) {
      return Bad("--model", s.message());
    }
    model.input = input_shape;
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
  return CheckModel(o.model, o.model_text.empty() ? "--layers" : "--model");
}

// --augment on the model's input, where the command line already tells it: --layers' and the
// built-in examples' rows are flat; a --model's input from the data is checked with the run's
// configuration (shm::CheckRunConfig).
Status CheckAugmentOptions(const TrainOptions& o) {
  if (o.augment.empty()) return Status::Ok();
  data::AugmentSpec spec;
  if (Status s = data::ParseAugment(o.augment, &spec); !s.ok()) return Bad("--augment", s.message());
  if (!o.mlp_layers.empty()) {
    return Bad("--augment", "augments images, and --layers' input is a flat row (give --model "
                            "and --input-shape C,H,W)");
  }
  if (o.model.input.c == 0 && !o.example.empty()) {
    return Bad("--augment", "augments images, and the rows of --example " + o.example +
                                " are flat (give --input-shape C,H,W)");
  }
  if (o.model.input.c == 0) return Status::Ok();
  if (Status s = data::CheckAugment(spec, o.model.input); !s.ok()) return Bad("--augment", s.message());
  return Status::Ok();
}

// The learning rate and the run's length.
Status CheckRateAndLength(const TrainOptions& o) {
  if (o.lr == 0 && !o.Given("--lr")) return Status::Usage("--lr is required (the learning rate)");
  if ((o.steps > 0) == (o.epochs > 0)) {
    return Status::Usage("give exactly one of --steps N and --epochs E");
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

Status TrainOptions::Validate() const {
  for (Status (*step)(const TrainOptions&) :
       {CheckSource, CheckModelOptions, CheckAugmentOptions, CheckRateAndLength,
        nn::CheckOptimizerOptions, CheckHeldOut, CheckTask, CheckNormalize, CheckFaultTolerance,
        CheckMetricsAddr, CheckApplies}) {
    if (Status st = step(*this); !st.ok()) return st;
  }
  return Status::Ok();
}

std::string TrainOptions::As(std::string_view flag, const std::string& otherwise) const {
  const auto it = given.find(flag);
  return it == given.end() ? otherwise : it->second;
}

std::string TrainOptions::DivergenceHint() const {
  // Values as the run holds them (%g), as every divergence message has always printed them.
  const std::string rate = "--lr " + Fmt("%g", lr);
  // SGD and AdamW scale every weight by (1 - lr * wd) each step besides the gradient's move:
  // from lr * wd >= 2 on, that alone makes the weights grow.
  if (Given("--weight-decay") && lr * weight_decay >= 2) {
    return "the weight decay (--weight-decay " + Fmt("%g", weight_decay) +
           ") is probably too large for " + rate +
           ": each step scales every weight by 1 - lr x weight decay = " +
           Fmt("%g", 1 - lr * weight_decay) + ", which grows it";
  }
  // The compensation lambda * g*g*(w - w_bak) moves a stale copy by about lr * lambda * g^2
  // times its staleness: from lr * lambda >= 1 on it outgrows the gradient itself.
  // (--lambda is refused in sync runs and with --rule asgd.)
  if (rule != AsyncRule::kAsgd && Given("--lambda") && lr * lambda >= 1) {
    return "the delay compensation (--lambda " + Fmt("%g", lambda) +
           ") is probably too large for " + rate + ": lr x lambda = " + Fmt("%g", lr * lambda) +
           ", so the compensation outgrows the gradient wherever a copy is stale";
  }
  return "the learning rate (" + rate + ") is probably too large";
}

double TrainOptions::LambdaOrDefault() const {
  if (!std::isnan(lambda)) return lambda;
  return rule == AsyncRule::kDcAsgdC ? 0.01 : rule == AsyncRule::kDcAsgdA ? 2.0 : 0.0;
}

int64_t TrainOptions::TotalSteps(int64_t rows) const {
  if (steps > 0) return steps;
  return epochs * StepsPerEpoch(rows);
}

}  // namespace shmtrain
