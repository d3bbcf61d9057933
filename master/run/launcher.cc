#include "master/run/launcher.h"

#include <unistd.h>

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/io.hpp>
#include <climits>
#include <system_error>

namespace bp = boost::process;

namespace shmtrain::master {

Status ProcessLauncher::Spawn(const std::string& segment, int rank, uint32_t incarnation,
                              pid_t* pid) {
  if (access(path_.c_str(), X_OK) != 0) {
    return Status::Resource("worker executable " + path_ + " is missing or not executable");
  }
  std::error_code ec;
  // Each worker leads a process group of its own: a signal sent to the master's group (a
  // terminal's Ctrl-C, mpirun's orted ending a job) reaches the master alone, which stops its
  // workers itself (abort word, then SIGKILL) instead of finding them dead and replacing them.
  bp::child c(bp::exe = path_,
              bp::args = {segment, std::to_string(rank), std::to_string(incarnation)},
              bp::std_in.close(), bp::extend::on_exec_setup = [](auto&) { setpgid(0, 0); }, ec);
  if (ec) {
    return Status::Resource("cannot start worker " + std::to_string(rank) + " (" + path_ +
                            "): " + ec.message());
  }
  *pid = c.id();
  // From here on the master owns the pid: it reaps the child itself (pidfd + waitpid), so
  // Boost must neither wait for it nor terminate it when `c` goes out of scope.
  c.detach();
  return Status::Ok();
}

std::string DefaultWorkerPath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "shmtrain-worker";
  std::string self(buf, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  return self.substr(0, slash + 1) + "shmtrain-worker";
}

}  // namespace shmtrain::master
