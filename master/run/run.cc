#include "master/run/run.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "master/files/checkpoint.h"
#include "master/files/model_file.h"
#include "master/files/output_path.h"
#include "master/files/output_write.h"
#include "master/files/predict.h"
#include "master/kinds/kind.h"
#include "master/plan/resolve.h"
#include "master/run/checkpoint_policy.h"
#include "master/run/divergence.h"
#include "master/run/kind_view.h"
#include "master/run/run_end.h"
#include "master/run/run_lines.h"
#include "master/run/run_watch.h"
#include "master/run/run_loop.h"
#include "master/run/segment_header.h"
#include "master/run/segment_reads.h"
#include "master/run/signals.h"
#include "master/run/supervisor.h"
#include "master/run/validation.h"
#include "monitoring/exporter.h"
#include "monitoring/tfevents.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "shm/futex.h"
#include "shm/segment.h"

namespace shmtrain::master {

int64_t WorkerBatchRows(const KindPlan& kind, const TrainOptions& o, int64_t rows) {
  const int64_t batch = o.batch > 0 ? std::min(o.batch, rows) : rows;
  const int64_t world = int64_t{o.workers} * o.host_count;
  return kind.WorkerBatchRows(batch, static_cast<int>(world));
}

data::RunSizing SizingOf(const RunKind& kind) {
  return {[&kind](const TrainOptions& o, int64_t rows) { return WorkerBatchRows(kind, o, rows); },
          [&kind](const TrainOptions& o, int64_t rows, int features, uint64_t* bytes) {
            return SegmentBytes(kind, o, rows, features, bytes);
          }};
}

namespace {

// Output paths first: a finished run must not be lost to a path that could never be written,
// nor to another run writing the same one (they stay locked until the run ends).
Status CheckOutputPaths(const TrainOptions& o, OutputLock (&locks)[2]) {
  if (Status s = CheckOutputPath("--save", o.save_path,
                                 {{"--data", o.data_path},
                                  {"--labels", o.file.arrays.labels_path},
                                  {"--val-data", o.val_data_path},
                                  {"--val-labels", o.val_arrays.labels_path},
                                  {"--resume", o.resume_path},
                                  {"--checkpoint", o.checkpoint_path}});
      !s.ok()) {
    return s;
  }
  if (Status s = CheckOutputPath("--checkpoint", o.checkpoint_path,
                                 {{"--data", o.data_path},
                                  {"--labels", o.file.arrays.labels_path},
                                  {"--val-data", o.val_data_path},
                                  {"--val-labels", o.val_arrays.labels_path}},
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
void FillSegment(const TrainOptions& o, const RunKind& kind, data::Dataset* d,
                 const Checkpoint& resume, shm::Segment* seg) {
  std::copy(d->x.begin(), d->x.end(), seg->mutable_x());
  std::copy(d->y.begin(), d->y.end(), seg->mutable_y());
  std::vector<float>().swap(d->x);
  std::vector<float>().swap(d->y);
  seg->mutable_header()->combined_step = resume.step - 1;
  if (o.resume_path.empty()) {
    nn::InitParams(o.model, o.init, o.seed, seg->mutable_params(0));
  } else {
    kind.ResumeInto(resume, seg);
  }
  for (int r = 0; r < o.workers; ++r) {
    seg->mutable_slot(r)->step = -1;
    seg->mutable_block(r)->ticket = -1;
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
  // --precision auto resolved when the flags were read (master/flags/flags.cc): said once.
  if (o.As("--precision", "") == "auto") {
    const std::string chosen(ToString(o.precision));
    log.Info("precision auto: " + chosen +
                 (o.precision == ComputeType::kBf16
                      ? " (this CPU has avx512_bf16)"
                      : " (the CPU path in use has no avx512_bf16)"),
             JsonLine("precision").Str("precision", chosen).Bool("auto", true));
  }
  if (exporter) {
    const std::string url = "http://" + exporter->address() + "/metrics";
    const std::string page = "http://" + exporter->address() + "/";
    log.Info(
        "metrics: " + url + "  live page: " + page,
        JsonLine("metrics").Str("address", exporter->address()).Str("url", url).Str("page", page));
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
// host holds the same parameters at every step), so the others do not check output paths they
// will not write, and pause for checkpoints only where the kind has every host pause (async
// across hosts: for the sync point, master/hosts/param_server.h).
TrainOptions ForThisHost(const TrainOptions& opts, const KindPlan& kind) {
  TrainOptions o = opts;
  if (o.host_index != 0) {
    o.save_path.clear();
    o.checkpoint_path.clear();
    if (!kind.EveryHostPausesForCheckpoints()) o.checkpoint_every = 0;
  }
  return o;
}

// The options as this host's workers count them (HostPlan: --checkpoint-every in this host's
// steps or updates).
TrainOptions HostUnits(const TrainOptions& o, const HostPlan& plan) {
  TrainOptions h = o;
  h.checkpoint_every = plan.checkpoint_every;
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
  plan::Resolved resolved;  // the model and the data, resolved once (master/plan/resolve.h)
  int64_t total_steps = 0;  // the run's
  HostPlan plan;            // this host's share of it (RunKind::Plan)
  OptimConfig optim;
  uint64_t fingerprint = 0;
  std::string optimizer;
  Checkpoint resume;
  shm::Segment seg;
  // The segment's name, registered for main's last-resort handlers once seg exists (declared
  // after it: forgotten before the segment is removed, on every path out). Both go to the run
  // loop, which drops the name first at the run's end.
  RemovedOnDeath seg_name;
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

// The room the outputs will take, reserved before the training (master/files/output_write.h): a
// full disk is found now, not after the run, when the model would be lost.
// The model file is read back through the decoder first (this model, its parameters zeros): a
// model the format cannot hold (an input of more than 2^24 values) is refused now, not saved
// after the training as a file that eval, predict and export refuse.
Status Reserve(const TrainOptions& o, const KindPlan& kind, const RunData& rd,
               const OptimConfig& optim, const std::string& optimizer,
               OutputReservation (&out)[2]) {
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
                     kind.CheckpointStates(optim), optimizer),
      &out[1]);
}

Status StartHere(TrainOptions& o, const RunKind& kind, Logger& log,
                 std::unique_ptr<monitoring::Exporter>* exporter, Start* st) {
  if (Status s = CheckOutputPaths(o, st->output_locks); !s.ok()) return s;
  // The endpoint next: a taken port fails the run before anything exists to clean up.
  if (o.metrics) {
    if (Status s = StartHostMetrics(o.metrics_addr, o.host_local, exporter); !s.ok()) return s;
    InstallSignalHandlers();  // the server's library has just set SIGPIPE to SIG_IGN
  }
  if (Status s = plan::Resolve(o, SizingOf(kind), &st->rd, &st->resolved); !s.ok()) {
    return s;
  }
  WarnSkippedFiles(st->rd.train, o.data_path, log);
  WarnSkippedFiles(st->rd.val, o.val_data_path, log);
  ReclaimStale(log);
  const data::Dataset& d = st->rd.train;
  st->total_steps = o.TotalSteps(d.rows);
  if (Status s = kind.Plan(o, st->total_steps, EvalEvery(o, d.rows), log, &st->plan); !s.ok()) {
    return s;
  }
  if (Status s = nn::ResolveOptim(o, st->total_steps, &st->optim); !s.ok()) return s;
  // The workers count this host's steps or updates (checkpoints too).
  shm::Header proto = MakeHeader(kind, HostUnits(o, st->plan), st->optim, d.rows, d.features,
                                 st->plan.steps, st->plan.eval_every);
  if (Status s = CheckConfig(o, proto); !s.ok()) return s;
  // Resuming: the checkpoint must come from this very run (same options and data).
  st->fingerprint = RunFingerprint(o, st->optim, d);
  st->optimizer = nn::Describe(st->optim);
  if (Status s = Reserve(o, kind, st->rd, st->optim, st->optimizer, st->reserved); !s.ok()) {
    return s;
  }
  if (!o.resume_path.empty()) {
    if (Status s = LoadResume(o.resume_path, kind.mode(), st->fingerprint, st->optimizer, proto,
                              st->total_steps, OtherRunExplainer(o, st->optim, d), &st->resume);
        !s.ok()) {
      return s;
    }
    // A checkpoint holds no model: its running variances are checked against the run's.
    if (Status s = CheckRunningVariances(o.model, st->resume.params); !s.ok()) {
      return Status::Data(o.resume_path + ": not a usable checkpoint: " + s.message());
    }
    st->resume.step = kind.HostStep(st->resume.step, o.host_count);
  }
  proto.config.first_step = st->resume.step;  // the config whole: Create seals it
  if (Status s = shm::Segment::Create(shm::MakeSegmentName(), proto, &st->seg); !s.ok()) return s;
  st->seg_name = RemovedOnDeath("/dev/shm/" + st->seg.name());
  FillSegment(o, kind, &st->rd.train, st->resume, &st->seg);
  return Status::Ok();
}

// Several hosts: every host brings its start to one exchange, failed or not, so that a host
// whose start failed (a missing file, a taken port) ends every host's start the same way: each
// removes its segment and leaves the job (docs/hosts.md). The started hosts must start
// the same run (options, data, validation and length) from the same state, or their sums would
// mix different models: kUsage naming a host that differs, kHostLost when one does not answer.
// In json mode every started host names its segment and pid (the "host" event), so that an
// operator (or a test) can find its workers.
Status AgreeWithHosts(const Status& here, const TrainOptions& o, const RunKind& kind, Hosts& hosts,
                      const Start& st, const monitoring::Exporter* exporter, Logger& log) {
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
  uint32_t state = StartStateCrc(seg, kind);
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

// The checkpoint policy's configuration: where, how often, and what a checkpoint must match.
CheckpointConfig CheckpointConfigFor(const TrainOptions& o, Start& st, const RunKind& kind,
                                     CheckpointCut* cut) {
  return {.path = o.checkpoint_path,
          .every = st.plan.checkpoint_every,
          .kind = &kind,
          .first_step = st.resume.step,
          .total_steps = st.plan.steps,
          .fingerprint = st.fingerprint,
          .optimizer = st.optimizer,
          .cut = cut,
          .hosts = o.host_count,
          .reservation = &st.reserved[1]};
}

}  // namespace

Status WithStdoutStatus(const Status& ran, const TrainOptions& o, const Logger& log) {
  if (!ran.ok() || log.stdout_status().ok()) return ran;
  return Status::Resource(
      log.stdout_status().message() + "; the run finished" +
      (o.save_path.empty() ? "" : " and its model was saved to " + o.save_path));
}

Status RunTrain(const TrainOptions& opts, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts_share,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  return RunTrain(opts, KindOf(opts.mode, opts.host_count), log, launcher, hosts_share,
                  exporter_out);
}

Status RunTrain(const TrainOptions& opts, const RunKind& kind, Logger& log, Launcher& launcher,
                const std::shared_ptr<Hosts>& hosts_share,
                std::unique_ptr<monitoring::Exporter>* exporter_out) {
  TrainOptions o = ForThisHost(opts, kind);  // StartHere sets a --model's input from the data
  std::unique_ptr<monitoring::Exporter>& exporter = *exporter_out;
  Start st;
  const Status started = StartHere(o, kind, log, &exporter, &st);
  const Status agreed = AgreeWithHosts(started, o, kind, *hosts_share, st, exporter.get(), log);
  if (!agreed.ok()) return agreed;
  const int64_t first = st.resume.step, total = st.plan.steps;
  // Shared with the cross-host thread, whose share may outlive the run (exchange_thread.h).
  const auto run_stats = std::make_shared<monitoring::RunStats>(o.workers);
  monitoring::RunStats& stats = *run_stats;
  // Made once the run's start has succeeded, so a run that cannot start leaves no event file.
  std::unique_ptr<monitoring::EventFile> events;
  if (Status s = OpenEventFile(o, &events); !s.ok()) return s;
  // The loop owns the segment from here to the run's end; the units, declared after it, read
  // it through seg and write through the loop's writes().
  RunLoop loop(std::move(st.seg), std::move(st.seg_name), kind);
  const shm::Segment& seg = loop.segment();
  SegmentWrites& writes = loop.writes();
  const int64_t t_start = shm::MonotonicNs();  // the clock of the summary and the events
  // Steps an epoch as the plan counts them (an early end by --steps included).
  const int64_t steps_per_epoch =
      o.StepsPerEpoch(st.rd.train.rows) * total / std::max<int64_t>(st.total_steps, 1);
  const KindView kind_view(kind, o);  // what the exporter asks of the kind
  if (exporter) exporter->Attach(&seg, &kind_view, &stats, o, {steps_per_epoch, first, t_start});
  const DetachOnExit detach(exporter.get());
  LogSegment(o, st.rd, seg, exporter.get(), log);

  // What a run does, each round and at its end, in this order (master/run/run_loop.h).
  StopSignal stop(total, o.host_count > 1);
  MasterFault fault(o.fault_master_throw);
  LossLog losses(log, seg.header()->config.log_every, first, &stats.history());
  const bool xent = o.model.loss == Loss::kXent;
  ProgressLine live(log, first, total, steps_per_epoch, t_start, stats.history(), xent);
  ValidationProtocol validation(kind,
                                {.eval_every = st.plan.eval_every,
                                 .early_stop = o.early_stop,
                                 .first_step = first,
                                 .total_steps = total,
                                 .steps_per_epoch = steps_per_epoch,
                                 .t_start_ns = t_start},
                                o.model, st.rd.val, seg, writes, log, stats.validation());
  // Several hosts: the unit that combines them (the combiner, the parameter server).
  const CrossHostUnit cross = kind.StartCrossHost(o, writes, hosts_share, run_stats);
  const DivergenceCause divergence(o, st.resume);
  Supervisor sup(kind, seg, writes, launcher, log, stats.workers(),
                 SupervisorOptionsFor(o, divergence));
  CheckpointPolicy checkpoints(CheckpointConfigFor(o, st, kind, cross.cut), seg, writes, log,
                               stats.checkpoints());
  FinalModel model(o, st.rd, divergence, &st.reserved[0]);
  SummaryLine summary(o, kind, first, st.rd.train.rows, t_start, log);
  RunWatch watch(kind, stats, std::move(events), t_start, xent, log);
  const Status ran = loop.Run([&sup](int ms) { sup.Wait(ms); },
                              {&stop, &fault, &losses, &live, cross.unit.get(), &validation, &sup,
                               &checkpoints, &model, &summary, &watch});
  return ran;
}

}  // namespace shmtrain::master
