#include "master/run/run_loop.h"

#include <algorithm>
#include <utility>

#include "shm/futex.h"

namespace shmtrain::master {

Status RunLoop::Run(std::function<void(int)> sleep, std::vector<RunUnit*> units) {
  std::erase(units, nullptr);
  return End(Rounds(sleep, units), units);
}

Status RunLoop::Rounds(const std::function<void(int)>& sleep, const std::vector<RunUnit*>& units) {
  for (RunUnit* u : units) {
    if (Status s = u->Start(); !s.ok()) return s;
  }
  for (;;) {
    int ms = kPollMs;
    for (const RunUnit* u : units) ms = std::min(ms, u->PollMs());
    sleep(ms);
    const RunView view{seg_, protocol_.Progress(seg_), shm::MonotonicNs()};
    for (RunUnit* u : units) {
      if (Verdict v = u->Tick(view); v.ends) return std::move(v.status);
    }
  }
}

// The name goes first: under mpirun a host master the job is ending has a grace period of
// about a second before its SIGKILL, and stopping the workers may take that long.
Status RunLoop::End(Status status, const std::vector<RunUnit*>& units) {
  seg_.Unlink();
  name_.Forget();
  RunEnd end{seg_, std::move(status)};
  for (RunUnit* u : units) u->Stop(end);
  if (end.status.ok()) {  // nothing runs any more: the state is final
    end.end_step = protocol_.Progress(seg_);
    end.end_ns = shm::MonotonicNs();
    end.params = protocol_.ParamsAfter(seg_, end.end_step);
  }
  for (RunUnit* u : units) u->Collect(end);
  for (RunUnit* u : units) u->Save(end);
  for (RunUnit* u : units) u->Report(end);
  return std::move(end.status);
}

}  // namespace shmtrain::master
