// The command line on CLI11: CLI11 owns the grammar (commands, `--flag value` and
// `--flag=value`, help layout); the flags are the table's (master/flags/flags.h), whose values
// parse and check themselves, so every message names the flag and the bad value; cross-field rules
// are checked by plan::Validate (master/plan/validate.cc), their one home.
#include "master/cli/cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <string_view>
#include <utility>

#include "data/format.h"
#include "data/image_folder.h"
#include "master/flags/flags.h"
#include "master/kinds/kind.h"
#include "master/plan/validate.h"

namespace shmtrain::master {
namespace {

// A setter's error travels through CLI11 as a ValidationError with the final message.
[[noreturn]] void Throw(const Status& s) { throw CLI::ValidationError(s.message()); }

// One flag of the table on `app`, filling *out.
void Register(CLI::App* app, const FlagDef& f, Command* out) {
  CLI::Option* opt;
  if (f.arg.empty()) {
    opt = app->add_flag_callback(
        f.name, [&f, out] { if (Status s = f.value.set(out, f, ""); !s.ok()) Throw(s); },
        HelpOf(f));
  } else {
    // TakeAll: a repeated flag reaches the callback with every value, which refuses it
    // (CLI11's own check would say less).
    opt = app->add_option(
        f.name,
        [&f, out](const CLI::results_t& r) {
          if (r.size() > 1) {
            throw CLI::ValidationError(f.name + ": given more than once ('" + r[0] +
                                       "', then '" + r[1] + "'); give it once");
          }
          if (Status s = f.value.set(out, f, r.empty() ? "" : r[0]); !s.ok()) Throw(s);
          return true;
        },
        HelpOf(f));
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
    "  launch            run a training job under mpirun, relaunched on the hosts left when\n"
    "                    one is lost (shmtrain launch --help)\n"
    "  example parabola  the built-in example: a 1-5-1 tanh net fits y = x^2 on 50 points\n"
    "  help [COMMAND]    this text, or a command's\n"
    "\n"
    "example:\n"
    "  shmtrain train --workers 2 --example parabola --layers 1,5,1 --lr 0.01 --steps 2000\n"
    "\n"
    "flags: --help (on every command), --version\n"
    "exit codes: 0 ok, 1 internal error, 2 bad flag or input, 3 a worker failed,\n"
    "            4 out of resources or stdout unwritable, 5 a value became NaN or infinite\n"
    "            (training diverged, or a model's inputs or outputs on some rows),\n"
    "            6 another host's master failed, 7 launch gave up (too few hosts left,\n"
    "            or its relaunches used up),\n"
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
    "         --example parabola|blobs) (--layers ... | --model ...) --lr X "
    "(--steps N | --epochs E)\n"
    "         [--batch B] [--val-split F] [--normalize none|minmax|standard|channel]\n"
    "         [--lambda X] [--ms-decay M] [--epsilon E]\n"
    "\n"
    "A deterministic single-process simulation of M async workers in round robin: each\n"
    "gradient is computed on the parameters its worker read M-1 updates earlier.\n"
    "--compare prints a table of the final held-out error and training loss, rules by M,\n"
    "with sequential SGD as the baseline.\n";

constexpr const char* kEvalUsage =
    "usage: shmtrain eval --model FILE --data FILE [--labels FILE] [--npz-x NAME] [--npz-y NAME]\n"
    "         [--format {formats}] [--label-col K|NAME] [--header auto|yes|no]\n"
    "         [--delimiter ,|;|tab] [--decimal .|,]\n"
    "         [--val-split F [--seed S]] [--log-format text|json]\n"
    "\n"
    "Prints the model's mean loss and its accuracy (classification) or RMSE (regression)\n"
    "on the data, scaled with the model's own statistics.\n";

constexpr const char* kPredictUsage =
    "usage: shmtrain predict --model FILE --data FILE [--npz-x NAME] [--out FILE]\n"
    "         [--format {formats}] [--label-col K|NAME] [--header auto|yes|no]\n"
    "         [--delimiter ,|;|tab] [--decimal .|,] [--val-split F [--seed S]]\n"
    "\n"
    "Writes one CSV line per row of the data: the predicted class and the probability of\n"
    "each class (header: class,p_<class>,...), or the predicted value (header: value). A CSV\n"
    "row may have the model's inputs only, or those and a label column, which is skipped.\n";

constexpr const char* kExportUsage =
    "usage: shmtrain export --model FILE --out FILE.onnx|FILE.npz\n"
    "\n"
    "FILE.onnx: an ONNX model (opset 13) for ONNX Runtime and other tools. It takes what\n"
    "predict takes, raw rows (float32, input [N, features] or [N, C, H, W]), scales them as\n"
    "the model does, and gives what predict prints (probabilities [N, classes], or value);\n"
    "the class labels are in its metadata (classes).\n"
    "\n"
    "Any other name: a NumPy .npz archive (numpy.load reads it, no allow_pickle needed) of\n"
    "every layer's parameters named as PyTorch's nn.Sequential of the layers names its state\n"
    "dict (0.weight, 0.bias, ...: what train --init-from reads back), the input scaling\n"
    "(input.offset, input.scale: x' = (x - offset) * scale), the class labels (classes), the\n"
    "model and its loss. docs/models.md, \"Using a model elsewhere\", shows how to use both.\n";

constexpr const char* kCleanupUsage =
    "usage: shmtrain cleanup [--dry-run]\n"
    "\n"
    "Lists this user's shmtrain segments in /dev/shm and removes the stale ones: those\n"
    "whose creating master is gone (its pid is free, or now another process's). A live\n"
    "run's segment is never touched.\n";

constexpr const char* kLaunchUsage =
    "usage: shmtrain launch --hosts A,B,C [--min-hosts N] [--max-relaunches K] -- train ...\n"
    "\n"
    "Runs the training job under mpirun, one host master on each of --hosts, and watches it\n"
    "through what each host master reports. When one is lost (it died, or stopped answering\n"
    "past --host-timeout), the job is relaunched with the same number of host masters on the\n"
    "hosts left, resuming from the newest checkpoint a survivor wrote where it stopped: a sync\n"
    "run goes on from the last step every host completed and ends with the same model as a run\n"
    "that lost no host. The job needs --checkpoint. Open MPI's settings come from the\n"
    "environment (OMPI_MCA_*); SHMTRAIN_* variables reach every host master.\n";

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
  CLI::App* launch = nullptr;
  CLI::App* help = nullptr;
  CLI::Option* version = nullptr;

  explicit Cli(Command* out) {
    root.formatter(std::make_shared<HelpFormatter>());
    root.allow_extras();
    root.get_help_ptr()->group("");
    version = root.add_flag("--version")->group("");
    auto add = [&](CLI::App* parent, const char* name, std::string usage) {
      // --format's names are the data formats' registry's (data/format.h).
      if (const size_t at = usage.find("{formats}"); at != std::string::npos) {
        usage.replace(at, 9, data::FormatNames("|"));
      }
      CLI::App* app = parent->add_subcommand(name, usage);
      app->allow_extras();  // unknown flags are reported by ParseCommandLine, by name
      app->set_help_flag("-h,--help", "print this help");
      app->get_help_ptr()->group("");
      return app;
    };
    train = add(&root, "train", kTrainUsage);
    example = add(&root, "example", kExampleUsage);
    parabola = add(example, "parabola", kExampleUsage);
    simulate = add(&root, "simulate", kSimulateUsage);
    eval = add(&root, "eval", kEvalUsage);
    predict = add(&root, "predict", kPredictUsage);
    export_cmd = add(&root, "export", kExportUsage);
    cleanup = add(&root, "cleanup", kCleanupUsage);
    launch = add(&root, "launch", kLaunchUsage);
    const std::pair<uint32_t, CLI::App*> apps[] = {
        {kTrainCmd, train},     {kExampleCmd, parabola}, {kSimulateCmd, simulate},
        {kEvalCmd, eval},       {kPredictCmd, predict},  {kExportCmd, export_cmd},
        {kCleanupCmd, cleanup}, {kLaunchCmd, launch}};
    for (const FlagDef& f : Flags()) {
      for (const auto& [bit, app] : apps) {
        if ((f.commands & bit) != 0) Register(app, f, out);
      }
    }
    help = add(&root, "help", kMainHelp);
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

// --task without --loss picks the loss; with it, plan::Validate checks that they agree.
void ApplyTask(TrainOptions* o) {
  // An image folder's labels are its class folders: a classification unless told otherwise.
  if (!o->task && !o->loss_given && !o->data_path.empty() && data::IsImageFolder(o->data_path)) {
    o->task = Task::kClassification;
  }
  if (o->task && !o->loss_given) {
    o->model.loss = *o->task == Task::kClassification ? Loss::kXent : Loss::kMse;
  }
}

// The rules of the run's kind that the command line alone decides (master/kinds/kind.h): the
// flags of the other mode, and what this mode cannot run on any count of hosts.
Status CheckKindOptions(const TrainOptions& o) { return CheckModeOptions(o); }

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
  if (Status s = plan::BuildModel(&o); !s.ok()) return s;
  if (Status s = plan::Validate(o); !s.ok()) return s;
  return CheckKindOptions(o);
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
  if (o.Given("--seed") && o.val_split == 0) {
    return Status::Usage("--seed: applies with --val-split F only (the seed of that split)");
  }
  if (Status s = data::CheckFormatFlags(o); !s.ok()) return s;
  out->kind = predict ? Command::Kind::kPredict : Command::Kind::kEval;
  return Status::Ok();
}

// `export`'s own checks once its flags are parsed.
Status FinishExport(const CLI::App* app, Command* out) {
  if (Status s = Leftover(app, "export"); !s.ok()) return s;
  if (Status s = CollectGiven(app, &out->train); !s.ok()) return s;
  if (out->model_path.empty()) return Status::Usage("--model is required (FILE, for export)");
  if (out->out_path.empty()) {
    return Status::Usage("--out is required (FILE.onnx or FILE.npz, for export)");
  }
  out->kind = Command::Kind::kExport;
  return Status::Ok();
}

// `launch`'s own checks once its flags are parsed: the job's command is a train command that
// parses, with a --checkpoint for the survivors' state; its options (the log's format) are
// the launch's.
Status FinishLaunch(const CLI::App* app, Command* out) {
  if (Status s = Leftover(app, "launch"); !s.ok()) return s;
  if (Status s = CollectGiven(app, &out->train); !s.ok()) return s;
  if (out->hosts.empty()) return Status::Usage("--hosts is required (A,B,C, for launch)");
  if (out->min_hosts > static_cast<int>(out->hosts.size())) {
    return Status::Usage("--min-hosts: " + std::to_string(out->min_hosts) + " is more than the " +
                         std::to_string(out->hosts.size()) + " hosts of --hosts");
  }
  if (out->job.empty() || out->job.front() != "train") {
    return Status::Usage("launch: the job after -- must be a train command (-- train ...)");
  }
  Command job;
  std::vector<std::string> words = {"shmtrain"};
  words.insert(words.end(), out->job.begin(), out->job.end());
  if (Status s = ParseCommandLine(words, &job); !s.ok()) {
    return Status::Usage("launch: the job: " + s.message());
  }
  if (job.kind != Command::Kind::kTrain) {
    return Status::Usage("launch: the job after -- must be a train command (-- train ...)");
  }
  if (job.train.checkpoint_path.empty()) {
    return Status::Usage(
        "launch: the job needs --checkpoint PATH: a relaunch resumes from the checkpoint each "
        "surviving host master writes there when a host is lost");
  }
  out->train = job.train;
  out->kind = Command::Kind::kLaunch;
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

// The main help, the answer to a bare `shmtrain`, `shmtrain help` and `shmtrain help help`.
Status MainHelp(Command* out) {
  out->kind = Command::Kind::kHelp;
  out->help_text = kMainHelp;
  return Status::Ok();
}

// `help COMMAND` as `COMMAND --help` (CLI11 would read COMMAND as a second command).
std::vector<std::string> HelpAsFlag(const std::vector<std::string>& args) {
  if (args[2] == "help") return {args[0]};
  std::vector<std::string> a = {args[0], args[2]};
  if (args[2] == "example") a.push_back("parabola");
  a.push_back("--help");
  return a;
}

// CLI11 over the words: the grammar, and each flag's setter. *answered when the command line
// asks for nothing a command's checks decide (a help text, --version).
Status ParseWords(Cli* cli, const std::vector<std::string>& args, Command* out, bool* answered) {
  *answered = true;
  std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 pops from the back
  try {
    cli->root.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out->kind = Command::Kind::kHelp;
    out->help_text = cli->root.help();
    return Status::Ok();
  } catch (const CLI::ParseError& e) {
    return Status::Usage(Reword(e));
  }
  if (cli->version->count() > 0) {
    out->kind = Command::Kind::kVersion;
    return Status::Ok();
  }
  if (!cli->root.remaining().empty()) {
    return Status::Usage("unknown command '" + cli->root.remaining().front() +
                         "' (try shmtrain --help)");
  }
  if (cli->help->parsed()) return MainHelp(out);
  *answered = false;
  return Status::Ok();
}

// What `train` and `example parabola` share once their flags are collected: --task's loss,
// the heartbeat deadline's default, the model, then the cross-field rules.
Status FinishTrain(TrainOptions* o) {
  ApplyTask(o);
  if (!o->Given("--heartbeat-timeout")) {
    o->heartbeat_timeout_s = TrainOptions::DefaultHeartbeatTimeout(o->barrier_timeout_s);
  }
  if (Status s = plan::BuildModel(o); !s.ok()) return s;
  if (Status s = plan::Validate(*o); !s.ok()) return s;
  return CheckKindOptions(*o);
}

// `example`'s own checks: it names the one example there is.
Status FinishExample(const Cli& cli, Command* out) {
  if (!cli.parabola->parsed()) {
    const std::vector<std::string> rest = cli.example->remaining();
    if (rest.empty() || rest.front().rfind("-", 0) == 0) {
      return Status::Usage("example: name an example (known: parabola)");
    }
    return Status::Usage("example: unknown example '" + rest.front() + "' (known: parabola)");
  }
  if (Status s = Leftover(cli.parabola, "example"); !s.ok()) return s;
  if (Status s = CollectGiven(cli.parabola, &out->train); !s.ok()) return s;
  out->kind = Command::Kind::kTrain;
  return FinishTrain(&out->train);
}

// The checks of the command the words named, once CLI11 has parsed them.
Status FinishCommand(const Cli& cli, Command* out) {
  TrainOptions& o = out->train;
  if (cli.train->parsed()) {
    if (Status s = Leftover(cli.train, "train"); !s.ok()) return s;
    if (Status s = CollectGiven(cli.train, &o); !s.ok()) return s;
    out->kind = Command::Kind::kTrain;
    return FinishTrain(&o);
  }
  if (cli.example->parsed()) return FinishExample(cli, out);
  if (cli.simulate->parsed()) return FinishSimulate(cli.simulate, out);
  if (cli.eval->parsed() || cli.predict->parsed()) {
    return FinishEvalOrPredict(cli.predict->parsed() ? cli.predict : cli.eval, out);
  }
  if (cli.export_cmd->parsed()) return FinishExport(cli.export_cmd, out);
  if (cli.launch->parsed()) return FinishLaunch(cli.launch, out);
  if (cli.cleanup->parsed()) {
    if (Status s = Leftover(cli.cleanup, "cleanup"); !s.ok()) return s;
    if (Status s = CollectGiven(cli.cleanup, &o); !s.ok()) return s;
    out->kind = Command::Kind::kCleanup;
    return Status::Ok();
  }
  return MainHelp(out);
}

}  // namespace

LogFormat AskedLogFormat(const std::vector<std::string>& args) {
  LogFormat format = LogFormat::kText;
  const std::string flag = "--log-format";
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    std::string value;
    if (args[i] == flag && i + 1 < args.size()) {
      value = args[++i];
    } else if (args[i].rfind(flag + "=", 0) == 0) {
      value = args[i].substr(flag.size() + 1);
    }
    if (value == "json") format = LogFormat::kJson;
    if (value == "text") format = LogFormat::kText;
  }
  return format;
}

Status ParseCommandLine(const std::vector<std::string>& args, Command* out) {
  if (args.size() < 2) return MainHelp(out);
  if (args[1] == "help" && args.size() > 2) return ParseCommandLine(HelpAsFlag(args), out);
  if (args[1] == "launch") {  // the job's words, after --, are the job's
    const auto dashes = std::find(args.begin() + 2, args.end(), "--");
    if (dashes != args.end()) {
      out->job.assign(dashes + 1, args.end());
      return ParseCommandLine({args.begin(), dashes}, out);
    }
  }
  Cli cli(out);
  if (args[1] == "example") SetExampleDefaults(&out->train);
  if (Status s = RefuseSwitchValues(args, cli); !s.ok()) return s;
  bool answered = false;
  if (Status s = ParseWords(&cli, args, out, &answered); !s.ok() || answered) return s;
  return FinishCommand(cli, out);
}

}  // namespace shmtrain::master
