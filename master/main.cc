// shmtrain: the master process and the command line.
#include <unistd.h>

#include <csignal>
#include <exception>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "master/cli.h"
#include "master/export.h"
#include "master/launcher.h"
#include "master/log.h"
#include "master/predict.h"
#include "master/run.h"
#include "master/signals.h"
#include "master/simulate.h"
#include "shm/segment.h"

namespace {

// An exception on main's thread ends the command like any other failure: the stack unwinds
// (workers killed and reaped, segment removed) and the message is printed.
shmtrain::Status FromException(std::exception_ptr e) {
  return shmtrain::Status::Internal("internal error: " + shmtrain::master::DescribeException(e));
}

// Several hosts (master/hosts.h): this process's place among the host masters, into the
// options; refuses what several hosts cannot do.
shmtrain::Status JoinTheHosts(int* argc, char*** argv, shmtrain::TrainOptions* o,
                              std::unique_ptr<shmtrain::master::Hosts>* hosts,
                              shmtrain::master::Logger& log) {
  using shmtrain::Status;
  if (Status s = shmtrain::master::JoinHosts(argc, argv, hosts); !s.ok()) return s;
  const auto& h = **hosts;
  o->host_index = h.index();
  o->host_count = h.count();
  o->host_local = h.local();
  o->host_local_count = h.local_count();
  if (h.index() != 0) log.SetSecondary(h.Describe(h.index()));
  if (h.count() > 1 && o->mode == shmtrain::Mode::kAsync) {
    return Status::Usage("--mode async runs on one host only: under mpirun with " +
                         std::to_string(h.count()) +
                         " host masters, use --mode sync (README \"Several hosts\" tells why "
                         "and how async across hosts would work)");
  }
  return Status::Ok();
}

// `shmtrain train`: this host's part of the run (the whole run on one host), then the exit.
[[noreturn]] void TrainAndExit(shmtrain::TrainOptions& o, int* argc, char*** argv) {
  using namespace shmtrain;
  // Stop signals only raise a flag: the run loop stops the workers, removes the segment and
  // exits 128 + n. Installed before the data is loaded, so no signal finds a segment unowned.
  master::InstallSignalHandlers();

  master::Logger log(o.log_format, o.progress);
  std::unique_ptr<master::Hosts> hosts;
  if (Status s = JoinTheHosts(argc, argv, &o, &hosts, log); !s.ok()) {
    log.Error(s.message());
    if (hosts) hosts->AbortJob(s.exit_code());
    std::_Exit(s.exit_code());
  }
  master::ProcessLauncher launcher(master::DefaultWorkerPath());
  std::unique_ptr<monitoring::Exporter> exporter;
  Status s;
  try {
    s = master::RunTrain(o, log, launcher, *hosts, &exporter);
  } catch (...) {
    s = FromException(std::current_exception());
  }
  int code = kExitOk;
  if (!s.ok()) {
    log.Error(s.message());
    code = s.code() == Status::Code::kInterrupted ? 128 + master::g_stop_signal.load() : s.exit_code();
  }
  // The workers are reaped and the segment removed by now. Ending here rather than returning
  // skips the metrics server's shutdown, which would wait out civetweb's 2 s poll quantum;
  // the kernel closes its socket. Several hosts: a failure here ends the job on every host
  // with this code (a stop signal came to every host master already, from mpirun), unless
  // every host learned at the start that the run cannot start: then each leaves on its own.
  std::fflush(nullptr);
  if (code == kExitOk || hosts->failed_together()) {
    hosts->Finish();
  } else if (hosts->count() > 1 && s.code() != Status::Code::kInterrupted) {
    hosts->AbortJob(code);
  }
  std::_Exit(code);
}

// `shmtrain export`: its exit code.
int ExportCommand(const shmtrain::master::Command& cmd) {
  shmtrain::master::Logger log(cmd.train.log_format, false);
  shmtrain::Status s;
  try {
    s = shmtrain::master::RunExport(cmd, log);
  } catch (...) {
    s = FromException(std::current_exception());
  }
  if (!s.ok()) log.Error(s.message());
  return s.exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shmtrain;
  std::vector<std::string> args(argv, argv + argc);
  master::Command cmd;
  if (Status s = master::ParseCommandLine(args, &cmd); !s.ok()) {
    std::fprintf(stderr, "shmtrain: error: %s\n(see shmtrain --help)\n", s.message().c_str());
    return s.exit_code();
  }
  switch (cmd.kind) {
    case master::Command::Kind::kHelp:
      std::fputs(cmd.help_text.c_str(), stdout);
      return kExitOk;
    case master::Command::Kind::kVersion:
      std::puts("shmtrain " SHMTRAIN_VERSION);
      return kExitOk;
    case master::Command::Kind::kTrain:
      break;
    case master::Command::Kind::kCleanup: {
      int live = 0, stale = 0;
      for (const shm::SegmentInfo& s : shm::ListSegments()) {
        if (s.live) {
          ++live;
          std::printf("live   /dev/shm/%s  %llu bytes  (run of pid %lld: left alone)\n",
                      s.name.c_str(), static_cast<unsigned long long>(s.bytes),
                      static_cast<long long>(s.creator_pid));
          continue;
        }
        ++stale;
        const bool removed = !cmd.dry_run && shm::RemoveSegment(s.name);
        std::printf("%s  /dev/shm/%s  %llu bytes  (%s)\n",
                    cmd.dry_run ? "stale  " : (removed ? "removed" : "failed "), s.name.c_str(),
                    static_cast<unsigned long long>(s.bytes), s.why.c_str());
      }
      std::printf("%d live, %d stale%s\n", live, stale,
                  cmd.dry_run ? " (dry run: nothing removed)" : "");
      return kExitOk;
    }
    case master::Command::Kind::kEval:
    case master::Command::Kind::kPredict: {
      std::signal(SIGPIPE, SIG_IGN);
      master::Logger log(cmd.train.log_format, false);
      Status s;
      try {
        s = cmd.kind == master::Command::Kind::kEval ? master::RunEval(cmd, log)
                                                     : master::RunPredict(cmd, log);
      } catch (...) {
        s = FromException(std::current_exception());
      }
      if (!s.ok()) log.Error(s.message());
      return s.exit_code();
    }
    case master::Command::Kind::kExport:
      return ExportCommand(cmd);
    case master::Command::Kind::kSimulate: {
      master::Logger log(cmd.train.log_format, false);
      Status s;
      try {
        s = master::RunSimulate(cmd.train, cmd.sim_workers, cmd.compare, log);
      } catch (...) {
        s = FromException(std::current_exception());
      }
      if (!s.ok()) log.Error(s.message());
      return s.exit_code();
    }
  }
  TrainAndExit(cmd.train, &argc, &argv);
}
