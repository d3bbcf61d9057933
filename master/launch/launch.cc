#include "master/launch/launch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/decimal.h"
#include "core/signal_name.h"
#include "master/launch/job.h"
#include "master/launch/placement.h"
#include "master/launch/recover.h"
#include "master/run/signals.h"
#include "master/unit/stop_flag.h"
#include "shm/futex.h"
#include "shm/segment.h"
#include "shmtrain/relaunch.h"

extern char** environ;

namespace shmtrain::master::launch {
namespace {

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "shmtrain";
}

// The job's command with `resume` as its --resume (none: the job's own, if it has one). A job
// started with --init-from resumes without it: the checkpoint holds the parameters, and the
// two flags together are refused.
std::vector<std::string> JobArgs(const std::vector<std::string>& job, const std::string& resume) {
  if (resume.empty()) return job;
  std::vector<std::string> out;
  for (size_t i = 0; i < job.size(); ++i) {
    if (job[i] == "--resume" || job[i] == "--init-from") {
      ++i;
      continue;
    }
    if (job[i].rfind("--resume=", 0) == 0 || job[i].rfind("--init-from=", 0) == 0) continue;
    out.push_back(job[i]);
  }
  out.push_back("--resume");
  out.push_back(resume);
  return out;
}

// mpirun's command line: the ranks where the placement puts them, every SHMTRAIN_* variable
// passed on, and the job.
std::vector<std::string> MpirunArgv(const Placement& p, const std::vector<std::string>& job) {
  const char* mpirun = std::getenv("SHMTRAIN_MPIRUN");
  std::vector<std::string> argv = {mpirun != nullptr && *mpirun != '\0' ? mpirun : "mpirun",
                                   "--host", p.host_flag, "-np", std::to_string(p.rank_slot.size()),
                                   // Each host master's workers take the machine's cores.
                                   "--bind-to", "none", "-x", kLaunchReportVar};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var(*e, std::strcspn(*e, "="));
    if (var.rfind("SHMTRAIN_", 0) == 0 && var != kLaunchReportVar) {
      argv.insert(argv.end(), {"-x", var});
    }
  }
  argv.push_back(SelfPath());
  argv.insert(argv.end(), job.begin(), job.end());
  return argv;
}

// Whether a --hosts entry names this machine.
bool IsLocal(const std::string& name) {
  char self[256] = {};
  (void)gethostname(self, sizeof self - 1);
  return name == "localhost" || name == "127.0.0.1" || name == self;
}

// The address the host masters reach the launcher at: loopback when every slot is this
// machine, else this machine's name.
std::string ReportHost(const std::vector<std::string>& names) {
  char self[256] = {};
  (void)gethostname(self, sizeof self - 1);
  return std::all_of(names.begin(), names.end(), IsLocal) ? "127.0.0.1" : self;
}

// The segments of this machine's host masters that mpirun killed before they could remove them
// (a master held inside Open MPI's transport once a peer is gone, or in its start before any
// worker could), once the job is over: those whose creator is gone, as `shmtrain cleanup`
// removes them. Another machine's are removed by the next job's start there.
void ReclaimLeftovers(Logger& log) {
  for (const shm::SegmentInfo& gone : shm::ReclaimStaleSegments()) {
    log.Info("launch: removed the segment /dev/shm/" + gone.name +
                 " of a job's host master: " + gone.why,
             JsonLine("stale_segment_removed").Str("name", gone.name).Str("why", gone.why));
  }
}

std::string Seconds(int64_t ns) {
  return Fmt("%.1f", static_cast<double>(ns) * 1e-9);
}

// Seconds to the millisecond, for the JSON event (0.104, not 0.10400000000000001).
double Ms(int64_t ns) {
  return std::round(static_cast<double>(ns) * 1e-6) / 1000.0;
}

}  // namespace

namespace {

// A relaunch: what the next job is told of it (shmtrain/relaunch.h), and what the launcher
// measures of it.
struct LastRelaunch {
  Relaunch told;
  std::string from;                   // the state it resumes, "" for none
  int64_t lost_updates = -1;          // async: the updates the merged state lacks; -1: none merged
  int64_t lost_ns = 0, ended_ns = 0;  // the loss, and the end of the job that lost it
};

// The launcher's state across jobs.
struct Launcher {
  Launcher(const Command& c, Logger& l) : cmd(c), log(l), ranks(static_cast<int>(c.hosts.size())) {
    for (int s = 0; s < ranks; ++s) alive.push_back(s);
  }
  const Command& cmd;
  Logger& log;
  int ranks = 0;
  std::vector<int> alive;         // the slots left, in --hosts order
  std::vector<SavedState> saved;  // every stop checkpoint reported, by any job
  std::string resume;             // what the next job resumes ("" : the job's own --resume)
  int first = 0;                  // the slot of rank 0: where `resume` is
  LastRelaunch last;              // the latest relaunch (told.relaunches 0: none yet)
  bool said_training = false;     // the latest relaunch's line is out

  void SayRelaunch(int64_t now);
  // After a job: -1 to relaunch (the state set for it), else the launch's exit code.
  int Next(const JobEnd& end, const Placement& p);
  // Async across hosts: the job's stop states merged into --checkpoint, on a slot of `alive`
  // (master/launch/recover.h); removed when the run is `done`. The updates the merged state
  // lacks, or -1 when nothing was merged.
  int64_t Recover(const JobEnd& end, bool done);
  // Whether, with `gone` lost, the launcher gives up (saying why, and where `best` is).
  bool GivesUp(const std::vector<std::string>& gone, const SavedState* best) const;
};

// The relaunch's line, once its job trains (now), or when it ended before (now = 0).
void Launcher::SayRelaunch(int64_t now) {
  const Relaunch& r = last.told;
  if (!r.active() || said_training) return;
  said_training = true;
  std::string text =
      "relaunch " + std::to_string(r.relaunches) + " (" + ToString(r.reason) +
      "): " + r.LostText() + "; continued from " +
      (last.from.empty() ? "the start" : "step " + std::to_string(r.step) + " (" + last.from + ")");
  JsonLine json("relaunch");
  json.Int("relaunch", r.relaunches).Str("reason", ToString(r.reason));
  json.Strs("lost", r.lost).Int("step", r.step).Str("from", last.from);
  if (last.lost_updates >= 0) {
    text += " (the lost hosts' updates since their last pushes lost: at least " +
            std::to_string(last.lost_updates) + ")";
    json.Int("lost_updates", last.lost_updates);
  }
  if (now != 0) {
    text += "; training again " + Seconds(now - last.lost_ns) +
            " s after the loss (the job's end " + Seconds(last.ended_ns - last.lost_ns) +
            " s, the new job's start " + Seconds(now - last.ended_ns) + " s)";
    json.Num("seconds", Ms(now - last.lost_ns))
        .Num("end_seconds", Ms(last.ended_ns - last.lost_ns))
        .Num("start_seconds", Ms(now - last.ended_ns));
  } else {
    text += "; its job ended before it trained";
  }
  log.Info(text, json);
}

}  // namespace

namespace {

// How mpirun ended, for a message: "exit 1", "SIGKILL".
std::string HowEnded(int status) {
  if (WIFSIGNALED(status)) return SignalName(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

// The job's exit code when every host master ended by itself: host 0's, or the first other
// host's that failed.
int JobCode(const JobEnd& end) {
  for (const RankEnd& r : end.ranks) {  // a failure of its own first, then any
    if (r.exited && r.code != 0 && r.code != kExitHostLost && r.code < 128) return r.code;
  }
  for (const RankEnd& r : end.ranks) {
    if (r.code != 0) return r.code;
  }
  return 0;
}

// The lost hosts as the job named them ("host 1 (node-b)"), else by rank and slot.
std::vector<std::string> LostNames(const JobEnd& end, const Placement& p,
                                   const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (size_t r = 0; r < p.rank_slot.size(); ++r) {
    if (!RankLost(end.ranks, r)) continue;
    out.push_back(!end.ranks[r].name.empty()
                      ? end.ranks[r].name
                      : "host " + std::to_string(r) + " (" + names[p.rank_slot[r]] + ")");
  }
  return out;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

int64_t Launcher::Recover(const JobEnd& end, bool done) {
  if (end.async_states.empty()) return -1;
  if (done) {  // the run's model is saved: its states are of no use
    for (const SavedState& s : end.async_states) (void)unlink(s.path.c_str());
    return -1;
  }
  const Recovered rec = RecoverAsync(end.async_states, cmd.train.checkpoint_path, log);
  if (rec.step < 0) return -1;
  // Written on this machine: a slot of it reads it, when one is left.
  const auto here =
      std::find_if(alive.begin(), alive.end(), [&](int s) { return IsLocal(cmd.hosts[s]); });
  saved.push_back(
      {here != alive.end() ? *here : alive.front(), cmd.train.checkpoint_path, rec.step});
  return rec.lost;
}

bool Launcher::GivesUp(const std::vector<std::string>& gone, const SavedState* best) const {
  const std::string state = best == nullptr
                                ? "no stop checkpoint was written"
                                : "the newest state is " + best->path + " at step " +
                                      std::to_string(best->step) + " on " + cmd.hosts[best->slot];
  const std::string left =
      std::to_string(alive.size()) + " of " + std::to_string(cmd.hosts.size()) + " hosts left";
  if (static_cast<int>(alive.size()) < cmd.min_hosts) {
    log.Error("launch: giving up: " + Joined(gone) + " lost, " + left +
              ", fewer than --min-hosts " + std::to_string(cmd.min_hosts) + "; " + state);
    return true;
  }
  if (last.told.relaunches >= cmd.max_relaunches) {
    log.Error("launch: giving up: " + Joined(gone) + " lost, and --max-relaunches " +
              std::to_string(cmd.max_relaunches) + " are used up (" + left + "); " + state);
    return true;
  }
  return false;
}

int Launcher::Next(const JobEnd& end, const Placement& p) {
  if (end.stopped) {
    (void)Recover(end, false);
    const int sig = g_stop_signal.load();
    log.Error("launch: stopped by " + SignalName(sig) +
              "; the job was ended, each host master checkpointing where it stopped");
    return 128 + sig;
  }
  const bool reported =
      std::any_of(end.ranks.begin(), end.ranks.end(), [](const RankEnd& r) { return r.connected; });
  if (!reported) {
    log.Error("launch: mpirun ended (" + HowEnded(end.mpirun_status) +
              ") before any host master reported: its messages above say why");
    const bool coded = WIFEXITED(end.mpirun_status) && WEXITSTATUS(end.mpirun_status) != 0;
    return coded ? WEXITSTATUS(end.mpirun_status) : kExitResource;
  }
  const std::vector<int> lost = LostSlots(end.ranks, p.rank_slot);
  // Host 0 ended well: the run is done and its model saved, whatever was lost after. A host
  // that failed by itself (a bad file, a divergence: not a stop, not a lost host) failed the
  // job, even when mpirun then killed another before it could say so: nothing to relaunch.
  const bool done = end.ranks[0].exited && end.ranks[0].code == 0;
  const bool failed = std::any_of(end.ranks.begin(), end.ranks.end(), [](const RankEnd& r) {
    return r.exited && r.code != 0 && r.code != kExitHostLost && r.code < 128;
  });
  if (lost.empty() || done || failed) {
    (void)Recover(end, done);
    SayRelaunch(0);
    return JobCode(end);
  }
  SayRelaunch(0);  // a relaunch whose job lost a host before it trained
  saved.insert(saved.end(), end.saved.begin(), end.saved.end());
  const std::vector<std::string> gone = LostNames(end, p, cmd.hosts);
  std::erase_if(alive, [&](int s) { return std::find(lost.begin(), lost.end(), s) != lost.end(); });
  const bool silent = std::any_of(end.ranks.begin(), end.ranks.end(), [](const RankEnd& r) {
    return r.exited && r.code == kExitHostLost;
  });
  const int64_t lost_updates = Recover(end, false);
  const SavedState* best = Newest(saved, alive);
  if (GivesUp(gone, best)) return kExitLaunchGaveUp;
  if (best != nullptr) {
    resume = best->path;
    first = best->slot;
  } else if (std::find(alive.begin(), alive.end(), first) == alive.end()) {
    first = alive.front();
  }
  Relaunch& r = last.told;
  ++r.relaunches;
  r.reason = silent ? RelaunchReason::kHostSilent : RelaunchReason::kHostDied;
  ++r.reasons[static_cast<int>(r.reason)];
  r.lost = gone;
  r.step = best != nullptr ? best->step : 0;
  last.from = resume;
  last.lost_updates = lost_updates;
  last.lost_ns = end.lost_ns != 0 ? end.lost_ns : shm::MonotonicNs();
  last.ended_ns = shm::MonotonicNs();
  said_training = false;
  return -1;
}

int RunLaunch(const Command& cmd, Logger& log) {
  InstallSignalHandlers();
  Launcher l(cmd, log);
  for (int job = 1;; ++job) {
    const Placement p = Place(cmd.hosts, l.alive, l.first, l.ranks);
    if (l.last.told.active()) {
      setenv(kRelaunchEnv, RelaunchJson(l.last.told).c_str(), 1);
    } else {
      unsetenv(kRelaunchEnv);
    }
    log.Info("launch: job " + std::to_string(job) + ": mpirun -np " + std::to_string(l.ranks) +
                 " --host " + p.host_flag + (l.resume.empty() ? "" : " resuming " + l.resume),
             JsonLine("launch")
                 .Int("job", job)
                 .Int("ranks", l.ranks)
                 .Str("host", p.host_flag)
                 .Str("resume", l.resume));
    const JobSpec spec{.argv = MpirunArgv(p, JobArgs(cmd.job, l.resume)),
                       .rank_slot = p.rank_slot,
                       .report_host = ReportHost(cmd.hosts),
                       .on_training = [&l](int64_t now) { l.SayRelaunch(now); },
                       .on_hello = nullptr};
    JobEnd end;
    if (Status s = RunJob(spec, &end); !s.ok()) {
      log.Error(s.message());
      return s.exit_code();
    }
    ReclaimLeftovers(log);
    if (const int code = l.Next(end, p); code >= 0) return code;
  }
}

}  // namespace shmtrain::master::launch
