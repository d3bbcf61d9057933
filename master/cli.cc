#include "master/cli.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <string_view>

namespace shmtrain::master {
namespace {

using Setter = std::function<Status(const std::string& flag, std::string_view value)>;

struct Flag {
  std::string name;  // with the leading "--"
  std::string arg;   // "" for a switch that takes no value
  std::string help;
  Setter set;
  bool hidden = false;
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

Setter Layers(std::vector<int>* out) {
  return [=](const std::string& flag, std::string_view v) {
    std::vector<int> sizes;
    size_t pos = 0;
    while (pos <= v.size()) {
      const size_t comma = std::min(v.find(',', pos), v.size());
      const std::string_view cell = v.substr(pos, comma - pos);
      int x = 0;
      const auto [p, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), x);
      if (cell.empty() || ec != std::errc() || p != cell.data() + cell.size()) {
        return Expected(flag, "comma-separated layer sizes such as 1,5,1", v);
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

std::vector<Flag> TrainFlags(TrainOptions* o) {
  return {
      {"--workers", "P", "worker processes (default 1)", Int<int>(&o->workers, 1, 256)},
      {"--mode", "sync|async", "how workers combine gradients (default sync)",
       Enum<Mode>(&o->mode, ParseMode, "sync, async")},
      {"--rule", "NAME", "async update rule: dc-asgd-a (default), dc-asgd-c, asgd",
       Enum<AsyncRule>(&o->rule, ParseAsyncRule, "asgd, dc-asgd-c, dc-asgd-a")},
      {"--lambda", "X", "DC-ASGD lambda: dc-asgd-c's constant (default 0.04), dc-asgd-a's "
       "lambda0 (default 2)", Num(&o->lambda)},
      {"--ms-decay", "M", "dc-asgd-a: MeanSquare decay in [0, 1) (default 0.95)",
       Num(&o->ms_decay)},
      {"--epsilon", "E", "dc-asgd-a: epsilon > 0 inside the square root (default 1e-7)",
       Num(&o->epsilon)},
      {"--max-staleness", "S", "async: drop gradients more than S versions old (default: never)",
       Int<int64_t>(&o->max_staleness, -1, INT64_MAX / 4)},
      {"--val-split", "F", "hold out this fraction of the rows (seeded shuffle; default 0)",
       Num(&o->val_split)},
      {"--val-data", "FILE", "held-out rows from a file of their own (instead of --val-split)",
       Str(&o->val_data_path)},
      {"--eval-every", "N", "validate every N steps (default: every epoch)",
       Int<int64_t>(&o->eval_every, 1, INT64_MAX / 4)},
      {"--early-stop", "PATIENCE", "stop after PATIENCE validations without a better val loss; "
       "keep the best model", Int<int64_t>(&o->early_stop, 1, INT64_MAX / 4)},
      {"--normalize", "KIND", "scale features: none (default), minmax, standard (fitted on the "
       "training rows)", Enum<Normalize>(&o->normalize, ParseNormalize, "none, minmax, standard")},
      {"--data", "FILE", "training data: CSV (numeric features, a label column) or LIBSVM",
       Str(&o->data_path)},
      {"--format", "auto|csv|libsvm", "data file format (default: by name, then by content)",
       Enum<DataFormat>(&o->format, ParseDataFormat, "auto, csv, libsvm")},
      {"--label-col", "K|NAME", "label column of the CSV: 0-based index, -1 = last (default), "
       "or its name in the header", LabelCol(o)},
      {"--task", "KIND", "classification (loss xent) or regression (loss mse); default: by --loss",
       [o](const std::string& flag, std::string_view v) {
         const auto t = ParseTask(v);
         if (!t) {
           return Status::Usage(flag + ": unknown value '" + std::string(v) +
                                "' (known: classification, regression)");
         }
         o->task = *t;
         return Status::Ok();
       }},
      {"--header", "auto|yes|no", "whether the CSV has a header line (default: detected)",
       Enum<HeaderMode>(&o->header, ParseHeader, "auto, yes, no")},
      {"--example", "NAME", "a built-in dataset instead of --data: parabola, blobs",
       Str(&o->example)},
      {"--rows", "N", "rows of the built-in example (default 50)",
       Int<int64_t>(&o->example_rows, 1, 10'000'000)},
      {"--features", "F", "features of the blobs example (default 16)",
       Int<int>(&o->example_features, 1, 100000)},
      {"--layers", "N0,N1,...", "layer sizes, inputs first, e.g. 1,5,1 (required)",
       Layers(&o->model.layers)},
      {"--activation", "NAME", "hidden activation: tanh (default), relu, sigmoid, identity",
       Enum<Activation>(&o->model.activation, ParseActivation, "tanh, relu, sigmoid, identity")},
      {"--loss", "NAME", "mse (default; one output) or xent (softmax, one output per class)",
       [o](const std::string& flag, std::string_view v) {
         o->loss_given = true;
         return Enum<Loss>(&o->model.loss, ParseLoss, "mse, xent")(flag, v);
       }},
      {"--init", "NAME", "initialisation: normal (default), xavier, he",
       Enum<Init>(&o->init, ParseInit, "normal, xavier, he")},
      {"--lr", "X", "learning rate > 0 (required)", Num(&o->lr)},
      {"--momentum", "M", "momentum in [0, 1) (default 0)", Num(&o->momentum)},
      {"--steps", "N", "number of updates (or --epochs)", Int<int64_t>(&o->steps, 1, INT64_MAX / 4)},
      {"--epochs", "E", "passes over the data (or --steps)",
       Int<int64_t>(&o->epochs, 1, INT64_MAX / 4)},
      {"--batch", "B", "global minibatch size (default: the whole dataset each step)",
       Int<int64_t>(&o->batch, 1, INT64_MAX / 4)},
      {"--seed", "S", "seed of initialisation and shuffling (default 1)",
       Int<uint64_t>(&o->seed, 0, UINT64_MAX / 2)},
      {"--log-every", "K", "print the loss every K steps; 0 = only the summary (default 50)",
       Int<int64_t>(&o->log_every, 0, INT64_MAX / 4)},
      {"--log-format", "text|json", "plain lines (default) or one JSON object per line",
       Enum<LogFormat>(&o->log_format, ParseLogFormat, "text, json")},
      {"--no-progress", "", "never show the live progress line",
       [o](const std::string&, std::string_view) {
         o->progress = false;
         return Status::Ok();
       }},
      {"--save", "FILE", "write the trained model to FILE", Str(&o->save_path)},
      {"--metrics-addr", "HOST:PORT",
       "serve Prometheus metrics here (default 127.0.0.1:9464; port 0 = any free port)",
       Str(&o->metrics_addr)},
      {"--no-metrics", "", "serve no metrics",
       [o](const std::string&, std::string_view) {
         o->metrics = false;
         return Status::Ok();
       }},
      {"--barrier-timeout", "DURATION", "deadline of a worker's barrier wait (default 120s)",
       Duration(&o->barrier_timeout_s)},
      {"--heartbeat-timeout", "DURATION",
       "kill and replace a worker silent this long (default 30s)",
       Duration(&o->heartbeat_timeout_s)},
      {"--max-restarts", "N", "give up after more than N restarts within the window (default 10)",
       Int<int>(&o->max_restarts, 0, 1000000)},
      {"--restart-window", "DURATION", "the window of --max-restarts (default 60s)",
       Duration(&o->restart_window_s)},
      {"--chaos-kill-every", "DURATION",
       "SIGKILL a random worker about this often (demos, soak tests; default off)",
       Duration(&o->chaos_every_s)},
      {"--chaos-seed", "S", "seed of the chaos kills (default 1)",
       Int<uint64_t>(&o->chaos_seed, 0, UINT64_MAX / 2)},
      {"--checkpoint", "PATH", "write checkpoints here (on SIGINT/SIGTERM, and see below)",
       Str(&o->checkpoint_path)},
      {"--checkpoint-every", "N", "write a checkpoint every N steps (sync) or updates (async)",
       Int<int64_t>(&o->checkpoint_every, 1, INT64_MAX / 4)},
      {"--resume", "PATH", "continue the run saved in this checkpoint", Str(&o->resume_path)},
      {"--fault-rank", "R", "test hook", Int<int>(&o->fault_rank, -1, 255), true},
      {"--fault-step", "T", "test hook", Int<int64_t>(&o->fault_step, -1, INT64_MAX / 4), true},
      {"--fault-point", "K", "test hook", Int<int>(&o->fault_point, 0, 7), true},
      {"--fault-incarnations", "K", "test hook", Int<int>(&o->fault_incarnations, 0, 1 << 30),
       true},
      {"--fault-master-throw", "T", "test hook",
       Int<int64_t>(&o->fault_master_throw, -1, INT64_MAX / 4), true},
  };
}

// --task without --loss picks the loss; with it, Validate() checks that they agree.
void ApplyTask(TrainOptions* o) {
  if (o->task && !o->loss_given) {
    o->model.loss = *o->task == Task::kClassification ? Loss::kXent : Loss::kMse;
  }
}

std::string FlagHelp(const std::vector<Flag>& flags) {
  std::string s;
  for (const Flag& f : flags) {
    if (f.hidden) continue;
    std::string left = "  " + f.name + (f.arg.empty() ? "" : " " + f.arg);
    if (left.size() < 28) left.resize(28, ' ');
    else left += "\n" + std::string(28, ' ');
    s += left + f.help + "\n";
  }
  return s;
}

Status ParseFlags(const std::string& cmd, const std::vector<Flag>& flags,
                  const std::vector<std::string>& args, size_t first, bool* help) {
  for (size_t i = first; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      return Status::Ok();
    }
    std::string value;
    bool has_value = false;
    if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    const Flag* f = nullptr;
    for (const Flag& x : flags) {
      if (x.name == a) f = &x;
    }
    if (f == nullptr) {
      return Status::Usage(a.rfind("-", 0) == 0 ? "unknown flag " + a + " for '" + cmd + "'"
                                               : "unexpected argument '" + a + "'");
    }
    if (f->arg.empty()) {
      if (has_value) return Status::Usage(a + ": takes no value");
    } else if (!has_value) {
      if (i + 1 >= args.size()) return Status::Usage(a + ": needs a value (" + f->arg + ")");
      value = args[++i];
    }
    if (Status s = f->set(a, value); !s.ok()) return s;
  }
  return Status::Ok();
}

constexpr const char* kMainHelp =
    "shmtrain: data-parallel neural network training over worker processes that share memory\n"
    "\n"
    "usage: shmtrain <command> [flags]\n"
    "\n"
    "commands:\n"
    "  train             train a model (shmtrain train --help)\n"
    "  eval              a saved model's loss and accuracy/RMSE on a data file\n"
    "  predict           a saved model's predictions for the rows of a data file\n"
    "  simulate          compare async update rules in a deterministic simulation\n"
    "  cleanup           remove shared memory left by runs whose master died\n"
    "  example parabola  the built-in example: a 1-5-1 tanh net fits y = x^2 on 50 points\n"
    "  help              this text\n"
    "\n"
    "example:\n"
    "  shmtrain train --workers 2 --example parabola --layers 1,5,1 --lr 0.01 --steps 2000\n"
    "\n"
    "flags: --help (on every command), --version\n"
    "exit codes: 0 ok, 1 internal error, 2 bad flag or input, 3 a worker failed,\n"
    "            4 out of resources, 130/143 stopped by SIGINT/SIGTERM\n";

}  // namespace

Status ParseCommandLine(const std::vector<std::string>& args, Command* out) {
  if (args.size() < 2 || args[1] == "help" || args[1] == "--help" || args[1] == "-h") {
    out->kind = Command::Kind::kHelp;
    out->help_text = kMainHelp;
    return Status::Ok();
  }
  if (args[1] == "--version") {
    out->kind = Command::Kind::kVersion;
    return Status::Ok();
  }
  TrainOptions& o = out->train;
  std::vector<Flag> flags = TrainFlags(&o);
  bool help = false;
  if (args[1] == "train") {
    if (Status s = ParseFlags("train", flags, args, 2, &help); !s.ok()) return s;
    if (help) {
      out->kind = Command::Kind::kHelp;
      out->help_text =
          "usage: shmtrain train --workers P (--data FILE [--label-col K|NAME] [--format F] | --example parabola|blobs)\n"
          "         [--task classification|regression] [--normalize minmax|standard]\n"
          "         [--val-split F | --val-data FILE] [--eval-every N] [--early-stop PATIENCE]\n"
          "         [--mode sync|async [--rule asgd|dc-asgd-c|dc-asgd-a]]\n"
          "         --layers 1,5,1 [--activation tanh] [--loss mse] --lr 0.01 [--momentum M]\n"
          "         (--steps N | --epochs E) [--batch B] [--seed S] [--log-every K]\n"
          "         [--save FILE] [--log-format text|json] [--metrics-addr HOST:PORT]\n"
          "         [--checkpoint PATH [--checkpoint-every N]] [--resume PATH]\n"
          "         [--heartbeat-timeout D] [--max-restarts N] [--restart-window D]\n"
          "         [--chaos-kill-every D [--chaos-seed S]]\n\nflags:\n" +
          FlagHelp(flags);
      return Status::Ok();
    }
  } else if (args[1] == "example") {
    // The seed's script: 1-5-1 tanh, mse, N = 50, lr 1e-2, 2000 full-batch steps, the loss
    // every 50 steps. Only the flags below may change it.
    if (args.size() < 3 || args[2].rfind("--", 0) == 0) {
      if (args.size() >= 3 && (args[2] == "--help" || args[2] == "-h")) {
        out->kind = Command::Kind::kHelp;
        out->help_text =
            "usage: shmtrain example parabola [--workers P] [--seed S] [--log-format text|json]\n"
            "                                 [--save FILE] [--no-progress]\n"
            "                                 [--metrics-addr HOST:PORT | --no-metrics]\n\n"
            "The seed example: a 1-5-1 tanh network fits y = x^2 on 50 points evenly spaced on\n"
            "[-2, 2], mse loss, lr 0.01, 2000 full-batch steps, the loss every 50 steps.\n";
        return Status::Ok();
      }
      return Status::Usage("example: name an example (known: parabola)");
    }
    if (args[2] != "parabola") {
      return Status::Usage("example: unknown example '" + args[2] + "' (known: parabola)");
    }
    o.example = "parabola";
    o.model.layers = {1, 5, 1};
    o.model.activation = Activation::kTanh;
    o.model.loss = Loss::kMse;
    o.lr = 0.01;
    o.steps = 2000;
    o.log_every = 50;
    std::vector<Flag> allowed;
    for (const Flag& f : flags) {
      if (f.name == "--workers" || f.name == "--log-format" || f.name == "--save" ||
          f.name == "--seed" || f.name == "--no-progress" || f.name == "--metrics-addr" ||
          f.name == "--no-metrics") {
        allowed.push_back(f);
      }
    }
    if (Status s = ParseFlags("example", allowed, args, 3, &help); !s.ok()) return s;
    if (help) return ParseCommandLine({args[0], "example", "--help"}, out);
  } else if (args[1] == "cleanup") {
    std::vector<Flag> cf = {{"--dry-run", "", "list only; remove nothing",
                             [out](const std::string&, std::string_view) {
                               out->dry_run = true;
                               return Status::Ok();
                             }}};
    if (Status s = ParseFlags("cleanup", cf, args, 2, &help); !s.ok()) return s;
    if (help) {
      out->kind = Command::Kind::kHelp;
      out->help_text =
          "usage: shmtrain cleanup [--dry-run]\n\n"
          "Lists this user's shmtrain segments in /dev/shm and removes the stale ones: those\n"
          "whose creating master is gone (its pid is free, or now another process's). A live\n"
          "run's segment is never touched.\n\nflags:\n" +
          FlagHelp(cf);
      return Status::Ok();
    }
    out->kind = Command::Kind::kCleanup;
    return Status::Ok();
  } else if (args[1] == "simulate") {
    // --workers takes a list here; every other flag means what it means for train.
    std::vector<Flag> sim;
    for (const Flag& f : flags) {
      if (f.name != "--workers" && f.name != "--mode" && f.name != "--momentum" &&
          f.name != "--save" && f.name != "--barrier-timeout" && f.name != "--max-staleness" &&
          f.name != "--no-progress" && f.name != "--metrics-addr" && f.name != "--no-metrics" &&
          f.name.rfind("--chaos", 0) != 0 && f.name.rfind("--checkpoint", 0) != 0 &&
          f.name != "--resume" && f.name != "--heartbeat-timeout" &&
          f.name != "--max-restarts" && f.name != "--restart-window" &&
          f.name != "--eval-every" && f.name != "--early-stop" && !f.hidden) {
        sim.push_back(f);
      }
    }
    sim.push_back({"--workers", "M[,M...]", "simulated worker counts, e.g. 4,8,16 (required)",
                   [out](const std::string& flag, std::string_view v) {
                     std::vector<int> ms;
                     Status s = Layers(&ms)(flag, v);
                     if (!s.ok()) return Expected(flag, "worker counts such as 4,8,16", v);
                     for (int m : ms) {
                       if (m < 1 || m > 1024) {
                         return Status::Usage(flag + ": each count must be 1..1024");
                       }
                     }
                     out->sim_workers = ms;
                     return Status::Ok();
                   }});
    sim.push_back({"--compare", "", "every rule and sequential SGD in one table",
                   [out](const std::string&, std::string_view) {
                     out->compare = true;
                     return Status::Ok();
                   }});
    if (Status s = ParseFlags("simulate", sim, args, 2, &help); !s.ok()) return s;
    if (help) {
      out->kind = Command::Kind::kHelp;
      out->help_text =
          "usage: shmtrain simulate --workers M[,M...] [--compare | --rule R] (--data FILE | "
          "--example parabola)\n"
          "         --layers ... --lr X (--steps N | --epochs E) [--batch B] [--val-split F]\n"
          "         [--normalize none|minmax|standard] [--lambda X] [--ms-decay M] [--epsilon E]\n"
          "\nA deterministic single-process simulation of M async workers in round robin: each\n"
          "gradient is computed on the parameters its worker read M-1 updates earlier.\n"
          "--compare prints a table of the final held-out error and training loss, rules by M,\n"
          "with sequential SGD as the baseline.\n\nflags:\n" +
          FlagHelp(sim);
      return Status::Ok();
    }
    if (out->sim_workers.empty()) return Status::Usage("simulate: --workers M[,M...] is required");
    o.mode = Mode::kAsync;
    out->kind = Command::Kind::kSimulate;
    ApplyTask(&o);
    return o.Validate();
  } else if (args[1] == "eval" || args[1] == "predict") {
    const bool predict = args[1] == "predict";
    std::vector<Flag> uf;
    for (const Flag& f : flags) {
      if (f.name == "--data" || f.name == "--format" || f.name == "--label-col" ||
          f.name == "--header" || f.name == "--log-format") {
        uf.push_back(f);
      }
    }
    uf.push_back({"--model", "FILE", "a model file written by shmtrain train --save (required)",
                  Str(&out->model_path)});
    uf.push_back({"--val-split", "F",
                  "use only the rows a training run with --val-split F --seed S held out",
                  Num(&o.val_split)});
    uf.push_back({"--seed", "S", "the seed of that split (default 1)",
                  Int<uint64_t>(&o.seed, 0, UINT64_MAX / 2)});
    if (predict) {
      uf.push_back({"--out", "FILE", "write the predictions here (default: stdout)",
                    Str(&out->out_path)});
    }
    if (Status s = ParseFlags(args[1], uf, args, 2, &help); !s.ok()) return s;
    if (help) {
      out->kind = Command::Kind::kHelp;
      out->help_text =
          predict ? "usage: shmtrain predict --model FILE --data FILE [--out FILE]\n"
                    "         [--format auto|csv|libsvm] [--label-col K|NAME] [--header auto|yes|no]\n"
                    "         [--val-split F [--seed S]]\n\n"
                    "Writes one CSV line per row of the data: the predicted class and the\n"
                    "probability of each class (header: class,p_<class>,...), or the predicted\n"
                    "value (header: value). A CSV row may have the model's inputs only, or\n"
                    "those and a label column, which is skipped.\n\nflags:\n"
                  : "usage: shmtrain eval --model FILE --data FILE [--format auto|csv|libsvm]\n"
                    "         [--label-col K|NAME] [--header auto|yes|no] [--val-split F [--seed S]]\n"
                    "         [--log-format text|json]\n\n"
                    "Prints the model's mean loss and its accuracy (classification) or RMSE\n"
                    "(regression) on the data, scaled with the model's own statistics.\n\nflags:\n";
      out->help_text += FlagHelp(uf);
      return Status::Ok();
    }
    if (out->model_path.empty()) return Status::Usage(args[1] + ": --model FILE is required");
    if (o.data_path.empty()) return Status::Usage(args[1] + ": --data FILE is required");
    if (!(o.val_split >= 0 && o.val_split < 1)) {
      return Status::Usage("--val-split: must be in [0, 1), got " + std::to_string(o.val_split));
    }
    out->kind = predict ? Command::Kind::kPredict : Command::Kind::kEval;
    return Status::Ok();
  } else {
    return Status::Usage("unknown command '" + args[1] + "' (try shmtrain --help)");
  }
  out->kind = Command::Kind::kTrain;
  ApplyTask(&o);
  return o.Validate();
}

}  // namespace shmtrain::master
