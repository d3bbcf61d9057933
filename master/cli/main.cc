// shmtrain: the master process and the command line.
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "data/pipeline.h"
#include "master/cli/cli.h"
#include "master/log/log.h"
#include "master/files/export.h"
#include "master/files/predict.h"
#include "master/kinds/kind.h"
#include "master/launch/launch.h"
#include "master/run/launcher.h"
#include "master/run/run.h"
#include "master/run/signals.h"
#include "master/run/simulate.h"
#include "nn/cpu.h"
#include "shm/segment.h"
#include "shmtrain/relaunch.h"

namespace {

using shmtrain::Status;

// The one catch site of the command: an exception that escapes a command's body (the
// standard library's std::bad_alloc, or a third-party library's error that no boundary
// converted; docs/errors.md) becomes kInternal here. The stack unwinds on the way (workers
// killed and reaped, segment removed), so the command ends like any other failure.
template <class Body>
Status Guarded(Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    // Under a limit of the process's own (ulimit -v) the limit is the cause, not a bug: the
    // resource error names it. Without one, an allocation the machine refuses stays internal.
    std::string limit;
    if (shmtrain::data::RoomUnderMemoryLimits(&limit) != UINT64_MAX) {
      return Status::Resource("out of memory: an allocation failed with " + limit);
    }
    return Status::Internal("internal error: out of memory (std::bad_alloc)");
  } catch (...) {
    return Status::Internal("internal error: " +
                            shmtrain::master::DescribeException(std::current_exception()));
  }
}

// The one map from a command's outcome to the process's exit code (include/shmtrain/status.h):
// the Status's own, except that a stop signal n exits 128 + n.
int ExitCodeOf(const Status& s) {
  const int sig = shmtrain::master::g_stop_signal.load();
  if (s.code() == Status::Code::kInterrupted && sig > 0) return 128 + sig;
  return s.exit_code();
}

// A command's end: its message when it failed, then its exit code.
int Outcome(const Status& s, shmtrain::master::Logger& log) {
  if (!s.ok()) log.Error(s.message());
  return ExitCodeOf(s);
}

// Under `shmtrain launch` (master/log/report.h): this host master's reports go to the launcher
// from here on, beginning with its place in the job.
Status ReportToLauncher(const shmtrain::master::Hosts& h, double timeout_s,
                        shmtrain::master::Logger& log) {
  using namespace shmtrain::master;
  const char* address = std::getenv(kLaunchReportVar);
  if (address == nullptr || *address == '\0') return Status::Ok();
  std::unique_ptr<LaunchChannel> channel;
  if (Status s = LaunchChannel::Connect(address, timeout_s, &channel); !s.ok()) return s;
  char node[256] = {};
  (void)gethostname(node, sizeof node - 1);  // the node stays "" if it cannot be had
  channel->ListenForStop();
  log.ReportTo(std::move(channel));
  log.Report(JsonLine("hello")
                 .Int("host", h.index())
                 .Int("hosts", h.count())
                 .Int("pid", getpid())
                 .Str("node", node)
                 .Str("name", h.Describe(h.index())));
  return Status::Ok();
}

// Several hosts (master/hosts/hosts.h): this process's place among the host masters, into the
// options; refuses what several hosts cannot do.
Status JoinTheHosts(int* argc, char*** argv, shmtrain::TrainOptions* o,
                    std::unique_ptr<shmtrain::master::Hosts>* hosts,
                    shmtrain::master::Logger& log) {
  if (Status s = shmtrain::master::JoinHosts(argc, argv, hosts); !s.ok()) return s;
  const auto& h = **hosts;
  o->host_index = h.index();
  o->host_count = h.count();
  o->host_local = h.local();
  o->host_local_count = h.local_count();
  if (h.index() != 0) log.SetSecondary(h.Describe(h.index()));
  if (Status s = ReportToLauncher(h, o->host_timeout_s, log); !s.ok()) return s;
  return shmtrain::master::CheckKindOnHosts(*o);
}

// `shmtrain train`: this host's part of the run (the whole run on one host), then the exit.
[[noreturn]] void TrainAndExit(shmtrain::TrainOptions& o, int* argc, char*** argv) {
  using namespace shmtrain;
  // Stop signals only raise a flag: the run loop stops the workers, removes the segment and
  // exits 128 + n. Installed before the data is loaded, so no signal finds a segment unowned.
  master::InstallSignalHandlers();

  master::Logger log(o.log_format, o.progress);
  // The run loop must not wait on a reader of its output (master/log/output_thread.h).
  log.WriteInBackground();
  std::unique_ptr<master::Hosts> joined;
  if (Status s = Guarded([&] { return JoinTheHosts(argc, argv, &o, &joined, log); }); !s.ok()) {
    const int code = Outcome(s, log);
    log.Drain(master::StopRequested);
    std::fflush(nullptr);
    log.Report(master::JsonLine("exit").Int("code", code));
    if (joined) joined->AbortJob(code);
    std::_Exit(code);
  }
  // Shared with the run's cross-host thread, which a failed end may leave behind.
  const std::shared_ptr<master::Hosts> hosts = std::move(joined);
  master::ProcessLauncher launcher(master::DefaultWorkerPath());
  std::unique_ptr<monitoring::Exporter> exporter;
  const Status ran = Guarded([&] { return master::RunTrain(o, log, launcher, hosts, &exporter); });
  // The run's lines written out (or, once stopped, given up on) before stdout's status counts.
  log.Drain(master::StopRequested);
  const Status s = master::WithStdoutStatus(ran, o, log);
  const int code = Outcome(s, log);
  // The workers are reaped and the segment removed by now. Ending here rather than returning
  // skips the metrics server's shutdown, which would wait out civetweb's 2 s poll quantum;
  // the kernel closes its socket. Several hosts: a failure here ends the job on every host
  // with this code (a stop signal came to every host master already, from mpirun), unless
  // every host learned at the start that the run cannot start: then each leaves on its own.
  // The log is written out first; a stopped run leaves what its reader does not take.
  log.Drain(master::StopRequested);
  std::fflush(nullptr);
  log.Report(master::JsonLine("exit").Int("code", code));
  if (code == kExitOk || hosts->failed_together()) {
    hosts->Finish();
  } else if (hosts->count() > 1 && s.code() != Status::Code::kInterrupted) {
    hosts->AbortJob(code);
  }
  std::_Exit(code);
}

// `shmtrain cleanup`: this user's stale segments removed (or listed, with --dry-run).
Status Cleanup(bool dry_run) {
  using namespace shmtrain;
  int live = 0, stale = 0;
  std::string text;
  for (const shm::SegmentInfo& s : shm::ListSegments()) {
    const std::string where = "  /dev/shm/" + s.name + "  " + std::to_string(s.bytes) + " bytes  (";
    if (s.live) {
      ++live;
      text += "live " + where + "run of pid " + std::to_string(s.creator_pid) + ": left alone)\n";
      continue;
    }
    ++stale;
    const bool removed = !dry_run && shm::RemoveSegment(s.name);
    text += std::string(dry_run ? "stale  " : (removed ? "removed" : "failed ")) + where + s.why +
            ")\n";
  }
  text += std::to_string(live) + " live, " + std::to_string(stale) + " stale" +
          (dry_run ? " (dry run: nothing removed)" : "") + "\n";
  return master::WriteStdout(text);
}

// Every command but train, help and version: its outcome.
Status RunCommand(const shmtrain::master::Command& cmd, shmtrain::master::Logger& log) {
  using Kind = shmtrain::master::Command::Kind;
  switch (cmd.kind) {
    case Kind::kCleanup:
      return Cleanup(cmd.dry_run);
    case Kind::kEval:
      std::signal(SIGPIPE, SIG_IGN);
      return shmtrain::master::RunEval(cmd, log);
    case Kind::kPredict:
      std::signal(SIGPIPE, SIG_IGN);
      return shmtrain::master::RunPredict(cmd, log);
    case Kind::kExport:
      return shmtrain::master::RunExport(cmd, log);
    case Kind::kSimulate:
      std::signal(SIGPIPE, SIG_IGN);
      return shmtrain::master::RunSimulate(cmd.train, cmd.sim_workers, cmd.compare, log);
    case Kind::kHelp:
    case Kind::kVersion:
    case Kind::kTrain:
    case Kind::kLaunch:
      break;
  }
  SHMTRAIN_DIE("command kind " + std::to_string(static_cast<int>(cmd.kind)) +
               " reached RunCommand");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shmtrain;
  std::vector<std::string> args(argv, argv + argc);
  master::Command cmd;
  if (Status s = master::ParseCommandLine(args, &cmd); !s.ok()) {
    // Ends as every error of the run it asked for, through Outcome(): its bytes escaped, and in
    // json mode one JSON error event on stdout and its text on stderr, nothing else. The
    // pointer to the help is for a reader of text only.
    master::Logger log(master::AskedLogFormat(args), false);
    const int code = Outcome(s, log);
    if (!log.json()) std::fputs("(see shmtrain --help)\n", stderr);
    return code;
  }
  // The kernels' path is the environment's (nn/cpu.h): a value no kernel takes ends every
  // command that would compute, before it starts.
  if (cmd.kind != master::Command::Kind::kHelp && cmd.kind != master::Command::Kind::kVersion) {
    if (Status s = nn::CheckCpuEnvironment(); !s.ok()) {
      master::Logger log(cmd.train.log_format, false);
      return Outcome(s, log);
    }
  }
  switch (cmd.kind) {
    case master::Command::Kind::kHelp:
    case master::Command::Kind::kVersion: {
      const std::string text = cmd.kind == master::Command::Kind::kHelp
                                   ? cmd.help_text
                                   : std::string("shmtrain " SHMTRAIN_VERSION "\n");
      master::Logger log(LogFormat::kText, false);
      return Outcome(master::WriteStdout(text), log);
    }
    case master::Command::Kind::kTrain: {
      // A relaunched job's SHMTRAIN_RELAUNCH (shmtrain/relaunch.h), read once: a value that is
      // not what the launcher writes ends the run before anything starts.
      if (Status s = RelaunchFromEnvironment(&cmd.train.relaunch); !s.ok()) {
        master::Logger log(cmd.train.log_format, false);
        return Outcome(s, log);
      }
      TrainAndExit(cmd.train, &argc, &argv);
    }
    case master::Command::Kind::kLaunch: {
      master::Logger log(cmd.train.log_format, false);
      return master::launch::RunLaunch(cmd, log);
    }
    default:
      break;
  }
  // No workers to stop: a stop signal removes what the command was writing (its temporary
  // file, its lock) and ends it at once.
  master::InstallSignalHandlers(master::StopAction::kRemoveAndDie);
  master::Logger log(cmd.train.log_format, false);
  return Outcome(Guarded([&] { return RunCommand(cmd, log); }), log);
}
