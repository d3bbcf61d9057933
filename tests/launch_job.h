// `shmtrain launch` in tests (tests/launch_test.cc, tests/launch_async_test.cc): jobs of 3 host
// masters x 2 workers on this machine (three slots named localhost stand for three hosts), one
// launch of a job read line by line, its host masters killed, and what a launch must leave.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "shm/layout.h"
#include "tests/mpi_job.h"
#include "tests/proc_util.h"

namespace shmtrain::test {

inline constexpr const char* kBin = SHMTRAIN_BIN;
inline constexpr int kHosts = 3;
inline constexpr milliseconds kLaunchTimeout{180'000};

// Open MPI on this machine over loopback, as root, from the environment (the launcher passes
// it on to mpirun, as it does for a user's OMPI_MCA_* settings).
inline void SetOpenMpiEnvironment() {
  const std::pair<const char*, std::string> vars[] = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                                                      {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                                                      {"OMPI_MCA_btl", "self,tcp"},
                                                      {"OMPI_MCA_btl_tcp_if_include", "lo"},
                                                      {"OMPI_MCA_oob_tcp_if_include", "lo"},
                                                      {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
                                                      {"OMPI_MCA_orte_tmpdir_base", SessionBase()},
                                                      {"SHMTRAIN_MPIRUN", MPIRUN_BIN}};
  for (const auto& [name, value] : vars) setenv(name, value.c_str(), 1);
}

class LaunchTest : public MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    SetOpenMpiEnvironment();
  }
};

// The sync job of the tests: blobs (MLP), or a small CNN with batch norm and dropout on the
// line images; JSON log, a loss line every 100 steps, checkpoints beside `ckpt`.
struct Job {
  std::vector<std::string> train;  // "train" and its flags
  int64_t steps = 0;
};

// A job's command: "train", its own flags, then what every job of the tests has.
inline Job MakeJob(std::vector<std::string> own, const std::string& seed, const std::string& ckpt,
                   int64_t steps) {
  Job job{{"train"}, steps};
  job.train.insert(job.train.end(), own.begin(), own.end());
  job.train.insert(job.train.end(),
                   {"--workers", "2", "--steps", std::to_string(steps), "--seed", seed,
                    "--log-every", "100", "--no-metrics", "--no-progress", "--log-format", "json",
                    "--checkpoint", ckpt});  // --checkpoint PATH last: Undisturbed replaces it
  return job;
}

inline Job MlpJob(const std::string& ckpt, int64_t steps) {
  return MakeJob({"--example", "blobs", "--rows", "2000", "--layers", "16,32,4", "--loss", "xent",
                  "--lr", "0.1", "--batch", "64"},
                 "3", ckpt, steps);
}

inline Job CnnJob(const std::string& data, const std::string& ckpt, int64_t steps) {
  return MakeJob(
      {"--data", data, "--input-shape", "1,6,6", "--model",
       "conv2d(4,3,padding=1),batchnorm2d,relu,maxpool2d(2),flatten,dropout(0.25),linear(3)",
       "--loss", "xent", "--lr", "0.2", "--batch", "12"},
      "7", ckpt, steps);
}

// One `shmtrain launch` of a job, tagged, read line by line.
class Launch {
 public:
  Launch(const Job& job, const std::string& save, const std::vector<std::string>& flags = {})
      : tag_(std::to_string(getpid()) + "-launch-" + std::to_string(++count_)),
        p_(Argv(job, save, flags, tag_)) {}
  ~Launch() {
    if (p_.running()) {
      p_.Signal(SIGTERM);
      (void)p_.Wait(kLaunchTimeout);
    }
    for (pid_t p : TaggedProcesses(tag_)) kill(p, SIGKILL);
  }

  // Reads lines until want(line) holds for an event; false at the end of the output.
  bool Until(const std::function<bool(const std::map<std::string, std::string>&)>& want,
             milliseconds timeout = kLaunchTimeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    std::string line;
    while (Clock::now() < deadline && p_.ReadLine(&line, Left(deadline))) {
      const auto e = ParseFlatJson(line);
      if (!e || !e->count("event")) continue;
      Note(*e);
      if (want(*e)) return true;
    }
    return false;
  }
  // A host master's segment header, mapped while this lives (its master may be gone).
  class Header {
   public:
    explicit Header(const std::string& segment) {
      const int fd = open(("/dev/shm" + segment).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return;
      void* m = mmap(nullptr, sizeof(shm::Header), PROT_READ, MAP_SHARED, fd, 0);
      close(fd);
      if (m != MAP_FAILED) h_ = static_cast<const shm::Header*>(m);
    }
    ~Header() {
      if (h_ != nullptr) munmap(const_cast<shm::Header*>(h_), sizeof(shm::Header));
    }
    Header(const Header&) = delete;
    Header& operator=(const Header&) = delete;
    bool ok() const { return h_ != nullptr; }
    int64_t step() const { return std::atomic_ref<const int64_t>(h_->combined_step).load(); }
    int64_t updates() const {
      return static_cast<int64_t>(std::atomic_ref<const uint64_t>(h_->param_version).load());
    }

   private:
    const shm::Header* h_ = nullptr;
  };
  // Until host 0 of job `job` has combined step `step` (sync) or applied `step` updates of its
  // own (async), as its segment says (its log reaches the test through mpirun's forwarding, a
  // second or more late under load). That figure then.
  int64_t UntilStep(int64_t step, int job, bool async = false) {
    // Every host master's pid first, so that any of them can be killed.
    auto started = [&](const auto&) {
      return job_ == job && segments_.count(0) != 0 && hosts_.size() == static_cast<size_t>(kHosts);
    };
    if (!Until(started)) return -1;
    const Header h(segments_.at(0));
    if (!h.ok()) return -1;
    const Clock::time_point deadline = Clock::now() + kLaunchTimeout;
    int64_t now = -1;
    while ((now = async ? h.updates() : h.step()) < step && Clock::now() < deadline &&
           p_.running()) {
      std::this_thread::sleep_for(std::chrono::microseconds{200});
    }
    return now >= step ? now : -1;
  }
  // Host h's segment of the current job (once UntilStep has returned).
  const std::string& SegmentOf(int h) const { return segments_.at(h); }
  // SIGKILLs host h's master of the current job and its workers.
  void KillHost(int h, int sig = SIGKILL) {
    const pid_t master = hosts_.at(h);
    std::vector<pid_t> children;
    const std::string kids = ReadWholeFile("/proc/" + std::to_string(master) + "/task/" +
                                           std::to_string(master) + "/children");
    for (size_t at = 0; at < kids.size();) {
      const size_t end = std::min(kids.find(' ', at), kids.size());
      if (end > at) children.push_back(std::stoi(kids.substr(at, end - at)));
      at = end + 1;
    }
    kill(master, sig);
    if (sig == SIGKILL) {
      for (pid_t c : children) kill(c, SIGKILL);
    }
  }
  ProcResult Wait() { return p_.Wait(kLaunchTimeout); }
  Subprocess& process() { return p_; }
  const std::string& tag() const { return tag_; }
  int job() const { return job_; }
  bool HasHost(int h) const { return hosts_.count(h) != 0; }
  // The segments of every host master any job of this launch had.
  const std::set<pid_t>& masters() const { return masters_; }

 private:
  static std::vector<std::string> Argv(const Job& job, const std::string& save,
                                       const std::vector<std::string>& flags,
                                       const std::string& tag) {
    setenv(kTagVar, tag.c_str(), 1);
    std::vector<std::string> a = {kBin, "launch", "--hosts", "localhost,localhost,localhost"};
    a.insert(a.end(), flags.begin(), flags.end());
    a.push_back("--");
    a.insert(a.end(), job.train.begin(), job.train.end());
    if (!save.empty()) a.insert(a.end(), {"--save", save});
    return a;
  }
  void Note(const std::map<std::string, std::string>& e) {
    if (e.at("event") == "launch") {
      job_ = std::stoi(e.at("job"));
      hosts_.clear();
      segments_.clear();
    }
    if (e.at("event") == "host") {
      hosts_[std::stoi(e.at("host"))] = std::stoi(e.at("pid"));
      masters_.insert(std::stoi(e.at("pid")));
      segments_[std::stoi(e.at("host"))] = e.at("segment");
    }
  }
  static inline std::atomic<int> count_{0};
  const std::string tag_;
  Subprocess p_;
  int job_ = 0;
  std::map<int, pid_t> hosts_;           // the current job's host masters
  std::map<int, std::string> segments_;  // and their segments
  std::set<pid_t> masters_;
};

// Within `bound` of the launcher's end: no process of the launch (the tag) and no segment of
// any of its host masters.
inline void ExpectLaunchGone(const Launch& l, milliseconds bound) {
  const Clock::time_point deadline = Clock::now() + bound;
  auto left = [&] {
    std::vector<std::string> what;
    for (pid_t p : TaggedProcesses(l.tag())) what.push_back("process " + std::to_string(p));
    for (pid_t m : l.masters()) {
      for (const std::string& s : SegmentsOf(m)) what.push_back("segment /dev/shm/" + s);
    }
    return what;
  };
  std::vector<std::string> what = left();
  while (!what.empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds{20});
    what = left();
  }
  std::string list;
  for (const std::string& w : what) list += " " + w;
  EXPECT_TRUE(what.empty()) << "left behind:" << list;
}

// The events of one kind in the launcher's output, each field as its JSON text (a string's
// without quotes): the relaunch event's `lost` is an array.
inline std::vector<std::map<std::string, std::string>> EventsOf(const ProcResult& r,
                                                                const std::string& kind) {
  std::vector<std::map<std::string, std::string>> out;
  for (const std::string& line : SplitLines(r.out)) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_object() || e.value("event", "") != kind) continue;
    std::map<std::string, std::string> fields;
    for (const auto& [key, value] : e.items()) {
      fields[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
    out.push_back(std::move(fields));
  }
  return out;
}

// The model of a job run by the launcher with no fault (cached per job's flags).
inline const std::string& Undisturbed(const Job& job, TempDir& dir) {
  static std::map<std::vector<std::string>, std::string> models;
  std::vector<std::string> key = job.train;
  key.erase(std::find(key.begin(), key.end(), "--checkpoint"), key.end());
  if (auto it = models.find(key); it != models.end()) return it->second;
  Job quiet = job;
  const std::string model = dir.File("undisturbed" + std::to_string(models.size()) + ".model");
  quiet.train.back() = dir.File("undisturbed.ckpt");  // the jobs end with --checkpoint PATH
  Launch l(quiet, model);
  const ProcResult r = l.Wait();
  EXPECT_TRUE(ExitedWith(r, 0)) << Clip(r.err);
  EXPECT_TRUE(EventsOf(r, "relaunch").empty());
  return models.emplace(key, ReadWholeFile(model)).first->second;
}

// The relaunch event of number n, checked for its fields: the lost hosts, the step it went on
// from (at or after `killed_at`, the step host 0 had logged when the fault came) and the time
// from the loss to training again (within the bound of docs/hosts.md, in the normal build).
inline void ExpectRelaunch(const ProcResult& r, size_t n, const std::string& reason,
                           const std::string& lost, int64_t killed_at) {
  const auto relaunches = EventsOf(r, "relaunch");
  ASSERT_GE(relaunches.size(), n) << Clip(r.out);
  const auto& e = relaunches[n - 1];
  EXPECT_EQ(e.at("relaunch"), std::to_string(n));
  EXPECT_EQ(e.at("reason"), reason);
  EXPECT_EQ(e.at("lost"), "[\"" + lost + "\"]") << "one host lost, by name";
  EXPECT_GE(std::stoll(e.at("step")), killed_at);
  ASSERT_TRUE(e.count("seconds")) << "relaunch " << n << " never trained";
  std::printf(
      "[ relaunch %zu ] %s lost, continued from step %s, training again %s s after the "
      "loss (the old job's end %s s, the new job's start %s s)\n",
      n, e.at("lost").c_str(), e.at("step").c_str(), e.at("seconds").c_str(),
      e.at("end_seconds").c_str(), e.at("start_seconds").c_str());
  EXPECT_LT(std::stod(e.at("seconds")), UnlessSanitized(5.0, 30.0));
  // The relaunched job was told (SHMTRAIN_RELAUNCH): its host 0 says so, at the same step.
  // (A job lost before its host 0 said so is not counted: the one that trained did.)
  const auto told = EventsOf(r, "relaunched");
  const auto it = std::find_if(told.begin(), told.end(), [&](const auto& t) {
    return t.at("relaunches") == std::to_string(n);
  });
  ASSERT_NE(it, told.end()) << Clip(r.out);
  EXPECT_EQ(it->at("reason"), reason);
  EXPECT_EQ(it->at("step"), e.at("step"));
  EXPECT_EQ(it->at("lost"), e.at("lost"));
}

// Host h as the job names it: "host 1 (node)", every host on this machine.
inline std::string Named(int h) {
  char node[256] = {};
  gethostname(node, sizeof node - 1);
  return "host " + std::to_string(h) + " (" + node + ")";
}

}  // namespace shmtrain::test
