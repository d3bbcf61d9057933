#include "tests/proc_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/signal_name.h"
#include "gtest/gtest.h"

namespace shmtrain::test {
namespace {

// Without a pidfd, a child's exit is noticed on this tick.
constexpr milliseconds kTick{5};
// After the child is reaped, how long its pipes may stay open (held by a grandchild that has
// not died yet) before the helper stops reading them.
constexpr milliseconds kDrainGrace{2000};
// How long the destructor gives a child to end after SIGTERM before it SIGKILLs it.
constexpr milliseconds kTermGrace{2000};

// Rounded up: a poll for the truncated time would return early, and the last millisecond
// before every deadline would be spent polling with a timeout of 0.
milliseconds Left(Clock::time_point deadline) {
  const auto d = std::chrono::ceil<milliseconds>(deadline - Clock::now());
  return std::max(d, milliseconds{0});
}

void CloseFd(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// Reads what is available on a non-blocking fd into *buf; closes it at EOF or error.
void ReadSome(int* fd, std::string* buf) {
  char chunk[65536];
  for (;;) {
    const ssize_t n = read(*fd, chunk, sizeof chunk);
    if (n > 0) {
      buf->append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    CloseFd(fd);  // EOF or a real error: nothing more will come
    return;
  }
}

}  // namespace

std::string ProcResult::Describe() const {
  std::string s;
  if (timed_out) {
    s = "timed out (SIGKILLed by the test)";
  } else if (exited) {
    s = "exit " + std::to_string(exit_code);
  } else {
    s = SignalText(term_signal);
  }
  return s + "; stderr:\n" + err;
}

Subprocess::Subprocess(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    ADD_FAILURE() << "Subprocess: empty argv";
    return;
  }
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return;
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // dup2 clears FD_CLOEXEC on the targets; every other descriptor is close-on-exec.
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execv(args[0], args.data());
    const char msg[] = "proc_util: execv failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  const int fork_errno = errno;
  if (devnull >= 0) close(devnull);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(fork_errno);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return;
  }
  pid_ = pid;
  out_fd_ = out_pipe[0];
  err_fd_ = err_pipe[0];
  fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  fcntl(err_fd_, F_SETFL, fcntl(err_fd_, F_GETFL) | O_NONBLOCK);
  // A pidfd of an unreaped child stays valid even if it has already exited.
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

Subprocess::~Subprocess() {
  if (running()) {
    // SIGTERM first: a master then removes its segment and stops its workers itself.
    kill(pid_, SIGTERM);
    const Clock::time_point deadline = Clock::now() + kTermGrace;
    while (running() && Clock::now() < deadline) Pump(Left(deadline));
    KillAndReap();
  }
  CloseFd(&out_fd_);
  CloseFd(&err_fd_);
  CloseFd(&pidfd_);
}

void Subprocess::KillAndReap() {
  if (!running()) return;
  kill(pid_, SIGKILL);
  ReapIfDone(/*block=*/true);
  // A SIGKILLed master cannot remove its segment; the test has failed already, so do it here
  // rather than leave the file in /dev/shm.
  for (const std::string& name : SegmentsOf(pid_)) shm_unlink(("/" + name).c_str());
}

void Subprocess::ReapIfDone(bool block) {
  if (!running()) return;
  int st = 0;
  pid_t p;
  do {
    p = waitpid(pid_, &st, block ? 0 : WNOHANG);
  } while (p < 0 && errno == EINTR);
  if (p != pid_) return;
  reaped_ = true;
  status_ = st;
  end_ = Clock::now();
  CloseFd(&pidfd_);
}

void Subprocess::Pump(milliseconds timeout) {
  pollfd fds[3];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (pidfd_ >= 0 && running()) fds[n++] = {pidfd_, POLLIN, 0};
  if (running() && pidfd_ < 0) timeout = std::min(timeout, kTick);
  if (n == 0) {
    std::this_thread::sleep_for(timeout);
  } else if (poll(fds, static_cast<nfds_t>(n), static_cast<int>(timeout.count())) > 0) {
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == out_fd_) {
        ReadSome(&out_fd_, &out_);
      } else if (fds[i].fd == err_fd_) {
        ReadSome(&err_fd_, &err_);
      }
    }
  }
  ReapIfDone(/*block=*/false);
}

bool Subprocess::ReadLine(std::string* line, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    const size_t nl = out_.find('\n', line_pos_);
    if (nl != std::string::npos) {
      *line = out_.substr(line_pos_, nl - line_pos_);
      line_pos_ = nl + 1;
      return true;
    }
    if (out_fd_ < 0) {
      if (line_pos_ == out_.size()) return false;
      *line = out_.substr(line_pos_);  // a last line without '\n'
      line_pos_ = out_.size();
      return true;
    }
    if (Clock::now() >= deadline) return false;
    Pump(Left(deadline));
  }
}

bool Subprocess::Signal(int sig) {
  return running() && kill(pid_, sig) == 0;
}

ProcResult Subprocess::Wait(milliseconds timeout) {
  ProcResult r;
  r.pid = pid_;
  if (pid_ <= 0) return r;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (running()) {
    if (Clock::now() >= deadline) {
      KillAndReap();
      r.timed_out = true;
      ADD_FAILURE() << "pid " << pid_ << " did not end within " << timeout.count()
                    << " ms; SIGKILLed it. stderr so far:\n"
                    << err_;
      break;
    }
    Pump(Left(deadline));
  }
  const Clock::time_point drain_until = Clock::now() + kDrainGrace;
  while ((out_fd_ >= 0 || err_fd_ >= 0) && Clock::now() < drain_until) Pump(Left(drain_until));
  CloseFd(&out_fd_);
  CloseFd(&err_fd_);
  r.exited = WIFEXITED(status_);
  r.exit_code = r.exited ? WEXITSTATUS(status_) : -1;
  r.term_signal = WIFSIGNALED(status_) ? WTERMSIG(status_) : 0;
  r.out = out_;
  r.err = err_;
  r.end = end_;
  return r;
}

ProcResult RunProcess(const std::vector<std::string>& argv, milliseconds timeout) {
  Subprocess p(argv);
  return p.Wait(timeout);
}

std::vector<std::string> SegmentsOf(pid_t master_pid) {
  const std::string prefix =
      "shmtrain-" + std::to_string(getuid()) + "-" + std::to_string(master_pid) + "-";
  std::vector<std::string> found;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return found;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
  }
  closedir(d);
  std::sort(found.begin(), found.end());
  return found;
}

bool PidAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;  // gone between the two checks
  // Field 2, the command, may hold spaces and ')': the state follows the last ')'.
  const size_t p = stat.rfind(')');
  if (p == std::string::npos || p + 2 >= stat.size()) return false;
  const char state = stat[p + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

bool WaitPidGone(pid_t pid, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (PidAlive(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds{2});
  }
  return true;
}

namespace {

// A recursive-descent reader of one flat JSON object.
class FlatJsonReader {
 public:
  explicit FlatJsonReader(const std::string& s) : s_(s) {}

  bool Read(std::map<std::string, std::string>* out) {
    SkipSpace();
    if (!Eat('{')) return false;
    SkipSpace();
    if (Eat('}')) return AtEnd();
    for (;;) {
      std::string key, value;
      SkipSpace();
      if (!String(&key)) return false;
      SkipSpace();
      if (!Eat(':')) return false;
      SkipSpace();
      if (!Value(&value)) return false;
      if (out->count(key) != 0) return false;  // duplicate keys are not what we print
      (*out)[key] = value;
      SkipSpace();
      if (Eat(',')) continue;
      if (Eat('}')) return AtEnd();
      return false;
    }
  }

 private:
  bool AtEnd() {
    SkipSpace();
    return i_ == s_.size();
  }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case '"':
          *out += '"';
          break;
        case '\\':
          *out += '\\';
          break;
        case '/':
          *out += '/';
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) return false;
          unsigned v = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            v <<= 4;
            if (h >= '0' && h <= '9')
              v |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f')
              v |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              v |= static_cast<unsigned>(h - 'A' + 10);
            else
              return false;
          }
          if (v >= 0x80) return false;  // only control characters are escaped by the product
          *out += static_cast<char>(v);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  // JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool Number(std::string* out) {
    const size_t start = i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ > d;
    };
    Eat('-');
    if (Eat('0')) {
    } else if (!digits()) {
      return false;
    }
    if (Eat('.') && !digits()) return false;
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (!Eat('+')) Eat('-');
      if (!digits()) return false;
    }
    *out = s_.substr(start, i_ - start);
    return true;
  }
  bool Literal(const char* word, std::string* out) {
    const size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    *out = word;
    return true;
  }
  bool Value(std::string* out) {
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') return String(out);
    if (c == '-' || (c >= '0' && c <= '9')) return Number(out);
    return Literal("null", out) || Literal("true", out) || Literal("false", out);
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<std::map<std::string, std::string>> ParseFlatJson(const std::string& line) {
  std::map<std::string, std::string> fields;
  FlatJsonReader reader(line);
  if (!reader.Read(&fields)) return std::nullopt;
  return fields;
}

std::optional<std::string> JsonField(const std::string& line, const std::string& key) {
  const auto fields = ParseFlatJson(line);
  if (!fields) return std::nullopt;
  const auto it = fields->find(key);
  if (it == fields->end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

TempDir::TempDir()
    : TempDir(std::getenv("TMPDIR") != nullptr && *std::getenv("TMPDIR") != '\0'
                  ? std::getenv("TMPDIR")
                  : "/tmp") {}

TempDir::TempDir(const std::string& base) {
  std::string tmpl = base + "/shmtrain_process_test.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
    return;
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::string path = File(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) ADD_FAILURE() << "cannot write " << path;
  return path;
}

LoopbackListener::LoopbackListener() : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(listen(fd_, 4), 0);
  EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
  port_ = ntohs(a.sin_port);
}

LoopbackListener::~LoopbackListener() {
  close(fd_);
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// What a run printed and wrote.

std::string Clip(const std::string& s, size_t keep) {
  if (s.size() <= 2 * keep) return s;
  return s.substr(0, keep) + "\n... (" + std::to_string(s.size() - 2 * keep) +
         " characters left out) ...\n" + s.substr(s.size() - keep);
}

::testing::AssertionResult ExitedWith(const ProcResult& r, int code) {
  if (r.exited && r.exit_code == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected exit " << code << ", got " << Clip(r.Describe())
         << "\nstdout (last 2000 bytes):\n"
         << r.out.substr(r.out.size() > 2000 ? r.out.size() - 2000 : 0);
}

std::string SummaryOf(const ProcResult& r) {
  std::string found;
  for (const std::string& line : SplitLines(r.out)) {
    if (line.find("\"event\":\"summary\"") != std::string::npos) found = line;
  }
  if (found.empty()) {
    ADD_FAILURE() << "no summary in stdout:\n" << Clip(r.out) << "\nstderr:\n" << Clip(r.err);
  }
  return found;
}

double Num(const std::string& summary, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t p = summary.find(k);
  if (p == std::string::npos) {
    ADD_FAILURE() << key << " missing in summary " << summary;
    return NAN;
  }
  const std::string rest = summary.substr(p + k.size());
  if (rest.rfind("null", 0) == 0) return NAN;
  return std::strtod(rest.c_str(), nullptr);
}

std::vector<std::map<std::string, std::string>> Events(const std::string& out,
                                                       const std::string& kind) {
  std::vector<std::map<std::string, std::string>> found;
  for (const std::string& line : SplitLines(out)) {
    auto ev = ParseFlatJson(line);
    if (ev && ev->count("event") == 1 && ev->at("event") == kind) found.push_back(*ev);
  }
  return found;
}

std::vector<pid_t> StartedWorkers(const std::string& out) {
  std::vector<pid_t> pids;
  for (const auto& e : Events(out, "worker_started")) {
    pids.push_back(static_cast<pid_t>(std::stol(e.at("pid"))));
  }
  return pids;
}

void ExpectCleanedUp(const ProcResult& r) {
  EXPECT_TRUE(SegmentsOf(r.pid).empty()) << "segment left behind";
  for (const pid_t w : StartedWorkers(r.out)) {
    EXPECT_TRUE(WaitPidGone(w, milliseconds(5000))) << "worker " << w << " left behind";
  }
}

::testing::AssertionResult SameBytes(const std::string& got, const std::string& want) {
  if (got.empty()) return ::testing::AssertionFailure() << "the file is empty or missing";
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure()
         << "the bytes differ from the expected ones (" << got.size() << " vs " << want.size()
         << " bytes, first difference at byte " << i << ")";
}

int64_t CheckpointStep(const std::string& path) {
  const std::string b = ReadWholeFile(path);
  int64_t step = -1;
  if (b.size() >= 24) std::memcpy(&step, b.data() + 16, sizeof step);
  return step;
}

// ---------------------------------------------------------------------------------------------
// Loopback TCP and HTTP.

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

namespace {

// "127.0.0.1:PORT" -> a sockaddr; false when it is not an IPv4 address and a port.
bool ParseAddress(const std::string& addr, sockaddr_in* out) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return false;
  const std::string host = addr.substr(0, colon);
  const std::string port = addr.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const int p = std::atoi(port.c_str());
  if (p <= 0 || p > 65535) return false;
  *out = sockaddr_in{};
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(p));
  return inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1;
}

// Waits until fd is ready for `events` or the deadline passes.
bool PollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(Left(deadline).count()));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Decodes a chunked transfer-coded body; false when it is malformed or incomplete.
bool Dechunk(const std::string& in, std::string* out) {
  size_t pos = 0;
  for (;;) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) return false;
    const std::string size_text = in.substr(pos, eol - pos);
    char* end = nullptr;
    const unsigned long size = std::strtoul(size_text.c_str(), &end, 16);
    if (size_text.empty() || (end != nullptr && *end != '\0' && *end != ';')) return false;
    pos = eol + 2;
    if (size == 0) return true;
    if (in.size() < pos + size + 2 || in.compare(pos + size, 2, "\r\n") != 0) return false;
    out->append(in, pos, size);
    pos += size + 2;
  }
}

}  // namespace

int ConnectTcp(const std::string& addr, Clock::time_point deadline, std::string* error) {
  sockaddr_in sa{};
  if (!ParseAddress(addr, &sa)) {
    *error = "not an IPv4 HOST:PORT: '" + addr + "'";
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) {
      *error = "connect " + addr + ": " + std::strerror(errno);
      close(fd);
      return -1;
    }
    if (!PollUntil(fd, POLLOUT, deadline)) {
      *error = "connect " + addr + ": timed out";
      close(fd);
      return -1;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      *error = "connect " + addr + ": " + std::strerror(soerr);
      close(fd);
      return -1;
    }
  }
  return fd;
}

std::optional<HttpResponse> HttpGet(const std::string& addr, const std::string& target,
                                    milliseconds timeout, std::string* error) {
  const Clock::time_point deadline = Clock::now() + timeout;
  Fd fd(ConnectTcp(addr, deadline, error));
  if (fd.get() < 0) return std::nullopt;
  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + addr +
                              "\r\nUser-Agent: shmtrain-metrics-test\r\nAccept: */*\r\n"
                              "Connection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!PollUntil(fd.get(), POLLOUT, deadline)) {
        *error = "GET " + addr + target + ": send timed out";
        return std::nullopt;
      }
    } else {
      *error = "GET " + addr + target + ": send: " + std::strerror(errno);
      return std::nullopt;
    }
  }
  std::string raw;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      raw.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!PollUntil(fd.get(), POLLIN, deadline)) {
        *error = "GET " + addr + target + ": no complete response within " +
                 std::to_string(timeout.count()) + " ms (" + std::to_string(raw.size()) +
                 " bytes received)";
        return std::nullopt;
      }
    } else {
      *error = "GET " + addr + target + ": recv: " + std::strerror(errno);
      return std::nullopt;
    }
  }
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    *error = "GET " + addr + target + ": no header end in " + std::to_string(raw.size()) + " bytes";
    return std::nullopt;
  }
  HttpResponse r;
  const std::string head = raw.substr(0, head_end);
  const size_t first_eol = std::min(head.find("\r\n"), head.size());
  const std::string status_line = head.substr(0, first_eol);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12 || status_line[8] != ' ') {
    *error = "GET " + addr + target + ": bad status line '" + status_line + "'";
    return std::nullopt;
  }
  r.status = std::atoi(status_line.c_str() + 9);
  size_t pos = first_eol;
  while (pos < head.size()) {
    pos += 2;
    const size_t eol = std::min(head.find("\r\n", pos), head.size());
    const std::string line = head.substr(pos, eol - pos);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      *error = "GET " + addr + target + ": bad header line '" + line + "'";
      return std::nullopt;
    }
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    r.headers[Lower(line.substr(0, colon))] = value;
    pos = eol;
  }
  const std::string rest = raw.substr(head_end + 4);
  if (Lower(r.headers["transfer-encoding"]) == "chunked") {
    if (!Dechunk(rest, &r.body)) {
      *error = "GET " + addr + target + ": malformed chunked body";
      return std::nullopt;
    }
  } else if (r.headers.count("content-length") != 0) {
    const size_t want = std::strtoul(r.headers["content-length"].c_str(), nullptr, 10);
    if (rest.size() != want) {
      *error = "GET " + addr + target + ": Content-Length " + std::to_string(want) + " but " +
               std::to_string(rest.size()) + " bytes of body";
      return std::nullopt;
    }
    r.body = rest;
  } else {
    r.body = rest;
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The exposition format.

namespace {

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

}  // namespace

std::string SeriesKey(const std::string& name, const std::map<std::string, std::string>& labels) {
  std::string key = name + "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    key += (first ? "" : ",") + k + "=\"" + v + "\"";
    first = false;
  }
  return key + "}";
}

bool ParseSampleLine(const std::string& line, Sample* s) {
  size_t i = 0;
  while (i < line.size() && IsNameChar(line[i], i == 0)) ++i;
  if (i == 0) return false;
  s->name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t k0 = i;
      while (i < line.size() && IsNameChar(line[i], i == k0) && line[i] != ':') ++i;
      if (i == k0 || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return false;
      const std::string key = line.substr(k0, i - k0);
      i += 2;
      std::string value;
      for (;;) {
        if (i >= line.size()) return false;
        const char c = line[i++];
        if (c == '"') break;
        if (c != '\\') {
          value += c;
          continue;
        }
        if (i >= line.size()) return false;
        const char e = line[i++];
        if (e == 'n') {
          value += '\n';
        } else if (e == '\\' || e == '"') {
          value += e;
        } else {
          return false;
        }
      }
      if (!s->labels.emplace(key, value).second) return false;  // duplicate label
      if (i < line.size() && line[i] == ',') ++i;
    }
  }
  if (i >= line.size() || line[i] != ' ') return false;
  ++i;
  const size_t v_end = std::min(line.find(' ', i), line.size());
  const std::string v = line.substr(i, v_end - i);
  if (v.empty()) return false;
  char* end = nullptr;
  s->value = std::strtod(v.c_str(), &end);  // also reads NaN, +Inf and -Inf
  if (end != v.c_str() + v.size()) return false;
  if (v_end < line.size()) {  // an optional integer timestamp
    const std::string ts = line.substr(v_end + 1);
    if (ts.empty() || !std::all_of(ts.begin() + (ts[0] == '-' ? 1 : 0), ts.end(),
                                   [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Chaos at the pace of this build on this machine.

std::vector<std::string> WithOneDeath(std::vector<std::string> argv) {
  argv.insert(argv.end(), {"--fault-rank", "1", "--fault-step", "10", "--fault-point", "1"});
  return argv;
}

double RecoverySeconds(const std::string& summary) {
  const double s = Num(summary, "recovery_max_s");
  EXPECT_TRUE(s > 0) << "no recovery measured: " << summary;
  return s > 0 ? s : NAN;
}

double MeasureRecovery(const std::function<std::string(int64_t steps)>& summary_of,
                       int64_t steps) {
  std::string summary;
  for (int attempt = 0; attempt < 4; ++attempt, steps *= 4) {
    summary = summary_of(steps);
    if (const double s = Num(summary, "recovery_max_s"); s > 0) return s;
  }
  return RecoverySeconds(summary);
}

int64_t ChaosEveryMs(double wall_s, double per_run, double recovery_s, double recoveries,
                     int64_t floor_ms) {
  const double ms = std::max(1e3 * wall_s / per_run, 1e3 * recoveries * recovery_s);
  return std::max(floor_ms, static_cast<int64_t>(std::ceil(ms)));
}

int64_t StepsForIntervals(int64_t steps, double wall_s, int64_t every_ms, double intervals) {
  const double times = std::ceil(1e-3 * intervals * static_cast<double>(every_ms) / wall_s);
  return steps * static_cast<int64_t>(std::clamp(times, 1.0, 10.0));
}

int KillsAtLeast(double wall_s, int64_t every_ms) {
  return static_cast<int>(std::floor(1e3 * wall_s / (2.0 * static_cast<double>(every_ms))));
}

std::string ChaosOutcome(const std::string& summary) {
  char text[160];
  std::snprintf(text, sizeof text, "%g restarts in %.3f s (recoveries: median %.3f s, max %.3f s)",
                Num(summary, "restarts"), Num(summary, "wall_s"), Num(summary, "recovery_median_s"),
                Num(summary, "recovery_max_s"));
  return text;
}

double Median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---------------------------------------------------------------------------------------------
// Other tools.

ProcResult RunShell(const std::string& script, const std::vector<std::string>& args,
                    milliseconds timeout) {
  std::vector<std::string> argv = {"/bin/sh", "-c", script};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, timeout);
}

ProcResult Shmtrain(std::vector<std::string> args, milliseconds timeout) {
  if (!args.empty() && args[0] == "train") {
    args.insert(args.begin() + 1, {"--no-metrics", "--no-progress", "--log-every", "0"});
  }
  args.insert(args.begin(), SHMTRAIN_BIN);
  const ProcResult r = RunProcess(args, timeout);
  EXPECT_EQ(SegmentsOf(r.pid), std::vector<std::string>()) << "segments left by " << r.pid;
  return r;
}

std::string SparseNpy(const TempDir& dir, const std::string& name, const std::string& descr,
                      const std::string& shape, int64_t data_bytes) {
  std::string d = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  d += std::string(63 - (10 + d.size()) % 64, ' ') + "\n";
  const std::string header = std::string("\x93NUMPY\x01\x00", 8) +
                             static_cast<char>(d.size() & 0xFF) + static_cast<char>(d.size() >> 8) +
                             d;
  const std::string path = dir.Write(name, header);
  std::filesystem::resize_file(path, header.size() + static_cast<uint64_t>(data_bytes));
  return path;
}

bool ToolFound(const char* path) {
  return std::string(path).find('/') != std::string::npos &&
         std::string(path).find("NOTFOUND") == std::string::npos && access(path, X_OK) == 0;
}

}  // namespace shmtrain::test
