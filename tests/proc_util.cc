#include "tests/proc_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

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

milliseconds Left(Clock::time_point deadline) {
  const auto d = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
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
    const char* name = sigabbrev_np(term_signal);
    s = "signal " + std::to_string(term_signal) + " (SIG" + (name ? name : "?") + ")";
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

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/shmtrain_process_test.XXXXXX";
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

}  // namespace shmtrain::test
