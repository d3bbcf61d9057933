#include "master/launch/job.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "master/log/report.h"
#include "master/run/signals.h"
#include "master/unit/stop_flag.h"
#include "nlohmann/json.hpp"
#include "shm/futex.h"

extern char** environ;

namespace shmtrain::master::launch {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
// A rank gone without a word: mpirun ends the rest of the job by itself within about a second
// (by default); past this, the launcher asks it to (SIGTERM), as when Open MPI is told to keep
// a job going after a death (orte_enable_recovery).
constexpr int64_t kLossGraceNs = 3 * kSecondNs;
// mpirun asked to end: past this it is killed with its process group.
constexpr int64_t kMpirunBoundNs = 30 * kSecondNs;

// The listening socket the host masters report to, on every address, on a port of the kernel's
// choice: its fd and port, or -1.
int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 256) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// mpirun, in a process group of its own (the launcher ends the whole job on its own terms),
// with SIGUSR1 when the launcher dies, which mpirun passes on to every host master (Open MPI
// forwards SIGUSR1 by default): each stops as on any stop signal, checkpointing where it
// stopped, and the job ends. (SIGTERM would make mpirun kill them within milliseconds, before
// their checkpoints.) Each host master also stops by itself when its connection to the
// launcher closes (master/log/report.h): no job goes on headless.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& report) {
  std::vector<std::string> env_text = {std::string(kLaunchReportVar) + "=" + report};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, kLaunchReportVar, std::strlen(kLaunchReportVar)) != 0) {
      env_text.emplace_back(*e);
    }
  }
  std::vector<char*> args, env;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& e : env_text) env.push_back(const_cast<char*>(e.c_str()));
  args.push_back(nullptr);
  env.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGUSR1);
  if (getppid() != parent) _exit(127);  // the launcher died before the line above
  execvpe(args[0], args.data(), env.data());
  _exit(127);
}

// One host master's connection: its rank once it said hello, and what it sent of a line.
struct Connection {
  int fd = -1;
  int rank = -1;
  std::string pending;
};

class Watch {
 public:
  Watch(const JobSpec& spec, JobEnd* end) : spec_(spec), end_(end) {
    end_->ranks.assign(spec.rank_slot.size(), RankEnd{});
  }
  // Reads what is there on c; false at its end.
  bool Read(Connection& c, int64_t now);
  // c's end; stopped: the launcher had told every host master to stop by then.
  void Closed(const Connection& c, int64_t now, bool stopped);

 private:
  void Event(Connection& c, const std::string& line, int64_t now);
  void Lost(int64_t now) {
    if (end_->lost_ns == 0) end_->lost_ns = now;
  }
  const JobSpec& spec_;
  JobEnd* end_;
  bool training_said_ = false;
};

bool Watch::Read(Connection& c, int64_t now) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = c.pending.find('\n')) != std::string::npos;) {
      Event(c, c.pending.substr(0, nl), now);
      c.pending.erase(0, nl + 1);
    }
  }
}

void Watch::Event(Connection& c, const std::string& line, int64_t now) {
  const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
  if (!e.is_object() || !e.contains("event") || !e["event"].is_string()) return;
  const std::string event = e["event"];
  const int ranks = static_cast<int>(end_->ranks.size());
  if (event == "hello" && e.value("host", -1) >= 0 && e.value("host", -1) < ranks) {
    c.rank = e["host"];
    end_->ranks[c.rank].connected = true;
    end_->ranks[c.rank].name = e.value("name", "");
    if (spec_.on_hello) spec_.on_hello(c.rank, end_->ranks[c.rank].name);
  }
  if (c.rank < 0) return;
  if (event == "error") {
    end_->ranks[c.rank].ending = true;
    end_->ranks[c.rank].error = e.value("message", "");
  }
  if (event == "checkpoint_on_stop" && e.contains("path") && e.contains("step")) {
    end_->ranks[c.rank].ending = true;
    end_->saved.push_back({spec_.rank_slot[c.rank], e.value("path", ""), e.value("step", -1)});
  } else if (event == "async_state_on_stop" && e.contains("path")) {
    // Async: this host's part of the state where the survivors stopped (master/launch/recover.h).
    end_->ranks[c.rank].ending = true;
    end_->async_states.push_back(
        {spec_.rank_slot[c.rank], e.value("path", ""), e.value("step", -1)});
  } else if (event == "checkpoint_on_stop_skipped" && !e.value("path", "").empty()) {
    // Async: the last periodic checkpoint stands for the state where it stopped.
    end_->ranks[c.rank].ending = true;
    end_->saved.push_back({spec_.rank_slot[c.rank], e.value("path", ""), e.value("step", -1)});
  } else if (event == "training" && c.rank == 0 && !training_said_) {
    training_said_ = true;
    if (spec_.on_training) spec_.on_training(now);
  } else if (event == "exit") {
    end_->ranks[c.rank].exited = true;
    end_->ranks[c.rank].code = e.value("code", -1);
    if (end_->ranks[c.rank].code != 0) Lost(now);
  }
}

void Watch::Closed(const Connection& c, int64_t now, bool stopped) {
  if (c.rank < 0) return;
  RankEnd& r = end_->ranks[c.rank];
  if (stopped) r.ending = true;
  if (!r.exited && !r.ending) Lost(now);
}

}  // namespace

namespace {

// The job's connections, polled with the listening socket.
struct Sockets {
  int listen_fd = -1;
  std::vector<Connection> conns;
  ~Sockets() {
    if (listen_fd >= 0) close(listen_fd);
    for (const Connection& c : conns) close(c.fd);
  }
  // Tells every host master still connected to stop (master/log/report.h), once.
  void StopAll() {
    if (stop_sent) return;
    stop_sent = true;
    static constexpr char kStop[] = "{\"event\":\"stop\"}\n";
    for (const Connection& c : conns) {
      (void)send(c.fd, kStop, sizeof kStop - 1, MSG_NOSIGNAL | MSG_DONTWAIT);  // one may be gone
    }
  }
  bool stop_sent = false;
  // Waits at most ms for a report, takes new connections and reads what came.
  void Poll(int ms, Watch& watch) {
    std::vector<pollfd> p = {{listen_fd, POLLIN, 0}};
    for (const Connection& c : conns) p.push_back({c.fd, POLLIN, 0});
    if (poll(p.data(), p.size(), ms) <= 0) return;
    const int64_t now = shm::MonotonicNs();
    for (size_t i = conns.size(); i-- > 0;) {
      if (p[i + 1].revents == 0 || watch.Read(conns[i], now)) continue;
      watch.Closed(conns[i], now, stop_sent);
      close(conns[i].fd);
      conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (int fd; (fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
      conns.push_back(Connection{fd, -1, {}});
    }
  }
};

// Whether a rank has gone without a word (its connection closed before its exit).
bool AnyLost(const JobEnd& end) {
  return end.lost_ns != 0;
}

}  // namespace

Status RunJob(const JobSpec& spec, JobEnd* end) {
  Sockets s;
  int port = 0;
  s.listen_fd = Listen(&port);
  if (s.listen_fd < 0) {
    return Status::Resource(std::string("launch: cannot listen for the job's reports: ") +
                            std::strerror(errno));
  }
  Watch watch(spec, end);
  const pid_t pid = Spawn(spec.argv, spec.report_host + ":" + std::to_string(port));
  if (pid < 0) {
    return Status::Resource(std::string("launch: cannot start mpirun: ") + std::strerror(errno));
  }
  int64_t asked_ns = 0;    // when mpirun was asked to end the job
  int64_t stopped_ns = 0;  // when the launcher was stopped
  auto ask = [&](int64_t now) {
    if (asked_ns != 0) return;
    asked_ns = now;
    kill(pid, SIGTERM);
  };
  for (;;) {
    s.Poll(100, watch);
    if (waitpid(pid, &end->mpirun_status, WNOHANG) == pid) break;
    const int64_t now = shm::MonotonicNs();
    // A loss, or the launcher stopped: every host master stops at once, checkpointing where it
    // stopped; mpirun is asked to end the job if it has not after a grace.
    if (g_stop_signal.load() != 0) {
      if (!end->stopped) stopped_ns = now;
      end->stopped = true;
      s.StopAll();
      if (now - stopped_ns > kLossGraceNs) ask(now);
    }
    if (AnyLost(*end)) {
      s.StopAll();
      if (now - end->lost_ns > kLossGraceNs) ask(now);
    }
    if (asked_ns != 0 && now - asked_ns > kMpirunBoundNs) kill(-pid, SIGKILL);
  }
  // What the ranks sent before they ended is still in the sockets: read it to their ends.
  const int64_t drain_until = shm::MonotonicNs() + kSecondNs;
  while (!s.conns.empty() && shm::MonotonicNs() < drain_until) s.Poll(50, watch);
  if (g_stop_signal.load() != 0) end->stopped = true;
  return Status::Ok();
}

}  // namespace shmtrain::master::launch
