// The command line on CLI11: CLI11 owns the grammar (commands, `--flag value` and
// `--flag=value`, help layout); the flags' values are parsed by the setters below, so every
// message names the flag and the bad value; limits and cross-field rules are checked by
// TrainOptions::Validate() (core/options.cc), their one home.
#include "master/cli.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string_view>

#include "nn/layer.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"
#include "shm/layout.h"

namespace shmtrain::master {
namespace {

using Setter = std::function<Status(const std::string& flag, std::string_view value)>;

// One flag. The help text states the default and the limits (tests/cli_test.cc checks that
// every listed flag says "default" or "required").
struct Flag {
  std::string name;  // with the leading "--"
  std::string arg;   // "" for a switch that takes no value
  std::string help;
  Setter set;
  std::string group;  // the heading it is listed under in --help; "" = hidden (test hooks)
};

Status Expected(const std::string& flag, const char* what, std::string_view got) {
  return Status::Usage(flag + ": expected " + what + ", got '" + std::string(got) + "'");
}

template <class T>
Setter Int(T* out, T lo, T hi) {
  return [=](const std::string& flag, std::string_view v) {
    long long x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || p != v.data() + v.size()) return Expected(flag, "an integer", v);
    if (x < static_cast<long long>(lo) || x > static_cast<long long>(hi)) {
      return Status::Usage(flag + ": " + std::string(v) + " is out of range (" +
                           std::to_string(lo) + ".." + std::to_string(hi) + ")");
    }
    *out = static_cast<T>(x);
    return Status::Ok();
  };
}

Setter Num(double* out) {
  return [=](const std::string& flag, std::string_view v) {
    double x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x)) {
      return Expected(flag, "a finite number", v);
    }
    *out = x;
    return Status::Ok();
  };
}

// A real number the workers compute with in float32 (learning rate, optimizer and async rule
// settings): finite, inside float32's range, and not a nonzero value that float32 makes 0
// (--eps 1e-320 would pass "> 0" here and be 0 for the workers).
Setter Real32(double* out) {
  return [=](const std::string& flag, std::string_view v) {
    double x = 0;
    if (Status s = Num(&x)(flag, v); !s.ok()) return s;
    if (std::fabs(x) > std::numeric_limits<float>::max()) {
      return Status::Usage(flag + ": " + std::string(v) +
                           " is beyond float32's range (about 3.4e38), the precision the "
                           "workers compute in");
    }
    if (x != 0 && static_cast<float>(x) == 0) {
      return Status::Usage(flag + ": " + std::string(v) +
                           " is 0 in float32, the precision the workers compute in (its "
                           "smallest positive number is about 1.4e-45)");
    }
    *out = x;
    return Status::Ok();
  };
}

// A duration: a number with a unit (us, ms, s, m, h) or plain seconds, e.g. 50ms, 1.5s.
Setter Duration(double* seconds) {
  return [=](const std::string& flag, std::string_view v) {
    double x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || !std::isfinite(x) || x < 0) {
      return Expected(flag, "a duration such as 50ms, 2s or 1m", v);
    }
    const std::string_view unit(p, v.data() + v.size() - p);
    double scale;
    if (unit.empty() || unit == "s") {
      scale = 1;
    } else if (unit == "ms") {
      scale = 1e-3;
    } else if (unit == "us") {
      scale = 1e-6;
    } else if (unit == "m") {
      scale = 60;
    } else if (unit == "h") {
      scale = 3600;
    } else {
      return Expected(flag, "a duration such as 50ms, 2s or 1m", v);
    }
    *seconds = x * scale;
    return Status::Ok();
  };
}

Setter Str(std::string* out) {
  return [=](const std::string& flag, std::string_view v) {
    if (v.empty()) return Status::Usage(flag + ": needs a value");
    *out = std::string(v);
    return Status::Ok();
  };
}

Setter Switch(bool* out, bool value) {
  return [=](const std::string&, std::string_view) {
    *out = value;
    return Status::Ok();
  };
}

template <class E>
Setter Enum(E* out, std::optional<E> (*parse)(std::string_view), const char* known) {
  return [=](const std::string& flag, std::string_view v) {
    const auto e = parse(v);
    if (!e) {
      return Status::Usage(flag + ": unknown value '" + std::string(v) + "' (known: " + known +
                           ")");
    }
    *out = *e;
    return Status::Ok();
  };
}

std::optional<LogFormat> ParseLogFormat(std::string_view s) {
  if (s == "text") return LogFormat::kText;
  if (s == "json") return LogFormat::kJson;
  return std::nullopt;
}
std::optional<HeaderMode> ParseHeader(std::string_view s) {
  if (s == "auto") return HeaderMode::kAuto;
  if (s == "yes") return HeaderMode::kYes;
  if (s == "no") return HeaderMode::kNo;
  return std::nullopt;
}

// Comma-separated integers such as 1,5,1 (layer sizes, simulated worker counts).
Setter IntList(std::vector<int>* out, const char* what) {
  return [=](const std::string& flag, std::string_view v) {
    std::vector<int> sizes;
    size_t pos = 0;
    while (pos <= v.size()) {
      const size_t comma = std::min(v.find(',', pos), v.size());
      const std::string_view cell = v.substr(pos, comma - pos);
      int x = 0;
      const auto [p, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), x);
      if (cell.empty() || ec != std::errc() || p != cell.data() + cell.size()) {
        return Expected(flag, what, v);
      }
      sizes.push_back(x);
      pos = comma + 1;
    }
    *out = sizes;
    return Status::Ok();
  };
}

// --label-col: an integer is an index (-1 = last), anything else a header name.
Setter LabelCol(TrainOptions* o) {
  return [o](const std::string& flag, std::string_view v) {
    if (v.empty()) return Status::Usage(flag + ": needs a value");
    long long x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc() && p == v.data() + v.size()) {
      if (x < -1 || x > 1000000) {
        return Status::Usage(flag + ": " + std::string(v) + " is out of range (-1..1000000)");
      }
      o->label_col = static_cast<int>(x);
      o->label_name.clear();
    } else {
      o->label_name = std::string(v);
      o->label_col = -1;
    }
    return Status::Ok();
  };
}

constexpr int64_t kBig = INT64_MAX / 4;
constexpr const char* kWorkers = "Workers";
constexpr const char* kData = "Data";
constexpr const char* kModel = "Model";
constexpr const char* kLength = "Learning rate and length";
constexpr const char* kOptim = "Optimizer";
constexpr const char* kSchedule = "Learning-rate schedule";
constexpr const char* kVal = "Held-out data";
constexpr const char* kAsync = "Async mode (--mode async)";
constexpr const char* kOut = "Output and monitoring";
constexpr const char* kFault = "Fault tolerance";

// The flags of `train`, by --help group; the other commands take subsets (and a few of their
// own).
std::vector<Flag> DataFlags(TrainOptions* o) {
  return {
      {"--workers", "P", "worker processes, 1.." + std::to_string(shm::kMaxWorkers) + " (default 1)",
       Int<int>(&o->workers, 1, shm::kMaxWorkers),
       kWorkers},
      {"--mode", "sync|async", "how workers combine gradients (default sync)",
       Enum<Mode>(&o->mode, ParseMode, "sync, async"), kWorkers},
      {"--data", "FILE",
       "training data: CSV (numeric features, a label column), LIBSVM, IDX (.gz too) or NumPy "
       ".npy/.npz (required, or --example)",
       Str(&o->data_path), kData},
      {"--labels", "FILE",
       "the labels of IDX or .npy data: an IDX, .npy or .npz file (default: an .npz's own)",
       Str(&o->labels_path), kData},
      {"--npz-x", "NAME", "the features' array in an .npz (default x)", Str(&o->npz_x), kData},
      {"--npz-y", "NAME", "the labels' array in an .npz (default y)", Str(&o->npz_y), kData},
      {"--example", "parabola|blobs", "a built-in dataset instead of --data (default: none)",
       Str(&o->example), kData},
      {"--rows", "N", "rows of the built-in example, 1..10000000 (default 50)",
       Int<int64_t>(&o->example_rows, 1, 10'000'000), kData},
      {"--features", "F", "features of the blobs example, 1..100000 (default 16)",
       Int<int>(&o->example_features, 1, 100000), kData},
      {"--format", "auto|csv|libsvm|idx|npy|npz",
       "data file format (default auto: by name, then by content)",
       Enum<DataFormat>(&o->format, ParseDataFormat, "auto, csv, libsvm, idx, npy, npz"), kData},
      {"--label-col", "K|NAME",
       "label column of a CSV: 0-based index -1..1000000 (-1 = the last), or its name in the "
       "header (default -1)",
       LabelCol(o), kData},
      {"--header", "auto|yes|no", "whether a CSV has a header line (default auto: detected)",
       Enum<HeaderMode>(&o->header, ParseHeader, "auto, yes, no"), kData},
      {"--delimiter", ",|;|tab", "CSV cell separator (default: detected from the first lines)",
       Enum<char>(&o->delimiter, ParseDelimiter, ", ; tab"), kData},
      {"--decimal", ".|,", "CSV decimal separator (default: ',' in a ';' file with numbers like 1,5)",
       Enum<char>(&o->decimal, ParseDecimal, ". ,"), kData},
      {"--task", "classification|regression",
       "what the labels are; picks the loss (default: by --loss)",
       [o](const std::string& flag, std::string_view v) {
         const auto t = ParseTask(v);
         if (!t) {
           return Status::Usage(flag + ": unknown value '" + std::string(v) +
                                "' (known: classification, regression)");
         }
         o->task = *t;
         return Status::Ok();
       },
       kData},
      {"--normalize", "none|minmax|standard",
       "scale features with statistics of the training rows (default none)",
       Enum<Normalize>(&o->normalize, ParseNormalize, "none, minmax, standard"), kData},
  };
}

// The registered layers with their arguments, for --model's help: "linear(out), conv2d(out,
// kernel, stride=1, padding=0), ...".
std::string LayerList() {
  std::string s;
  for (const nn::LayerType* t : nn::LayerTypes()) {
    if (!s.empty()) s += ", ";
    s += t->name;
    std::string args;
    for (const nn::LayerArg& a : t->args) {
      if (!args.empty()) args += ",";
      args += a.name;
      if (!a.required) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "=%g", a.default_value);
        args += buf;
      }
    }
    if (!args.empty()) s += "(" + args + ")";
  }
  return s;
}

std::vector<Flag> ModelFlags(TrainOptions* o) {
  return {
      {"--layers", "N0,N1,...",
       "an MLP's layer sizes, inputs first: 2.." + std::to_string(kMaxMlpSizes) + " sizes, each 1.." +
           std::to_string(kMaxWidth) + ", e.g. 1,5,1 (this or --model is required)",
       IntList(&o->mlp_layers, "comma-separated layer sizes such as 1,5,1"), kModel},
      {"--activation", "tanh|relu|sigmoid|identity",
       "--layers' hidden-layer activation (default tanh)",
       Enum<Activation>(&o->activation, ParseActivation, "tanh, relu, sigmoid, identity"),
       kModel},
      {"--model", "LAYERS",
       "the layers, PyTorch's names and arguments separated by commas, e.g. "
       "\"conv2d(32,5,padding=2),relu,maxpool2d(2),flatten,linear(10)\"; layers: " +
           LayerList() + " (this or --layers is required; README.md, \"Models\")",
       Str(&o->model_text), kModel},
      {"--input-shape", "C,H,W",
       "--model's input: C channels of H x W, for flat data (CSV, LIBSVM, 2-D .npy) (default: "
       "the data's: IDX images and .npy of shape (n, H, W) are 1,H,W, (n, C, H, W) is C,H,W)",
       [o](const std::string& flag, std::string_view v) {
         std::vector<int> d;
         if (!IntList(&d, "")(flag, v).ok() || d.size() != 3) {
           return Expected(flag, "C,H,W such as 1,28,28", v);
         }
         o->input_shape = {d[0], d[1], d[2]};
         return Status::Ok();
       },
       kModel},
      {"--loss", "mse|xent",
       "mse (one output) or xent (softmax, one output per class) (default mse, or by --task)",
       [o](const std::string& flag, std::string_view v) {
         o->loss_given = true;
         return Enum<Loss>(&o->model.loss, ParseLoss, "mse, xent")(flag, v);
       },
       kModel},
      {"--init", "torch|normal|xavier|he",
       "initialisation: torch = W, b ~ U(+-1/sqrt(fan_in)); normal = N(0, 1); xavier, he: "
       "scaled normal W, b = 0 (default torch)",
       Enum<Init>(&o->init, ParseInit, "torch, normal, xavier, he"), kModel},
  };
}

// --lr, the length of the run, the optimizer with every optimizer's hyper-parameters (from the
// registry, nn/optimizer.h), weight decay, clipping and the schedule.
std::vector<Flag> OptimFlags(TrainOptions* o) {
  std::vector<Flag> f = {
      {"--lr", "X", "(base) learning rate, a finite number > 0 (required)", Real32(&o->lr),
       kLength},
      {"--steps", "N", "number of updates, >= 1 (required, or --epochs)",
       Int<int64_t>(&o->steps, 1, kBig), kLength},
      {"--epochs", "E", "passes over the data, >= 1 (required, or --steps)",
       Int<int64_t>(&o->epochs, 1, kBig), kLength},
      {"--batch", "B", "global minibatch size, 1..rows (default: the whole dataset each step)",
       Int<int64_t>(&o->batch, 1, kBig), kLength},
      {"--seed", "S", "seed of initialisation and shuffling, 0..2^63-1 (default 1)",
       Int<uint64_t>(&o->seed, 0, UINT64_MAX / 2), kLength},
      {"--optimizer", "NAME", "the update rule: " + nn::OptimizerNames() + " (default sgd; "
       "README.md, \"Optimizers\")", Str(&o->optimizer), kOptim},
      {"--weight-decay", "W",
       "L2 penalty >= 0: added to the gradient (sgd, adam), decoupled (adamw) (default 0; "
       "adamw: 0.01)",
       Real32(&o->weight_decay), kOptim},
      {"--clip-norm", "C",
       "scale the mean gradient to global norm C > 0 when it is longer (default: off)",
       Real32(&o->clip_norm), kOptim},
      {"--lr-schedule", nn::ScheduleNames("|"), nn::ScheduleHelp(), Str(&o->lr_schedule),
       kSchedule},
  };
  // The values schedules take (nn/schedule.h): what each is to the schedules that take it.
  for (const nn::ScheduleFlag& p : nn::ScheduleFlags()) {
    f.push_back({p.flag, p.value_name, nn::ScheduleFlagHelp(p),
                 p.given_int != nullptr ? Int<int64_t>(&(o->*p.given_int), 1, kBig)
                                        : Real32(&(o->*p.given_real)),
                 kSchedule});
  }
  f.push_back({"--warmup-steps", "N",
               "raise the rate linearly over the first N >= 0 steps, fewer than the run's "
               "(default 0)",
               Int<int64_t>(&o->warmup_steps, 0, kBig), kSchedule});
  for (const nn::HyperParam& p : nn::AllHyperParams()) {
    const std::string flag = p.flag;
    const std::string help = std::string(p.help) + " [" + nn::OptimizersWith(flag) + "]";
    if (p.switch_()) {
      f.push_back({flag, "", help, [o, flag](const std::string&, std::string_view) {
                     o->hyper[flag] = 1;
                     return Status::Ok();
                   }, kOptim});
    } else {
      f.push_back({flag, p.value_name, help, [o, flag](const std::string& name, std::string_view v) {
                     double x = 0;
                     if (Status s = Real32(&x)(name, v); !s.ok()) return s;
                     o->hyper[flag] = x;
                     return Status::Ok();
                   }, kOptim});
    }
  }
  return f;
}

std::vector<Flag> AsyncFlags(TrainOptions* o) {
  return {
      {"--rule", "asgd|dc-asgd-c|dc-asgd-a", "async update rule (default dc-asgd-a)",
       Enum<AsyncRule>(&o->rule, ParseAsyncRule, "asgd, dc-asgd-c, dc-asgd-a"), kAsync},
      {"--lambda", "X",
       "DC-ASGD lambda >= 0: dc-asgd-c's constant (default 0.04), dc-asgd-a's lambda0 "
       "(default 2)",
       Real32(&o->lambda), kAsync},
      {"--ms-decay", "M", "dc-asgd-a: MeanSquare decay in [0, 1) (default 0.95)",
       Real32(&o->ms_decay), kAsync},
      {"--epsilon", "E", "dc-asgd-a: epsilon > 0 inside the square root (default 1e-7)",
       Real32(&o->epsilon), kAsync},
      {"--max-staleness", "S", "drop gradients more than S >= 0 versions old (default: never)",
       Int<int64_t>(&o->max_staleness, -1, kBig), kAsync},
  };
}

std::vector<Flag> OutputFlags(TrainOptions* o) {
  return {
      {"--val-split", "F", "hold out this fraction of the rows, in [0, 1) (default 0: none)",
       Num(&o->val_split), kVal},
      {"--val-data", "FILE", "held-out rows from a file of their own, not with --val-split "
       "(default: none)", Str(&o->val_data_path), kVal},
      {"--val-labels", "FILE", "the labels of IDX or .npy --val-data (default: an .npz's own)",
       Str(&o->val_labels_path), kVal},
      {"--val-npz-x", "NAME", "the held-out features' array in an .npz (default x)",
       Str(&o->val_npz_x), kVal},
      {"--val-npz-y", "NAME", "the held-out labels' array in an .npz (default y)",
       Str(&o->val_npz_y), kVal},
      {"--eval-every", "N", "validate every N >= 1 steps (default: every epoch)",
       Int<int64_t>(&o->eval_every, 1, kBig), kVal},
      {"--early-stop", "PATIENCE",
       "stop after PATIENCE >= 1 validations without a better val loss and keep the best model "
       "(default: never)",
       Int<int64_t>(&o->early_stop, 1, kBig), kVal},
      {"--log-every", "K", "print the loss every K >= 0 steps; 0 = only the summary (default 50)",
       Int<int64_t>(&o->log_every, 0, kBig), kOut},
      {"--log-format", "text|json", "plain lines or one JSON object per line (default text)",
       Enum<LogFormat>(&o->log_format, ParseLogFormat, "text, json"), kOut},
      {"--no-progress", "", "never show the live progress line (default: shown on a terminal)",
       Switch(&o->progress, false), kOut},
      {"--save", "FILE", "write the trained model to FILE (default: not saved)",
       Str(&o->save_path), kOut},
      {"--metrics-addr", "HOST:PORT",
       "serve Prometheus metrics here; [IPV6]:PORT for IPv6; port 0..65535, 0 = any free one "
       "(default 127.0.0.1:9464)",
       Str(&o->metrics_addr), kOut},
      {"--no-metrics", "", "serve no metrics (default: served)", Switch(&o->metrics, false),
       kOut},
  };
}

std::vector<Flag> FaultFlags(TrainOptions* o) {
  return {
      {"--barrier-timeout", "D", "deadline of a worker's barrier wait, 100ms..86400s "
       "(default 120s)", Duration(&o->barrier_timeout_s), kFault},
      {"--heartbeat-timeout", "D",
       "kill and replace a worker silent this long, 50ms..86400s and shorter than "
       "--barrier-timeout (default: 30s or half the barrier timeout, whichever is shorter)",
       Duration(&o->heartbeat_timeout_s), kFault},
      {"--max-restarts", "N",
       "give up after more than N restarts within the window, 0..1000000 (default 10)",
       Int<int>(&o->max_restarts, 0, 1000000), kFault},
      {"--restart-window", "D", "the window of --max-restarts, up to 7 days (default 60s)",
       Duration(&o->restart_window_s), kFault},
      {"--chaos-kill-every", "D",
       "SIGKILL a random worker about this often, up to 86400s (demos, soak tests; default: "
       "never)",
       Duration(&o->chaos_every_s), kFault},
      {"--chaos-seed", "S", "seed of the chaos kills, 0..2^63-1 (default 1)",
       Int<uint64_t>(&o->chaos_seed, 0, UINT64_MAX / 2), kFault},
      {"--checkpoint", "PATH", "write checkpoints here, on a stop signal and every "
       "--checkpoint-every (default: none)", Str(&o->checkpoint_path), kFault},
      {"--checkpoint-every", "N",
       "write a checkpoint at every multiple of N >= 1 steps (sync) or updates (async; the "
       "workers pause for the copy) (default: only on a signal)",
       Int<int64_t>(&o->checkpoint_every, 1, kBig), kFault},
      {"--resume", "PATH", "continue the run saved in this checkpoint (default: a new run)",
       Str(&o->resume_path), kFault},
      {"--fault-rank", "R", "test hook", Int<int>(&o->fault_rank, -1, shm::kMaxWorkers - 1), ""},
      {"--fault-step", "T", "test hook", Int<int64_t>(&o->fault_step, -1, kBig), ""},
      {"--fault-incarnations", "K", "test hook", Int<int>(&o->fault_incarnations, 0, 1 << 30),
       ""},
      {"--fault-master-throw", "T", "test hook",
       Int<int64_t>(&o->fault_master_throw, -1, kBig), ""},
      {"--fault-point", "K", "test hook", Int<int>(&o->fault_point, 0, 10), ""},
      {"--fault-host", "H", "test hook", Int<int>(&o->fault_host, 0, 255), ""},
      {"--host-timeout", "D",
       "several hosts (mpirun): end the job when another host's sum of a step has not arrived "
       "within D, 100ms..86400s (default 60s)",
       Duration(&o->host_timeout_s), kFault},
  };
}

std::vector<Flag> TrainFlags(TrainOptions* o) {
  std::vector<Flag> all;
  for (auto group : {DataFlags, ModelFlags, OptimFlags, AsyncFlags, OutputFlags, FaultFlags}) {
    for (Flag& f : group(o)) all.push_back(std::move(f));
  }
  return all;
}

Flag Find(const std::vector<Flag>& flags, std::string_view name) {
  for (const Flag& f : flags) {
    if (f.name == name) return f;
  }
  SHMTRAIN_DIE("flag " + std::string(name) + " is used in master/cli.cc but TrainFlags lacks it");
}

// A setter's error travels through CLI11 as a ValidationError with the final message.
[[noreturn]] void Throw(const Status& s) { throw CLI::ValidationError(s.message()); }

void Register(CLI::App* app, const Flag& f) {
  CLI::Option* opt;
  if (f.arg.empty()) {
    opt = app->add_flag_callback(
        f.name, [f] { if (Status s = f.set(f.name, ""); !s.ok()) Throw(s); }, f.help);
  } else {
    // TakeAll: a repeated flag reaches the callback with every value, which refuses it
    // (CLI11's own check would say less).
    opt = app->add_option(
        f.name,
        [f](const CLI::results_t& r) {
          if (r.size() > 1) {
            throw CLI::ValidationError(f.name + ": given more than once ('" + r[0] +
                                       "', then '" + r[1] + "'); give it once");
          }
          if (Status s = f.set(f.name, r.empty() ? "" : r[0]); !s.ok()) Throw(s);
          return true;
        },
        f.help);
    opt->type_name(f.arg)->type_size(1)->expected(1)->allow_extra_args(false);
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  opt->group(f.group);
}

constexpr size_t kHelpWidth = 100;
constexpr size_t kHelpIndent = 30;

// Help: the command's usage text (its CLI11 description), then its flags by group, each
// flag's text wrapped to kHelpWidth columns under itself.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(kHelpIndent); }

  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode mode) const override {
    if (app->get_name() == "example") app = app->get_subcommand("parabola");
    std::string s = app->get_description();
    const std::string groups = make_groups(app, mode);
    if (groups.empty()) return s;
    s += "\nflags:\n";
    size_t pos = 0;
    while (pos < groups.size()) {
      const size_t nl = std::min(groups.find('\n', pos), groups.size());
      std::string line = groups.substr(pos, nl - pos);
      pos = nl + 1;
      if (line.empty() && s.size() >= 2 && s.compare(s.size() - 2, 2, "\n\n") == 0) continue;
      while (line.size() > kHelpWidth) {
        const size_t cut = line.rfind(' ', kHelpWidth);
        if (cut == std::string::npos || cut <= kHelpIndent) break;
        s += line.substr(0, cut) + "\n";
        line = std::string(kHelpIndent, ' ') + line.substr(cut + 1);
      }
      s += line + "\n";
    }
    return s;
  }
};

constexpr const char* kMainHelp =
    "shmtrain: data-parallel neural network training over worker processes that share memory\n"
    "\n"
    "usage: shmtrain <command> [flags]\n"
    "\n"
    "commands:\n"
    "  train             train a model (shmtrain train --help)\n"
    "  eval              a saved model's loss and accuracy/RMSE on a data file\n"
    "  predict           a saved model's predictions for the rows of a data file\n"
    "  export            a saved model as NumPy arrays (.npz) for PyTorch and other tools\n"
    "  simulate          compare async update rules in a deterministic simulation\n"
    "  cleanup           remove shared memory left by runs whose master died\n"
    "  example parabola  the built-in example: a 1-5-1 tanh net fits y = x^2 on 50 points\n"
    "  help [COMMAND]    this text, or a command's\n"
    "\n"
    "example:\n"
    "  shmtrain train --workers 2 --example parabola --layers 1,5,1 --lr 0.01 --steps 2000\n"
    "\n"
    "flags: --help (on every command), --version\n"
    "exit codes: 0 ok, 1 internal error, 2 bad flag or input, 3 a worker failed,\n"
    "            4 out of resources, 5 training diverged, 6 another host's master failed,\n"
    "            130/143 stopped by SIGINT/SIGTERM (another stop signal n: 128 + n)\n";

constexpr const char* kTrainUsage =
    "usage: shmtrain train --workers P (--data FILE [data flags] | --example parabola|blobs)\n"
    "         (--layers 64,32,10 | --model LAYERS [--input-shape C,H,W]) [model flags]\n"
    "         --lr X (--steps N | --epochs E) [--batch B]\n"
    "         [--mode sync|async [--rule R] ...] [held-out data flags] [output flags]\n"
    "         [--checkpoint PATH [--checkpoint-every N]] [--resume PATH]\n"
    "         [--heartbeat-timeout D] [--max-restarts N] [--restart-window D]\n"
    "         [--chaos-kill-every D [--chaos-seed S]]\n"
    "\n"
    "Trains a model (an MLP of --layers, or the layers of --model) over P worker processes\n"
    "sharing the data and parameters in shared memory.\n"
    "A flag that does not apply to the run (e.g. --rule in sync mode) is an error. Durations\n"
    "take a unit: 50ms, 2s, 1m (plain numbers are seconds).\n";

constexpr const char* kExampleUsage =
    "usage: shmtrain example parabola [--workers P] [--seed S] [--log-format text|json]\n"
    "                                 [--save FILE] [--no-progress]\n"
    "                                 [--metrics-addr HOST:PORT | --no-metrics]\n"
    "\n"
    "The seed example: a 1-5-1 tanh network, initialised from N(0, 1), fits y = x^2 on 50\n"
    "points evenly spaced on [-2, 2], mse loss, lr 0.01, 2000 full-batch steps, the loss\n"
    "every 50 steps.\n";

constexpr const char* kSimulateUsage =
    "usage: shmtrain simulate --workers M[,M...] [--compare | --rule R] (--data FILE |\n"
    "         --example parabola|blobs) (--layers ... | --model ...) --lr X (--steps N | --epochs E)\n"
    "         [--batch B] [--val-split F] [--normalize none|minmax|standard]\n"
    "         [--lambda X] [--ms-decay M] [--epsilon E]\n"
    "\n"
    "A deterministic single-process simulation of M async workers in round robin: each\n"
    "gradient is computed on the parameters its worker read M-1 updates earlier.\n"
    "--compare prints a table of the final held-out error and training loss, rules by M,\n"
    "with sequential SGD as the baseline.\n";

constexpr const char* kEvalUsage =
    "usage: shmtrain eval --model FILE --data FILE [--labels FILE] [--npz-x NAME] [--npz-y NAME]\n"
    "         [--format auto|csv|libsvm|idx|npy|npz] [--label-col K|NAME] [--header auto|yes|no]\n"
    "         [--delimiter ,|;|tab] [--decimal .|,]\n"
    "         [--val-split F [--seed S]] [--log-format text|json]\n"
    "\n"
    "Prints the model's mean loss and its accuracy (classification) or RMSE (regression)\n"
    "on the data, scaled with the model's own statistics.\n";

constexpr const char* kPredictUsage =
    "usage: shmtrain predict --model FILE --data FILE [--npz-x NAME] [--out FILE]\n"
    "         [--format auto|csv|libsvm|idx|npy|npz] [--label-col K|NAME] [--header auto|yes|no]\n"
    "         [--delimiter ,|;|tab] [--decimal .|,] [--val-split F [--seed S]]\n"
    "\n"
    "Writes one CSV line per row of the data: the predicted class and the probability of\n"
    "each class (header: class,p_<class>,...), or the predicted value (header: value). A CSV\n"
    "row may have the model's inputs only, or those and a label column, which is skipped.\n";

constexpr const char* kExportUsage =
    "usage: shmtrain export --model FILE --out FILE.npz\n"
    "\n"
    "Writes the model as a NumPy .npz archive (numpy.load reads it, no allow_pickle needed):\n"
    "the weights and biases named as PyTorch's nn.Sequential(Linear, activation, ...,\n"
    "Linear) names its state dict (0.weight out x in, 0.bias, 2.weight, ...), the input\n"
    "scaling (input.offset, input.scale: x' = (x - offset) * scale), the class labels\n"
    "(classes) and the model's layers, activation and loss. README.md, \"Using a model in\n"
    "PyTorch\", shows how to load it.\n";

constexpr const char* kCleanupUsage =
    "usage: shmtrain cleanup [--dry-run]\n"
    "\n"
    "Lists this user's shmtrain segments in /dev/shm and removes the stale ones: those\n"
    "whose creating master is gone (its pid is free, or now another process's). A live\n"
    "run's segment is never touched.\n";

// The flags of `train` that a deterministic one-process simulation has no use for.
bool SimulateSkips(const Flag& f) {
  static const char* const kSkip[] = {
      "--workers",       "--mode",         "--save",
      "--barrier-timeout", "--max-staleness", "--no-progress", "--metrics-addr",
      "--no-metrics",    "--resume",       "--heartbeat-timeout", "--max-restarts",
      "--restart-window", "--eval-every",  "--early-stop",    "--chaos-kill-every",
      "--chaos-seed",    "--checkpoint",   "--checkpoint-every"};
  for (const char* s : kSkip) {
    if (f.name == s) return true;
  }
  // The simulation compares the async rules at a constant rate, without regularisation.
  return f.group.empty() || f.group == kOptim || f.group == kSchedule;
}

// The parser: one CLI11 app per command, flags bound to `out`.
struct Cli {
  CLI::App root{kMainHelp, "shmtrain"};
  CLI::App* train = nullptr;
  CLI::App* example = nullptr;
  CLI::App* parabola = nullptr;
  CLI::App* simulate = nullptr;
  CLI::App* eval = nullptr;
  CLI::App* predict = nullptr;
  CLI::App* export_cmd = nullptr;
  CLI::App* cleanup = nullptr;
  CLI::App* help = nullptr;
  CLI::Option* version = nullptr;

  explicit Cli(Command* out) {
    TrainOptions* o = &out->train;
    const std::vector<Flag> flags = TrainFlags(o);
    root.formatter(std::make_shared<HelpFormatter>());
    root.allow_extras();
    root.get_help_ptr()->group("");
    version = root.add_flag("--version")->group("");
    auto add = [&](const char* name, const char* usage) {
      CLI::App* app = root.add_subcommand(name, usage);
      app->allow_extras();  // unknown flags are reported by ParseCommandLine, by name
      app->set_help_flag("-h,--help", "print this help");
      app->get_help_ptr()->group("");
      return app;
    };
    train = add("train", kTrainUsage);
    for (const Flag& f : flags) Register(train, f);

    example = add("example", kExampleUsage);
    parabola = example->add_subcommand("parabola", kExampleUsage);
    parabola->allow_extras();
    parabola->set_help_flag("-h,--help", "print this help");
    parabola->get_help_ptr()->group("");
    for (const char* name : {"--workers", "--seed", "--log-format", "--save", "--no-progress",
                             "--metrics-addr", "--no-metrics"}) {
      Flag f = Find(flags, name);
      if (f.name == "--seed") f.help = "seed of the initialisation, 0..2^63-1 (default 1)";
      Register(parabola, f);
    }

    simulate = add("simulate", kSimulateUsage);
    for (const Flag& f : flags) {
      if (!SimulateSkips(f)) Register(simulate, f);
    }
    Register(simulate, {"--workers", "M[,M...]",
                        "simulated worker counts, each 1..1024, e.g. 4,8,16 (required)",
                        [out](const std::string& flag, std::string_view v) {
                          std::vector<int> ms;
                          if (!IntList(&ms, "")(flag, v).ok()) {
                            return Expected(flag, "worker counts such as 4,8,16", v);
                          }
                          for (int m : ms) {
                            if (m < 1 || m > 1024) {
                              return Status::Usage(flag + ": " + std::to_string(m) +
                                                   " is out of range (each count 1..1024)");
                            }
                          }
                          out->sim_workers = ms;
                          return Status::Ok();
                        },
                        kWorkers});
    Register(simulate, {"--compare", "",
                        "every rule and sequential SGD in one table (default: only --rule)",
                        Switch(&out->compare, true), kWorkers});

    eval = add("eval", kEvalUsage);
    predict = add("predict", kPredictUsage);
    for (CLI::App* app : {eval, predict}) {
      const bool is_predict = app == predict;
      for (const char* name : {"--data", "--labels", "--npz-x", "--npz-y", "--format",
                               "--label-col", "--header", "--delimiter", "--decimal",
                               "--log-format"}) {
        if (is_predict && (name == std::string_view("--labels") || name == std::string_view("--npz-y"))) {
          continue;  // predict reads no labels
        }
        Flag f = Find(flags, name);
        if (f.name == "--data") {
          f.help = std::string("data to ") + (is_predict ? "predict" : "evaluate") +
                   ": CSV, LIBSVM, IDX or NumPy (required)";
        }
        Register(app, f);
      }
      Register(app, {"--model", "FILE", "a model file written by shmtrain train --save (required)",
                     Str(&out->model_path), kData});
      Register(app, {"--val-split", "F",
                     "use only the rows a training run with --val-split F --seed S held out, "
                     "F in [0, 1) (default 0: every row)",
                     Num(&o->val_split), kData});
      Register(app, {"--seed", "S", "the seed of that split, 0..2^63-1 (default 1)",
                     Int<uint64_t>(&o->seed, 0, UINT64_MAX / 2), kData});
      if (is_predict) {
        Register(app, {"--out", "FILE",
                       "write the predictions here, whole or not at all (default: stdout)",
                       Str(&out->out_path), kOut});
      }
    }

    export_cmd = add("export", kExportUsage);
    Register(export_cmd, {"--model", "FILE",
                          "a model file written by shmtrain train --save (required)",
                          Str(&out->model_path), kData});
    Register(export_cmd, {"--out", "FILE", "the .npz archive to write, whole or not at all "
                          "(required)", Str(&out->out_path), kOut});

    cleanup = add("cleanup", kCleanupUsage);
    Register(cleanup, {"--dry-run", "", "list only; remove nothing (default: remove the stale)",
                       Switch(&out->dry_run, true), kOut});

    help = add("help", kMainHelp);
  }
};

// The arguments a command did not take, as an error naming the first of them.
Status Leftover(const CLI::App* app, const std::string& cmd) {
  const std::vector<std::string> rest = app->remaining();
  if (rest.empty()) return Status::Ok();
  const std::string& a = rest.front();
  if (a.rfind("-", 0) == 0) {
    return Status::Usage("unknown flag " + a.substr(0, a.find('=')) + " for '" + cmd + "'");
  }
  return Status::Usage("unexpected argument '" + a + "' for '" + cmd + "'");
}

// CLI11's own messages, reworded to name the flag the way the setters do.
std::string Reword(const CLI::ParseError& e) {
  const std::string m = e.what();
  // ArgumentMismatch for a value-less option: "--lr: 1 required X missing".
  if (const size_t colon = m.find(": 1 required "); colon != std::string::npos) {
    const size_t missing = m.rfind(" missing");
    const size_t type = colon + std::string_view(": 1 required ").size();
    if (missing != std::string::npos && missing > type) {
      return m.substr(0, colon) + ": needs a value (" + m.substr(type, missing - type) + ")";
    }
  }
  return m;
}

// The options given on the command line of `app`; a switch given twice is an error (options
// with values are refused in their callback).
Status CollectGiven(const CLI::App* app, TrainOptions* o) {
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->count() == 0 || opt == app->get_help_ptr()) continue;
    if (opt->count() > 1) return Status::Usage(opt->get_name() + ": given more than once");
    o->given[opt->get_name()] = opt->results().empty() ? "" : opt->results().front();
  }
  return Status::Ok();
}

// --task without --loss picks the loss; with it, Validate() checks that they agree.
void ApplyTask(TrainOptions* o) {
  if (o->task && !o->loss_given) {
    o->model.loss = *o->task == Task::kClassification ? Loss::kXent : Loss::kMse;
  }
}

// `simulate`'s own checks once its flags are parsed.
Status FinishSimulate(const CLI::App* app, Command* out) {
  TrainOptions& o = out->train;
  if (Status s = Leftover(app, "simulate"); !s.ok()) return s;
  if (Status s = CollectGiven(app, &o); !s.ok()) return s;
  if (out->sim_workers.empty()) {
    return Status::Usage("--workers is required (simulated worker counts such as 4,8,16)");
  }
  if (out->compare && o.Given("--rule")) {
    return Status::Usage("--rule: does not apply with --compare, which runs every rule");
  }
  o.mode = Mode::kAsync;
  out->kind = Command::Kind::kSimulate;
  ApplyTask(&o);
  if (Status s = o.BuildModel(); !s.ok()) return s;
  return o.Validate();
}

// `eval`'s and `predict`'s own checks once their flags are parsed.
Status FinishEvalOrPredict(const CLI::App* app, Command* out) {
  TrainOptions& o = out->train;
  const bool predict = app->get_name() == "predict";
  const std::string cmd = app->get_name();
  if (Status s = Leftover(app, cmd); !s.ok()) return s;
  if (Status s = CollectGiven(app, &o); !s.ok()) return s;
  if (out->model_path.empty()) return Status::Usage("--model is required (FILE, for " + cmd + ")");
  if (o.data_path.empty()) return Status::Usage("--data is required (FILE, for " + cmd + ")");
  if (!(o.val_split >= 0 && o.val_split < 1)) {
    return Status::Usage("--val-split: must be in [0, 1), got " + std::to_string(o.val_split));
  }
  if (o.Given("--seed") && o.val_split == 0) {
    return Status::Usage("--seed: applies with --val-split F only (the seed of that split)");
  }
  if (o.format != DataFormat::kAuto && o.format != DataFormat::kCsv) {
    for (const char* f : {"--label-col", "--header", "--delimiter", "--decimal"}) {
      if (o.Given(f)) {
        return Status::Usage(std::string(f) + ": applies to CSV files only, not to --format " +
                             ToString(o.format));
      }
    }
  }
  if (o.Given("--labels") && (o.format == DataFormat::kCsv || o.format == DataFormat::kLibsvm)) {
    return Status::Usage(std::string("--labels: applies to IDX and NumPy data, not to --format ") +
                         ToString(o.format) + " (whose labels are in the file)");
  }
  out->kind = predict ? Command::Kind::kPredict : Command::Kind::kEval;
  return Status::Ok();
}

// `export`'s own checks once its flags are parsed.
Status FinishExport(const CLI::App* app, Command* out) {
  if (Status s = Leftover(app, "export"); !s.ok()) return s;
  if (Status s = CollectGiven(app, &out->train); !s.ok()) return s;
  if (out->model_path.empty()) return Status::Usage("--model is required (FILE, for export)");
  if (out->out_path.empty()) return Status::Usage("--out is required (FILE.npz, for export)");
  out->kind = Command::Kind::kExport;
  return Status::Ok();
}

// The seed script's settings for `example parabola`; only the example's own flags may change
// them.
void SetExampleDefaults(TrainOptions* o) {
  o->example = "parabola";
  o->mlp_layers = {1, 5, 1};
  o->activation = Activation::kTanh;
  o->model.loss = Loss::kMse;
  o->init = Init::kNormal;
  o->lr = 0.01;
  o->steps = 2000;
  o->log_every = 50;
}

// CLI11 would take `--no-progress=x` as a flag override; a switch takes no value.
Status RefuseSwitchValues(const std::vector<std::string>& args, const Cli& cli) {
  for (size_t i = 2; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) continue;
    for (const CLI::App* app : {cli.train, cli.parabola, cli.simulate, cli.cleanup}) {
      const CLI::Option* opt = app->get_option_no_throw(a.substr(0, eq));
      if (opt != nullptr && opt->get_expected_max() == 0) {
        return Status::Usage(a.substr(0, eq) + ": takes no value, got '" + a.substr(eq + 1) + "'");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status ParseCommandLine(const std::vector<std::string>& args, Command* out) {
  if (args.size() < 2) {
    out->kind = Command::Kind::kHelp;
    out->help_text = kMainHelp;
    return Status::Ok();
  }
  // `help COMMAND` is `COMMAND --help` (CLI11 would read COMMAND as a second command).
  if (args[1] == "help" && args.size() > 2) {
    if (args[2] == "help") return ParseCommandLine({args[0]}, out);
    std::vector<std::string> a = {args[0], args[2]};
    if (args[2] == "example") a.push_back("parabola");
    a.push_back("--help");
    return ParseCommandLine(a, out);
  }
  Cli cli(out);
  TrainOptions& o = out->train;
  if (args[1] == "example") SetExampleDefaults(&o);
  if (Status s = RefuseSwitchValues(args, cli); !s.ok()) return s;
  std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 pops from the back
  try {
    cli.root.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out->kind = Command::Kind::kHelp;
    out->help_text = cli.root.help();
    return Status::Ok();
  } catch (const CLI::ParseError& e) {
    return Status::Usage(Reword(e));
  }
  if (cli.version->count() > 0) {
    out->kind = Command::Kind::kVersion;
    return Status::Ok();
  }
  if (!cli.root.remaining().empty()) {
    return Status::Usage("unknown command '" + cli.root.remaining().front() +
                         "' (try shmtrain --help)");
  }
  if (cli.help->parsed()) {
    out->kind = Command::Kind::kHelp;
    out->help_text = kMainHelp;
    return Status::Ok();
  }
  if (cli.train->parsed()) {
    if (Status s = Leftover(cli.train, "train"); !s.ok()) return s;
    if (Status s = CollectGiven(cli.train, &o); !s.ok()) return s;
    out->kind = Command::Kind::kTrain;
  } else if (cli.example->parsed()) {
    if (!cli.parabola->parsed()) {
      const std::vector<std::string> rest = cli.example->remaining();
      if (rest.empty() || rest.front().rfind("-", 0) == 0) {
        return Status::Usage("example: name an example (known: parabola)");
      }
      return Status::Usage("example: unknown example '" + rest.front() + "' (known: parabola)");
    }
    if (Status s = Leftover(cli.parabola, "example"); !s.ok()) return s;
    if (Status s = CollectGiven(cli.parabola, &o); !s.ok()) return s;
    out->kind = Command::Kind::kTrain;
  } else if (cli.simulate->parsed()) {
    return FinishSimulate(cli.simulate, out);
  } else if (cli.eval->parsed() || cli.predict->parsed()) {
    return FinishEvalOrPredict(cli.predict->parsed() ? cli.predict : cli.eval, out);
  } else if (cli.export_cmd->parsed()) {
    return FinishExport(cli.export_cmd, out);
  } else if (cli.cleanup->parsed()) {
    if (Status s = Leftover(cli.cleanup, "cleanup"); !s.ok()) return s;
    if (Status s = CollectGiven(cli.cleanup, &o); !s.ok()) return s;
    out->kind = Command::Kind::kCleanup;
    return Status::Ok();
  } else {
    out->kind = Command::Kind::kHelp;
    out->help_text = kMainHelp;
    return Status::Ok();
  }
  ApplyTask(&o);
  if (!o.Given("--heartbeat-timeout")) {
    o.heartbeat_timeout_s = TrainOptions::DefaultHeartbeatTimeout(o.barrier_timeout_s);
  }
  if (Status s = o.BuildModel(); !s.ok()) return s;
  return o.Validate();
}

}  // namespace shmtrain::master
