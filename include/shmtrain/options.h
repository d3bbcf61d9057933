// Every setting of a training run, with its default.
//
// The CLI fills a TrainOptions from the flag table (master/flags/flags.h), which states each flag's
// default and limits and checks every value against its limits as it is read; plan::Validate
// (master/plan/validate.h) then checks the fields against each other. The master copies the
// parts the workers need into the segment header (shm/layout.h), their only source of truth:
// the flag's row says so and writes its RunConfig field (an added field there bumps the ABI).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/model_spec.h"
#include "shmtrain/optim_config.h"
#include "shmtrain/relaunch.h"
#include "shmtrain/status.h"

namespace shmtrain {

enum class Mode : uint32_t { kSync = 0, kAsync = 1 };  // stored in the segment: append only
enum class LogFormat { kText, kJson };
enum class HeaderMode { kAuto, kYes, kNo };
// Async update rule (values stored in the segment: append only). See nn/update.h.
enum class AsyncRule : uint32_t { kAsgd = 0, kDcAsgdC = 1, kDcAsgdA = 2 };
// Feature scaling, fitted on the training rows only (values stored in files: append only).
// kChannel standardises each channel of an image input (data/preprocess.h).
enum class Normalize : uint32_t { kNone = 0, kMinMax = 1, kStandard = 2, kChannel = 3 };
// The inputs of the layers' products (nn/gemm.h): float, or bf16 with float sums (values
// stored in the segment: append only).
enum class ComputeType : uint32_t { kFloat = 0, kBf16 = 1 };
// What the labels are: real targets (mse loss) or classes (xent loss). Stored in model files.
enum class Task : uint32_t { kRegression = 0, kClassification = 1 };

constexpr auto NameTable(Mode) {
  return std::to_array<EnumName<Mode>>({{Mode::kSync, "sync"}, {Mode::kAsync, "async"}});
}
constexpr auto NameTable(LogFormat) {
  return std::to_array<EnumName<LogFormat>>(
      {{LogFormat::kText, "text"}, {LogFormat::kJson, "json"}});
}
constexpr auto NameTable(HeaderMode) {
  return std::to_array<EnumName<HeaderMode>>(
      {{HeaderMode::kAuto, "auto"}, {HeaderMode::kYes, "yes"}, {HeaderMode::kNo, "no"}});
}
constexpr auto NameTable(AsyncRule) {
  return std::to_array<EnumName<AsyncRule>>({{AsyncRule::kAsgd, "asgd"},
                                             {AsyncRule::kDcAsgdC, "dc-asgd-c"},
                                             {AsyncRule::kDcAsgdA, "dc-asgd-a"}});
}
constexpr auto NameTable(Normalize) {
  return std::to_array<EnumName<Normalize>>({{Normalize::kNone, "none"},
                                             {Normalize::kMinMax, "minmax"},
                                             {Normalize::kStandard, "standard"},
                                             {Normalize::kChannel, "channel"}});
}
constexpr auto NameTable(ComputeType) {
  return std::to_array<EnumName<ComputeType>>(
      {{ComputeType::kFloat, "float"}, {ComputeType::kBf16, "bf16"}});
}
// --task lists classification first.
constexpr auto NameTable(Task) {
  return std::to_array<EnumName<Task>>(
      {{Task::kClassification, "classification"}, {Task::kRegression, "regression"}});
}

// --delimiter: ",", ";" or "tab" (also a literal tab) -> ',', ';', '\t'.
std::optional<char> ParseDelimiter(std::string_view s);
// --decimal: "." or ",".
std::optional<char> ParseDecimal(std::string_view s);
// A listening address "HOST:PORT" or "[IPV6]:PORT", PORT 0..65535 (0: any free port). HOST is
// returned without brackets. kUsage saying what is wrong when malformed (callers name the
// flag).
struct HostPort {
  std::string host;
  int port = 0;
  bool ipv6 = false;
};
Status ParseHostPort(std::string_view addr, HostPort* out);
inline Task TaskOf(Loss l) { return l == Loss::kXent ? Task::kClassification : Task::kRegression; }

// IDX and NumPy data (data/arrays.h): where the features' and the labels' arrays are.
struct ArraySource {
  // The labels' own file (IDX, .npy, or an .npz whose y_key array they are); empty: the y_key
  // array of the data's own .npz.
  std::string labels_path;
  // The arrays of an .npz: the features and the labels.
  std::string x_key = "x";
  std::string y_key = "y";
};

// How to read a data file: the flags --format, --labels, --npz-x, --npz-y, --label-col,
// --header, --delimiter and --decimal. The training options hold it for their files and the
// loader (data::LoadOptions) for the file it reads.
struct DataFileOptions {
  // A registered format's name (data/format.h, FindFormat; --format NAME, its canonical
  // spelling); empty (--format auto): by name (.npy, .npz; IDX:
  // "-idx<N>-ubyte" or .idx, with or without .gz; LIBSVM: .svm, .libsvm, .svmlight), then by
  // content (the NPY, zip and IDX magic numbers, of the inflated bytes for gzip; a first data
  // line like "<label> <index>:<value>" is LIBSVM); otherwise CSV. Every format but .npz may
  // be gzip-compressed.
  std::string format;
  ArraySource arrays;
  // CSV: the label column, 0-based (-1 = last; other negatives are errors), or, when
  // label_name is set, the column with that name in the header line.
  int label_col = -1;
  std::string label_name;
  // Whether a CSV file's first line is a header. kAuto: detected (a first line with a cell
  // that is not a number is a header).
  HeaderMode header = HeaderMode::kAuto;
  // CSV delimiter: ',', ';' or '\t'; 0 = detected from the first two non-blank lines (the
  // one of the three found outside quotes as often on both, the most often; ties go to ',',
  // then ';'). Any other value is an error. Ignored for LIBSVM.
  char delimiter = 0;
  // CSV decimal separator: '.' or ',' (as R's read.csv2 and pandas' decimal=','; the delimiter
  // must then not be ','). 0 = detected: ',' when the delimiter is ';' and a cell of the first
  // two non-blank lines is a number with a decimal comma ("1,5"), else '.'. A file has one:
  // "1,5" reads as exactly the float "1.5" does, and with ',' a cell with '.' is refused.
  char decimal = 0;
};

struct TrainOptions {
  // Number of worker processes. Default 1; 1..shm::kMaxWorkers.
  int workers = 1;
  Mode mode = Mode::kSync;

  // Data: exactly one of data_path / example. example: "parabola" or "blobs" (Gaussian
  // clusters: example_rows rows of example_features features, one class per output).
  std::string data_path;
  std::string example;
  // Rows of the built-in example. Default 50 (the seed's N); 1 <= n <= 10^7.
  int64_t example_rows = 50;
  // Features of the blobs example. Default 16; 1..100000.
  int example_features = 16;
  // How data_path and val_data_path are read; the held-out file has arrays of its own
  // (--val-labels, --val-npz-x, --val-npz-y), read with file's other options.
  DataFileOptions file;
  ArraySource val_arrays;

  // Model: --layers or --model, one of them. mlp_layers (--layers) with activation
  // (--activation): the MLP of those sizes, e.g. {1,5,1}; first = number of features, last = 1
  // for mse or the number of classes for xent; each size 1..65536, 2..64 entries. model_text
  // (--model): layers in the model text (nn/layer.h), on input_shape (--input-shape C,H,W; c =
  // 0: the data's own, 1xHxW for images of H x W, else flat). `model` is the model these say:
  // plan::BuildModel builds it (an MLP's whole, a --model's layers), and the run sets a
  // --model's input from the data (data/pipeline.h).
  std::vector<int> mlp_layers;
  Activation activation = Activation::kTanh;
  std::string model_text;
  Shape input_shape{0, 0, 0};
  ModelSpec model;
  // Default torch: U(+-1/sqrt(fan_in)) keeps tanh units out of saturation. `example parabola`
  // (the seed script) uses normal, N(0, 1).
  Init init = Init::kTorch;
  // --init-from: an .npz of the export's names and layouts (a PyTorch state_dict saved with
  // numpy.savez) whose arrays are the run's first parameters in place of `init`'s; "" (the
  // default): none. Not with resume_path (a checkpoint holds the parameters). Its checks and
  // what it ignores: master/files/init_from.h.
  std::string init_from_path;

  // Optimiser (nn/optimizer.h): lr > 0 (required), the base learning rate; optimizer: a
  // registered name (default sgd); hyper: the hyper-parameter flags given ("--momentum" ->
  // 0.9; a switch such as --nesterov -> 1), checked against the optimizer's declarations.
  double lr = 0;
  std::string optimizer = "sgd";
  std::map<std::string, double, std::less<>> hyper;
  // --weight-decay >= 0; NaN = the optimizer's default. --clip-norm: bound of the global norm
  // of the mean gradient, > 0; 0 = off.
  double weight_decay = std::numeric_limits<double>::quiet_NaN();
  double clip_norm = 0;
  // Learning-rate schedule (nn/schedule.h): a registered name (default constant). The values
  // schedules take, each applying to the schedules that declare it, with their defaults and
  // limits there (nn/schedules/): lr_step_every >= 1 (0 = not given); lr_gamma in (0, 1] and
  // lr_min in [0, lr) (NaN = not given); lr_milestones strictly increasing, each >= 1, at most
  // kMaxMilestones (empty = not given). warmup_steps >= 0, shorter than the run.
  std::string lr_schedule = "constant";
  int64_t lr_step_every = 0;
  double lr_gamma = std::numeric_limits<double>::quiet_NaN();
  double lr_min = std::numeric_limits<double>::quiet_NaN();
  std::vector<int64_t> lr_milestones;
  int64_t warmup_steps = 0;

  // Length: exactly one of steps (>= 1) and epochs (>= 1). With a batch, an epoch is
  // ceil(rows / batch) steps; full batch, an epoch is one step.
  int64_t steps = 0;
  int64_t epochs = 0;
  // Global minibatch size; 0 (default) = the full dataset every step. 1 <= batch <= rows.
  int64_t batch = 0;
  // Seed of initialisation and shuffling. Default 1.
  uint64_t seed = 1;
  // --augment: the workers' augmentation of each training row (data/augment.h), its canonical
  // text ("crop=4,hflip": RandomCrop with zero padding 4, then RandomHorizontalFlip, in the
  // order given); "" (default) = none. Image models only (an input of C x H x W, H, W >= 2),
  // each crop's padding 1..min(H, W) - 1. Validation, eval and predict never augment.
  std::string augment;

  // Logging: the loss every log_every steps (default 50; 0 = only the summary).
  int64_t log_every = 50;
  LogFormat log_format = LogFormat::kText;
  // Live progress line: auto = when stderr is a terminal.
  bool progress = true;

  // Async mode. rule: default dc-asgd-a. lambda: dc-asgd-c's constant (default 0.01) or
  // dc-asgd-a's lambda0 (default 2); NaN = the rule's default; >= 0. ms_decay in [0, 1)
  // (default 0.95); epsilon > 0 (default 1e-7). max_staleness: drop a gradient more than this
  // many versions old (default -1 = never).
  AsyncRule rule = AsyncRule::kDcAsgdA;
  // --precision: the inputs of the workers' products (eval, predict and validation compute in
  // float whatever the run trained in).
  ComputeType precision = ComputeType::kFloat;
  double lambda = std::numeric_limits<double>::quiet_NaN();
  double ms_decay = 0.95;
  double epsilon = 1e-7;
  int64_t max_staleness = -1;
  // Async across hosts (master/hosts/param_server.h): a host pushes its update of a part to the
  // part's owner once this many local updates are in since its last push of that part.
  int64_t push_every = 4;
  double LambdaOrDefault() const;

  // Held-out data: a fraction in [0, 1) of the rows (0 = none), taken after a shuffle seeded by
  // `seed`, or a file of its own (val_data_path; not both). Features are scaled with
  // statistics of the training rows only.
  double val_split = 0;
  std::string val_data_path;
  // Validation during training (needs held-out data): every eval_every steps/updates; 0
  // (default) = every epoch, or every log_every steps when a step is the whole dataset.
  int64_t eval_every = 0;
  // Stop when the validation loss has not improved for this many evaluations (0 = never);
  // the model saved is then the one with the best validation loss.
  int64_t early_stop = 0;
  Normalize normalize = Normalize::kNone;

  // Prometheus endpoint of the master: "HOST:PORT" (port 0 picks a free port, logged).
  // Default 127.0.0.1:9464. metrics = false (--no-metrics) serves nothing.
  std::string metrics_addr = "127.0.0.1:9464";
  bool metrics = true;

  // TensorBoard event files are written to this directory (empty: none); host 0 writes them.
  std::string tensorboard_dir;

  // Save the trained model here (empty: do not save).
  std::string save_path;

  // Deadline of every barrier wait in a worker, seconds. Default 120; 0.1..86400.
  double barrier_timeout_s = 120;

  // Fault tolerance. A worker with no heartbeat for heartbeat_timeout_s is killed and replaced
  // (default DefaultHeartbeatTimeout(barrier_timeout_s), set by the CLI when the flag is not
  // given; 0.05..86400 and shorter than barrier_timeout_s: the master must find a silent worker
  // before the healthy ranks give up waiting for it at the barrier). More than max_restarts
  // restarts (default 10; 0..1000000) within restart_window_s (default 60 s) end the run: a crash
  // loop.
  double heartbeat_timeout_s = 30;
  int max_restarts = 10;
  double restart_window_s = 60;
  // Chaos: SIGKILL a random worker about every chaos_every_s seconds (0 = off), drawn from
  // chaos_seed. Chaos kills do not count towards max_restarts.
  double chaos_every_s = 0;
  uint64_t chaos_seed = 1;

  // Checkpoints: write checkpoint_path every checkpoint_every steps/updates (0 = only when
  // stopped by SIGINT/SIGTERM) and on a signal; resume_path continues a run from one.
  std::string checkpoint_path;
  int64_t checkpoint_every = 0;
  std::string resume_path;
  // Async across hosts under `shmtrain launch`: where this host master keeps its state when its
  // run stops on a failure, for the launcher to merge (master/hosts/async_state.h). Set by the
  // start (checkpoint_path + ".host<index>.async"), never by flags; "" otherwise.
  std::string stop_state_path;

  // Several hosts (master/hosts/hosts.h): a run under mpirun is one of host_count host masters, the
  // one of MPI rank host_index; host_local is its rank among the host masters on this machine
  // (the metrics port rule, monitoring/exporter.h). Set by the master from MPI, never by flags.
  // host_timeout_s: how long a host master waits for another host's sum of a step before it
  // ends the job (--host-timeout, default 60; 0.1..86400).
  int host_index = 0;
  int host_count = 1;
  int host_local = 0;
  int host_local_count = 1;  // host masters on this machine (all share its cores)
  double host_timeout_s = 60;
  // A job that `shmtrain launch` started again after a lost host (shmtrain/relaunch.h): read
  // from SHMTRAIN_RELAUNCH once, at the start of `train`, never from flags; not active otherwise.
  Relaunch relaunch;

  // Test hooks (not shown in --help): worker `fault_rank` dies at `fault_point`
  // (worker/fault.h) of step/batch `fault_step` while its incarnation < fault_incarnations.
  int fault_rank = -1;
  int64_t fault_step = -1;
  int fault_point = 1;  // kExit
  int fault_incarnations = 1;
  int fault_host = 0;  // the host whose worker fault_rank dies (several hosts)
  // Test hook (not shown in --help): the master throws std::bad_alloc from its run loop once
  // the run has reached this step (-1 = off), to prove that any exception is cleaned up after.
  int64_t fault_master_throw = -1;

  // --task as given (checked against --loss by plan::Validate); the task itself is TaskOf(loss).
  std::optional<Task> task;
  bool loss_given = false;
  // The flags given on the command line ("--rule", ...), each with its value as typed ("" for
  // a switch): plan::Validate refuses a flag that does not apply to the run (e.g. --rule in sync
  // mode), which a value alone cannot tell apart from its default, and messages quote a value
  // as the user wrote it (1e-3, not 0.001000). Empty when the options do not come from a
  // command line.
  std::map<std::string, std::string, std::less<>> given;
  bool Given(std::string_view flag) const { return given.find(flag) != given.end(); }
  // `flag`'s value as typed when it was given, else `otherwise` (how its default prints).
  std::string As(std::string_view flag, const std::string& otherwise) const;
  // Why a run of these options most likely diverged, naming the flag and its value:
  // "the weight decay (--weight-decay 1e+30) is probably too large ...", else the learning
  // rate. For the master's divergence messages.
  std::string DivergenceHint() const;

  // min(30 s, barrier / 2): the heartbeat deadline the master uses when none is given.
  static double DefaultHeartbeatTimeout(double barrier_timeout_s) {
    return barrier_timeout_s / 2 < 30 ? barrier_timeout_s / 2 : 30;
  }

  // Steps the run takes once the dataset has `rows` rows.
  int64_t TotalSteps(int64_t rows) const;
  // Steps of one pass over `rows` rows: ceil(rows / batch), or 1 full batch.
  int64_t StepsPerEpoch(int64_t rows) const { return batch > 0 ? (rows + batch - 1) / batch : 1; }
};

}  // namespace shmtrain
