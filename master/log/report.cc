#include "master/log/report.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>

namespace shmtrain::master {
namespace {

// One non-blocking connect to ai, waited for at most timeout_ms: the socket, or -1 (errno set).
int ConnectOne(const addrinfo* ai, int timeout_ms) {
  const int fd =
      socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
  if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = ETIMEDOUT;
    if (poll(&p, 1, timeout_ms) == 1) {
      socklen_t len = sizeof err;
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0) return fd;
    errno = err;
  }
  const int saved = errno;
  close(fd);
  errno = saved;
  return -1;
}

}  // namespace

Status LaunchChannel::Connect(const std::string& address, double timeout_s,
                              std::unique_ptr<LaunchChannel>* out) {
  const std::string what = std::string(kLaunchReportVar) + "=" + address;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::Usage(what + ": not HOST:PORT (it is set by shmtrain launch)");
  }
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &list); rc != 0) {
    return Status::Resource(what + ": cannot resolve the launcher's address: " + gai_strerror(rc));
  }
  const int timeout_ms = static_cast<int>(std::ceil(timeout_s * 1000));
  int fd = -1;
  std::string why = "no address";
  for (const addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ConnectOne(ai, timeout_ms);
    if (fd < 0) why = std::strerror(errno);
  }
  freeaddrinfo(list);
  if (fd < 0) return Status::Resource(what + ": cannot reach the launcher: " + why);
  out->reset(new LaunchChannel(fd));
  return Status::Ok();
}

// The listening thread's end when the channel goes first (never in a host master, whose
// channel lasts to its exit): its read ends, and it leaves without taking that for the
// launcher's death.
LaunchChannel::~LaunchChannel() {
  closing_->store(true);
  shutdown(fd_, SHUT_RD);
  close(fd_);
}

namespace {
std::atomic<int> g_launcher_stop{0};  // a LauncherStop
}  // namespace

LauncherStop LauncherStopped() {
  return static_cast<LauncherStop>(g_launcher_stop.load());
}

// A host master whose launcher is gone and that has not ended this long after its stop is
// killed: its stop (the workers stopped, a checkpoint written) takes far less.
constexpr int kHeadlessGraceS = 60;

void LaunchChannel::ListenForStop() {
  // The thread reads a descriptor of its own (the same socket), which it closes itself: the
  // channel's is never closed under it.
  const int own = fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return;  // no stop from the launcher: mpirun's end still stops this process
  std::thread([fd = own, closing = closing_] {
    std::string got;
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno == EINTR) continue;
      char buf[256];
      const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      const bool gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      const bool stop = got.find("\"stop\"") != std::string::npos;
      if (gone || stop) close(fd);
      if (gone && closing->load()) return;  // the channel was destroyed
      // Told to stop, or the launcher is gone: no job goes on headless.
      if (gone || stop) {
        g_launcher_stop.store(
            static_cast<int>(gone ? LauncherStop::kLauncherGone : LauncherStop::kLoss));
        kill(getpid(), SIGTERM);
        if (!gone) return;  // the launcher, alive, has mpirun end what does not stop
        // Nothing else will end a host master that Open MPI holds in its transport.
        std::this_thread::sleep_for(std::chrono::seconds(kHeadlessGraceS));
        kill(getpid(), SIGKILL);
        return;
      }
    }
  }).detach();
}

void LaunchChannel::Send(const std::string& json) {
  const std::string line = json + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) return;
  // Whole or not at all: a part of a line would be read as another event.
  const ssize_t n = send(fd_, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(line.size())) {
    broken_ = true;
    shutdown(fd_, SHUT_WR);
  }
}

}  // namespace shmtrain::master
