#include "master/run/start.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/crc32.h"
#include "master/files/init_from.h"
#include "master/files/model_file.h"
#include "master/log/report.h"
#include "master/run/checkpoint_policy.h"
#include "master/run/segment_reads.h"
#include "master/run/signals.h"
#include "nn/model.h"
#include "shm/futex.h"

namespace shmtrain::master {
namespace {

// Output paths first: a finished run must not be lost to a path that could never be written,
// nor to another run writing the same one (they stay locked until the run ends).
// Segments left by runs whose master died (SIGKILL, power loss) are ours to reclaim.
void ReclaimStale(Logger& log) {
  for (const shm::SegmentInfo& gone : shm::ReclaimStaleSegments()) {
    log.Info("removed stale segment /dev/shm/" + gone.name + ": " + gone.why,
             JsonLine("stale_segment_removed").Str("name", gone.name).Str("why", gone.why));
  }
}

// A fresh segment, before any worker starts: the training rows, and the state the run starts
// from (initial parameters: --init-from's, else --init's; or the resumed checkpoint's state and
// protocol words).
// Copies the training rows into the segment and frees the master's own copy of them: from
// here on the segment holds the only one (the run reads them there), so a large dataset is in
// memory once, not twice, for the whole run.
void FillSegment(const TrainOptions& o, const RunKind& kind, const nn::ResolvedModel& model,
                 data::Dataset* d, const Checkpoint& resume, const std::vector<float>& init_from,
                 shm::Segment* seg) {
  std::copy(d->x.begin(), d->x.end(), seg->mutable_x());
  std::copy(d->y.begin(), d->y.end(), seg->mutable_y());
  std::vector<float>().swap(d->x);
  std::vector<float>().swap(d->y);
  seg->mutable_header()->combined_step = resume.step - 1;
  if (!o.init_from_path.empty()) {
    std::copy(init_from.begin(), init_from.end(), seg->mutable_params(0));
  } else if (o.resume_path.empty()) {
    nn::InitParams(model, o.init, o.seed, seg->mutable_params(0));
  } else {
    kind.ResumeInto(resume, seg);
  }
  for (int r = 0; r < o.workers; ++r) {
    seg->mutable_slot(r)->step = -1;
    seg->mutable_block(r)->ticket = -1;
  }
}

// This host's share of the run's outputs: only host 0 writes the model, the periodic
// checkpoints and the TensorBoard file (every host holds the same parameters at every step), so
// the others do not check output paths they will not write, and pause for checkpoints only
// where the kind has every host pause (async across hosts: for the sync point,
// master/hosts/param_server.h). Where every host holds the whole state (sync), every other host
// writes the checkpoint of a stop too, to --checkpoint's path + ".host<index>" on its own
// machine: when host 0 is the one lost, the survivors' stop checkpoints keep the steps since
// its last periodic one.
TrainOptions ForThisHost(const TrainOptions& opts, const KindPlan& kind) {
  TrainOptions o = opts;
  if (kind.EveryHostPausesForCheckpoints() && !o.checkpoint_path.empty() &&
      std::getenv(kLaunchReportVar) != nullptr) {
    o.stop_state_path = o.checkpoint_path + ".host" + std::to_string(o.host_index) + ".async";
  }
  if (o.host_index != 0) {
    o.save_path.clear();
    o.tensorboard_dir.clear();
    if (kind.EveryHostPausesForCheckpoints()) {
      o.checkpoint_path.clear();
    } else {
      if (!o.checkpoint_path.empty()) o.checkpoint_path += ".host" + std::to_string(o.host_index);
      o.checkpoint_every = 0;  // a stop's only
    }
  }
  return o;
}

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
Status Reserve(const TrainOptions& o, const plan::Resolved& run, OutputReservation (&out)[2]) {
  if (!o.save_path.empty()) {
    if (Status s = OutputReservation::Make("--save", o.save_path, run.model_bytes, &out[0]);
        !s.ok()) {
      return s;
    }
  }
  return OutputReservation::Make("--checkpoint", o.checkpoint_path, run.checkpoint_bytes, &out[1]);
}

// --resume's file as host 0 read it: how the read went (on the other hosts, as host 0 said),
// its bytes, and its name in messages (host 0's path; on the others, which host sent it).
struct ResumeFile {
  Status got;
  std::string name;
  std::string bytes;
};

// --resume needs no disk shared by the hosts: host 0 alone reads the file and sends its path
// and bytes to the others (Hosts::ShareFromFirst), which decode them as if they had read the
// file. Done first in the start, where every host is sure to come (a host whose start fails
// later has taken its share), and judged where the start reads the checkpoint (ReadResume),
// so that a start fails for the same first reason as on one host. Returns a failed exchange
// only (a host lost, a stop), which ends the job.
Status FetchResume(const TrainOptions& o, Hosts& hosts, ResumeFile* f) {
  if (o.resume_path.empty()) return Status::Ok();
  f->name = o.resume_path;
  if (hosts.index() == 0) f->got = ReadFileBytes(o.resume_path, "checkpoint", &f->bytes);
  if (hosts.count() == 1) return Status::Ok();
  auto stop = [] { return g_stop_signal.load() != 0; };
  if (Status s =
          hosts.ShareFromFirst("--resume's path", &f->name, Status::Ok(), o.host_timeout_s, stop);
      !s.ok()) {
    return s;
  }
  const Status got =
      hosts.ShareFromFirst("--resume " + f->name, &f->bytes, f->got, o.host_timeout_s, stop);
  if (got.code() == Status::Code::kHostLost || got.code() == Status::Code::kInterrupted) {
    return got;
  }
  if (hosts.index() != 0) f->name += " (sent by " + hosts.Describe(0) + ")";
  f->got = got;
  return Status::Ok();
}

// --resume: the checkpoint must come from this very run (its fingerprint: the same options and
// data) and hold running variances the model can take; its step as this host counts it. The
// file's bytes are freed once decoded, before the segment takes its room.
Status ReadResume(const TrainOptions& o, const RunKind& kind, const Start& st, ResumeFile* file,
                  Checkpoint* resume) {
  if (!file->got.ok()) return file->got;
  const plan::Resolved& run = st.run;
  const Status decoded =
      DecodeResume(file->bytes, file->name, kind.mode(), run.fingerprint, run.optimizer, run.header,
                   run.total_steps, OtherRunExplainer(o, run.optim, st.rd.train), resume);
  std::string().swap(file->bytes);
  if (!decoded.ok()) return decoded;
  // A checkpoint holds no model: its running variances are checked against the run's.
  if (Status s = CheckRunningVariances(run.model.spec, resume->params); !s.ok()) {
    return Status::Data(file->name + ": not a usable checkpoint: " + s.message());
  }
  resume->step = kind.HostStep(resume->step, o.host_count);
  return Status::Ok();
}

// The segment, made from the resolved header once stale ones are reclaimed, and filled.
Status MakeSegment(const RunKind& kind, Logger& log, const std::vector<float>& init_from,
                   Start* st) {
  ReclaimStale(log);
  shm::Header proto = st->run.header;
  proto.config.first_step = st->resume.step;
  if (Status s = shm::Segment::Create(shm::MakeSegmentName(), proto, &st->seg); !s.ok()) return s;
  st->seg_name = RemovedOnDeath("/dev/shm/" + st->seg.name());
  FillSegment(st->o, kind, st->run.model, &st->rd.train, st->resume, init_from, &st->seg);
  return Status::Ok();
}

Status StartHere(const RunKind& kind, Logger& log, std::unique_ptr<monitoring::Exporter>* exporter,
                 ResumeFile* resume, Start* st) {
  TrainOptions& o = st->o;
  if (Status s = CheckOutputPaths(o, st->output_locks); !s.ok()) return s;
  // The endpoint next: a taken port fails the run before anything exists to clean up.
  if (o.metrics) {
    if (Status s = StartHostMetrics(o.metrics_addr, o.host_local, exporter); !s.ok()) return s;
    InstallSignalHandlers();  // the server's library has just set SIGPIPE to SIG_IGN
  }
  if (Status s = plan::Resolve(o, kind, log, &st->rd, &st->run); !s.ok()) return s;
  // --init-from's every array checked against the model on the data's input, before the outputs'
  // room is taken. Across hosts every host reads its own path, as it reads --data: the same
  // file must be on every host (docs/hosts.md).
  std::vector<float> init_from;
  if (!o.init_from_path.empty()) {
    if (Status s = ReadInitFrom(o.init_from_path, st->run.model.spec, &init_from); !s.ok()) {
      return s;
    }
  }
  if (Status s = Reserve(o, st->run, st->reserved); !s.ok()) return s;
  if (!o.resume_path.empty()) {
    if (Status s = ReadResume(o, kind, *st, resume, &st->resume); !s.ok()) return s;
  }
  return MakeSegment(kind, log, init_from, st);
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
  const int64_t words[] = {static_cast<int64_t>(st.run.fingerprint),
                           st.run.total_steps,
                           c.first_step,
                           o.eval_every,
                           o.early_stop,
                           static_cast<int64_t>(state),
                           o.push_every};
  const uint64_t identity =
      (static_cast<uint64_t>(Crc32(words, sizeof words)) << 32) ^ st.run.fingerprint;
  return hosts.Agree(here, identity, o.host_timeout_s, stop);
}

void LogSegment(const TrainOptions& o, const data::RunData& rd, const shm::Segment& seg,
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
  if (exporter) {
    const std::string url = "http://" + exporter->address() + "/metrics";
    const std::string page = "http://" + exporter->address() + "/";
    log.Info(
        "metrics: " + url + "  live page: " + page,
        JsonLine("metrics").Str("address", exporter->address()).Str("url", url).Str("page", page));
  }
}

// A relaunched job (shmtrain/relaunch.h), said once by host 0: its line, and its scalar at
// the step it continues from, first in the event file (written at RunWatch's first flush).
void ShowRelaunch(const Relaunch& r, int host_index, monitoring::EventFile* events, Logger& log) {
  if (!r.active() || host_index != 0) return;
  log.Info(r.Line(), JsonLine("relaunched")
                         .Int("relaunches", r.relaunches)
                         .Str("reason", ToString(r.reason))
                         .Strs("lost", r.lost)
                         .Int("step", r.step));
  if (events != nullptr) {
    events->Scalar("hosts/relaunches", r.step, static_cast<double>(r.relaunches));
  }
}

// The run made visible, once every host has started: made after the agreement, so that a run
// that cannot start leaves no event file.
Status Show(const RunKind& kind, monitoring::Exporter* exporter, Logger& log, Start* st) {
  const TrainOptions& o = st->o;
  if (!o.tensorboard_dir.empty()) {
    if (Status s = monitoring::EventFile::Create(o.tensorboard_dir, &st->events); !s.ok()) {
      return s;
    }
  }
  ShowRelaunch(o.relaunch, o.host_index, st->events.get(), log);
  st->stats = std::make_shared<monitoring::RunStats>(o.workers);
  st->t_start_ns = shm::MonotonicNs();
  st->kind_view = std::make_unique<KindView>(kind, o);
  if (exporter != nullptr) {
    exporter->Attach(&st->seg, st->kind_view.get(), st->stats.get(), o,
                     {st->run.steps_per_epoch, st->resume.step, st->t_start_ns});
    st->attached = exporter;
  }
  LogSegment(o, st->rd, st->seg, exporter, log);
  return Status::Ok();
}

}  // namespace

Status CheckOutputPaths(const TrainOptions& o, OutputLock (&locks)[2]) {
  if (Status s = CheckOutputPath("--save", o.save_path,
                                 {{"--data", o.data_path},
                                  {"--labels", o.file.arrays.labels_path},
                                  {"--val-data", o.val_data_path},
                                  {"--val-labels", o.val_arrays.labels_path},
                                  {"--resume", o.resume_path},
                                  {"--init-from", o.init_from_path},
                                  {"--checkpoint", o.checkpoint_path}});
      !s.ok()) {
    return s;
  }
  if (Status s = CheckOutputPath("--checkpoint", o.checkpoint_path,
                                 {{"--data", o.data_path},
                                  {"--labels", o.file.arrays.labels_path},
                                  {"--val-data", o.val_data_path},
                                  {"--val-labels", o.val_arrays.labels_path},
                                  {"--init-from", o.init_from_path}},
                                 OutputKinds::kRegularFile);
      !s.ok()) {
    return s;
  }
  if (Status s = OutputLock::Acquire("--save", o.save_path, &locks[0]); !s.ok()) return s;
  return OutputLock::Acquire("--checkpoint", o.checkpoint_path, &locks[1]);
}

Status StartRun(const TrainOptions& opts, const RunKind& kind, Hosts& hosts, Logger& log,
                std::unique_ptr<monitoring::Exporter>* exporter, Start* st) {
  st->o = ForThisHost(opts, kind);  // the start sets a --model's input from the data
  ResumeFile resume;
  if (Status s = FetchResume(st->o, hosts, &resume); !s.ok()) return s;
  const Status here = StartHere(kind, log, exporter, &resume, st);
  if (Status s = AgreeWithHosts(here, st->o, kind, hosts, *st, exporter->get(), log); !s.ok()) {
    return s;
  }
  return Show(kind, exporter->get(), log, st);
}

}  // namespace shmtrain::master
