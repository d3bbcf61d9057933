#include "tests/mpi_job.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace shmtrain::test {
namespace {

constexpr const char* kMpirun = MPIRUN_BIN;

// How often a watched job's processes are looked at. A replaced worker lives for the rest of
// its run (a hundred steps and more), so a look every few milliseconds sees it; a look costs
// a few /proc reads per host master.
constexpr milliseconds kWatchTick{3};

// ---------------------------------------------------------------------------------------------
// /proc: a job's processes.

// A small /proc file's contents ("" if it cannot be read: the process is gone).
std::string ReadProcFile(const std::string& path) {
  std::string out;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  close(fd);
  return out;
}

// Appends the pids listed in text (a /proc/.../children file) to *out.
void ParsePids(const std::string& text, std::vector<pid_t>* out) {
  std::istringstream in(text);
  pid_t c;
  while (in >> c) out->push_back(c);
}

// The children of pid that its main thread forked (a host master forks its workers there).
std::vector<pid_t> MainThreadChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  const std::string p = std::to_string(pid);
  ParsePids(ReadProcFile("/proc/" + p + "/task/" + p + "/children"), &out);
  return out;
}

// The children of pid, over all its threads (mpirun may fork its ranks from any of them).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::vector<pid_t> out;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(task.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    ParsePids(ReadProcFile(task + "/" + e->d_name + "/children"), &out);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// A process's argv (empty once it is gone, or for a zombie).
std::vector<std::string> CmdlineOf(pid_t pid) {
  const std::string raw = ReadProcFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < raw.size()) {
    const size_t end = raw.find('\0', start);
    argv.push_back(raw.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return argv;
}

}  // namespace

// The live processes whose environment holds kTagVar=tag: every process of that job but
// mpirun itself (which the test started, and reaps).
std::vector<pid_t> TaggedProcesses(const std::string& tag) {
  const std::string want = std::string(kTagVar) + "=" + tag;
  std::vector<pid_t> found;
  DIR* d = opendir("/proc");
  if (d == nullptr) return found;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
    const std::string env = ReadProcFile(std::string("/proc/") + e->d_name + "/environ");
    size_t start = 0;
    while (start < env.size()) {
      const size_t end = std::min(env.find('\0', start), env.size());
      if (env.compare(start, end - start, want) == 0) {
        if (PidAlive(pid)) found.push_back(pid);
        break;
      }
      start = end + 1;
    }
  }
  closedir(d);
  return found;
}

std::string PidList(const std::vector<pid_t>& pids) {
  std::string s;
  for (pid_t p : pids) {
    const std::vector<std::string> argv = CmdlineOf(p);
    s += (s.empty() ? "" : ", ") + std::to_string(p) + " (" +
         (argv.empty() ? "?" : argv[0].substr(argv[0].rfind('/') + 1)) + ")";
  }
  return s;
}

// Where this test process's mpirun jobs keep Open MPI's session directories: a directory of
// its own, removed when the process ends. Under the shared default (/tmp/ompi.<host>.<uid>)
// two jobs that ctest starts at the same moment race to create it, and the loser's mpirun
// ends at once ("A call to mkdir was unable to create the desired directory ... File exists").
const std::string& SessionBase() {
  struct Base {
    std::string path;
    Base() {
      std::string t = "/tmp/shmtrain-mpi.XXXXXX";
      if (mkdtemp(t.data()) != nullptr) path = t;
    }
    ~Base() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  };
  static const Base base;
  return base.path;
}

namespace {

// Everything mpirun needs to run host masters on this machine over loopback TCP, and the tag.
std::vector<std::string> MpirunFlags(const std::string& tag) {
  std::vector<std::string> flags = {kMpirun,
          "--allow-run-as-root",
          "--oversubscribe",
          "--bind-to",
          "none",
          "--mca",
          "btl",
          "self,tcp",
          "--mca",
          "btl_tcp_if_include",
          "lo",
          "--mca",
          "oob_tcp_if_include",
          "lo",
          "-x",
          std::string(kTagVar) + "=" + tag};
  if (!SessionBase().empty()) {
    flags.insert(flags.begin() + 1, {"--mca", "orte_tmpdir_base", SessionBase()});
  }
  return flags;
}

std::string NewTag() {
  static std::atomic<int> n{0};
  return std::to_string(getpid()) + "-" + std::to_string(++n);
}

// Whether 127.0.0.1:port can be bound now (it is released again at once).
bool PortFree(int port) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return fd.get() >= 0 && bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
}

}  // namespace

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

long long Ms(Clock::duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

milliseconds Left(Clock::time_point deadline) {
  return std::max(milliseconds{0},
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

void MpiTest::SetUp() {
  ASSERT_TRUE(ToolFound(kMpirun)) << "mpirun was not found when CMake ran ('" << kMpirun
                                  << "'); install Open MPI (Debian: openmpi-bin)";
}

// ---------------------------------------------------------------------------------------------
// An mpirun job, watched while it runs.

MpiJob::MpiJob(int hosts, const std::vector<std::string>& shmtrain_argv)
    : tag_(NewTag()), hosts_(hosts), p_(Argv(tag_, {{hosts, shmtrain_argv}})) {}

MpiJob::MpiJob(const std::vector<std::pair<int, std::vector<std::string>>>& contexts)
    : tag_(NewTag()), hosts_(CountOf(contexts)), p_(Argv(tag_, contexts)) {}

MpiJob::~MpiJob() {
  if (p_.running()) {
    p_.Signal(SIGTERM);
    (void)p_.Wait(milliseconds{10'000});
  }
  const Clock::time_point until = Clock::now() + milliseconds{5'000};
  while (!TaggedProcesses(tag_).empty() && Clock::now() < until) {
    std::this_thread::sleep_for(milliseconds{10});
  }
  for (pid_t p : TaggedProcesses(tag_)) kill(p, SIGKILL);
}

const HostInfo* MpiJob::host(int h) const {
  const auto it = hosts_seen_.find(h);
  return it == hosts_seen_.end() ? nullptr : &it->second;
}

std::set<pid_t> MpiJob::masters() const {
  std::set<pid_t> m = masters_;
  for (const auto& [h, info] : hosts_seen_) m.insert(info.pid);
  return m;
}

std::map<pid_t, WorkerSeen> MpiJob::workers(int h) const {
  const HostInfo* info = host(h);
  if (info == nullptr) return {};
  const auto it = workers_.find(info->pid);
  return it == workers_.end() ? std::map<pid_t, WorkerSeen>() : it->second;
}

bool MpiJob::SawIncarnation(int h, int rank, int incarnation) const {
  for (const auto& [pid, w] : workers(h)) {
    if (w.rank == rank && w.incarnation == incarnation) return true;
  }
  return false;
}

bool MpiJob::Until(const std::function<bool(const std::string&)>& want, milliseconds timeout,
                   std::string* hit) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string line;
  for (;;) {
    Watch();
    if (Clock::now() >= deadline) return false;
    if (!Read(&line, deadline)) {
      if (ended_) return false;
      continue;
    }
    if (want(line)) {
      if (hit != nullptr) *hit = line;
      return true;
    }
  }
}

bool MpiJob::UntilCondition(const std::function<bool()>& cond, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string line;
  for (;;) {
    Watch();
    if (cond()) return true;
    if (Clock::now() >= deadline || ended_) return false;
    (void)Read(&line, deadline);
  }
}

bool MpiJob::UntilRunning(int workers, milliseconds timeout) {
  return UntilCondition(
      [&] {
        if (static_cast<int>(hosts_seen_.size()) < hosts_) return false;
        for (int h = 0; h < hosts_; ++h) {
          std::set<int> ranks;
          for (const auto& [pid, w] : this->workers(h)) ranks.insert(w.rank);
          if (static_cast<int>(ranks.size()) < workers) return false;
        }
        return true;
      },
      timeout);
}

bool MpiJob::Pause(milliseconds d) {
  const Clock::time_point until = Clock::now() + d;
  (void)UntilCondition([&] { return Clock::now() >= until; }, d + milliseconds{1});
  return !ended_;
}

ProcResult MpiJob::Wait(milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string line;
  while (!ended_ && Clock::now() < deadline) {
    Watch();
    (void)Read(&line, deadline);
  }
  ProcResult r = p_.Wait(Left(deadline));
  for (const std::string& l : SplitLines(r.out)) Note(l);
  return r;
}

std::string MpiJob::DescribeWorkers() const {
  std::string s;
  for (int h = 0; h < hosts_; ++h) {
    s += "host " + std::to_string(h) + ":";
    for (const auto& [pid, w] : workers(h)) {
      s += " pid " + std::to_string(pid) + " rank " + std::to_string(w.rank) + " incarnation " +
           std::to_string(w.incarnation) + ";";
    }
    s += "\n";
  }
  return s;
}

int MpiJob::CountOf(const std::vector<std::pair<int, std::vector<std::string>>>& contexts) {
  int n = 0;
  for (const auto& c : contexts) n += c.first;
  return n;
}

std::vector<std::string> MpiJob::Argv(
    const std::string& tag, const std::vector<std::pair<int, std::vector<std::string>>>& contexts) {
  std::vector<std::string> a = MpirunFlags(tag);
  for (size_t i = 0; i < contexts.size(); ++i) {
    if (i > 0) a.push_back(":");
    a.insert(a.end(), {"-np", std::to_string(contexts[i].first)});
    a.insert(a.end(), contexts[i].second.begin(), contexts[i].second.end());
  }
  return a;
}

// Reads one line of stdout for at most a watch tick, and notes it. false when none came; at
// the end of the output (ReadLine gives up before its timeout only there) ended_ turns true.
bool MpiJob::Read(std::string* line, Clock::time_point deadline) {
  const milliseconds wait = std::min(Left(deadline), kWatchTick);
  const Clock::time_point asked = Clock::now();
  if (p_.ReadLine(line, wait)) {
    Note(*line);
    return true;
  }
  if (Clock::now() < asked + wait) ended_ = true;
  return false;
}

void MpiJob::Note(const std::string& line) {
  if (JsonField(line, "event") != "host") return;
  const auto ev = ParseFlatJson(line);
  HostInfo info;
  info.pid = static_cast<pid_t>(std::stol(ev->at("pid")));
  info.segment = ev->at("segment");
  info.metrics = ev->at("metrics");
  hosts_seen_[std::stoi(ev->at("host"))] = info;
}

// One look at the job's processes, at most every kWatchTick.
void MpiJob::Watch() {
  if (p_.pid() <= 0 || Clock::now() < next_watch_) return;
  next_watch_ = Clock::now() + kWatchTick;
  if (static_cast<int>(masters_.size()) < hosts_) {
    for (pid_t m : ChildrenOf(p_.pid())) masters_.insert(m);
  }
  for (pid_t m : masters()) {
    auto& mine = workers_[m];
    for (pid_t c : MainThreadChildrenOf(m)) {
      if (mine.count(c) != 0) continue;
      const std::vector<std::string> argv = CmdlineOf(c);
      if (argv.size() != 4 || !Contains(argv[0], "shmtrain-worker")) continue;
      mine[c] = WorkerSeen{std::stoi(argv[2]), std::stoi(argv[3])};
    }
  }
}

Clock::duration ExpectJobGone(MpiJob& job, Clock::time_point since, milliseconds bound) {
  const Clock::time_point deadline = since + bound;
  auto left = [&] {
    std::vector<pid_t> alive = TaggedProcesses(job.tag());
    for (pid_t m : job.masters()) {
      if (PidAlive(m)) alive.push_back(m);
    }
    for (int h = 0; h < job.hosts(); ++h) {
      for (const auto& [pid, w] : job.workers(h)) {
        if (PidAlive(pid)) alive.push_back(pid);
      }
    }
    std::sort(alive.begin(), alive.end());
    alive.erase(std::unique(alive.begin(), alive.end()), alive.end());
    std::vector<std::string> segments;
    for (pid_t m : job.masters()) {
      for (const std::string& s : SegmentsOf(m)) segments.push_back("/dev/shm/" + s);
    }
    for (int h = 0; h < job.hosts(); ++h) {
      const HostInfo* info = job.host(h);
      if (info != nullptr && FileExists("/dev/shm" + info->segment) &&
          std::find(segments.begin(), segments.end(), "/dev/shm" + info->segment) ==
              segments.end()) {
        segments.push_back("/dev/shm" + info->segment);
      }
    }
    return std::make_pair(alive, segments);
  };
  auto state = left();
  while ((!state.first.empty() || !state.second.empty()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds{10});
    state = left();
  }
  const Clock::duration took = Clock::now() - since;
  std::string hosts;  // which host master is which, for the messages
  for (int h = 0; h < job.hosts(); ++h) {
    if (job.host(h) != nullptr) {
      hosts += " host " + std::to_string(h) + " = pid " + std::to_string(job.host(h)->pid) + ";";
    }
  }
  EXPECT_TRUE(state.first.empty())
      << "processes of the job alive " << Ms(took) << " ms on: " << PidList(state.first) << " ("
      << hosts << ")\nmpirun's stderr:\n"
      << Clip(job.err());
  std::string segs;
  for (const std::string& s : state.second) segs += s + " ";
  EXPECT_TRUE(state.second.empty()) << "segments left " << Ms(took) << " ms on: " << segs << "("
                                    << hosts << ")\nmpirun's stderr:\n"
                                    << Clip(job.err());
  EXPECT_GE(job.masters().size(), static_cast<size_t>(job.hosts()))
      << "not every host master was seen";
  return took;
}

ProcResult KillHostMaster(MpiJob& job, int victim) {
  EXPECT_EQ(kill(job.host(victim)->pid, SIGKILL), 0);
  const Clock::time_point killed = Clock::now();
  ProcResult r = job.Wait(kGoneBound + milliseconds{5'000});
  const Clock::duration took = ExpectJobGone(job, killed, kGoneBound);
  std::printf("[ host %d killed ] mpirun ended after %lld ms, everything gone after %lld ms\n",
              victim, Ms(r.end - killed), Ms(took));
  EXPECT_LE(r.end - killed, kGoneBound) << "mpirun outlived the bound";
  EXPECT_TRUE(ExitedWith(r, 128 + SIGKILL)) << "mpirun reports the dead rank's signal";
  EXPECT_TRUE(Contains(r.err, "process rank " + std::to_string(victim)) &&
              Contains(r.err, "exited on signal 9"))
      << "no message naming rank " << victim << ":\n"
      << Clip(r.err);
  return r;
}

void StopHostMaster(MpiJob& job, milliseconds host_timeout, const std::string& what) {
  ASSERT_EQ(kill(job.host(1)->pid, SIGSTOP), 0);
  const Clock::time_point stopped = Clock::now();
  // Under a sanitizer the survivors' end (stop checkpoints among it) runs several times
  // slower: TSan once took 5.8 s past the timeout.
  const milliseconds gone = UnlessSanitized(kGoneBound, 2 * kGoneBound);
  const ProcResult r = job.Wait(host_timeout + gone + milliseconds{10'000});
  const Clock::duration took = ExpectJobGone(job, stopped, host_timeout + gone);
  std::printf("[ host 1 stopped ] mpirun ended after %lld ms, everything gone after %lld ms\n",
              Ms(r.end - stopped), Ms(took));
  EXPECT_TRUE(ExitedWith(r, 6));
  EXPECT_LE(r.end - stopped, host_timeout + gone);
  EXPECT_GE(r.end - stopped, host_timeout - milliseconds{500}) << "ended before the deadline";
  EXPECT_TRUE(Contains(r.err, what) &&
              Contains(r.err, "by the deadline (--host-timeout " +
                                  std::to_string(host_timeout.count()) + " ms)"))
      << Clip(r.err);
}

ProcResult RunJob(int hosts, const std::vector<std::string>& argv) {
  MpiJob job(hosts, argv);
  EXPECT_GT(job.mpirun(), 0);
  ProcResult r = job.Wait(kJobTimeout);
  ExpectJobGone(job, Clock::now(), milliseconds{2'000});
  return r;
}

bool ChoosesMetrics(const std::vector<std::string>& a) {
  for (const std::string& s : a) {
    if (s == "--no-metrics" || s.rfind("--metrics-addr", 0) == 0) return true;
  }
  return false;
}

std::vector<std::string> WithoutMetrics(std::vector<std::string> a) {
  if (!ChoosesMetrics(a)) a.push_back("--no-metrics");
  return a;
}

int PickFreePorts(int count) {
  int low = 32768;  // the first ephemeral port
  std::istringstream(ReadProcFile("/proc/sys/net/ipv4/ip_local_port_range")) >> low;
  const int first = 10'000, last = std::max(first + 100, low) - count;
  std::mt19937 rng(static_cast<unsigned>(getpid()) ^
                   static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  std::uniform_int_distribution<int> pick(first, last);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = pick(rng);
    bool free = true;
    for (int k = 0; k < count && free; ++k) free = PortFree(port + k);
    if (free) return port;
  }
  return -1;
}

// Host 0's live page (/api/run) lists the job's workers: its own and, as each host master
// reports them about once a second (master/hosts/worker_states.h), every other host's, with
// the pids the job's processes have.
void ExpectThePageListsEveryHostsWorkers(MpiJob& job, int base) {
  // Until the page lists exactly the job's workers (as the job's processes show them), each
  // up: a host's first report may come before its workers have started.
  std::set<std::pair<int, int64_t>> want, listed;
  std::string body, error;
  const bool agree = job.UntilCondition(
      [&] {
        want.clear();
        for (int h = 0; h < job.hosts(); ++h) {
          for (const auto& [pid, seen] : job.workers(h)) want.insert({h, pid});
        }
        const auto resp =
            HttpGet("127.0.0.1:" + std::to_string(base), "/api/run", milliseconds{5'000}, &error);
        if (!resp.has_value()) return false;
        body = resp->body;
        listed.clear();
        const nlohmann::json run = nlohmann::json::parse(body);
        for (const auto& w : run["workers"]) {
          if (w["up"].get<bool>()) listed.insert({w["host"].get<int>(), w["pid"].get<int64_t>()});
        }
        return listed == want && static_cast<int>(want.size()) >= job.hosts();
      },
      milliseconds{10'000});
  EXPECT_TRUE(agree) << "host 0's page does not list the job's " << want.size()
                     << " workers, up (" << listed.size() << " listed; " << error << "):\n"
                     << body;
}

}  // namespace shmtrain::test
