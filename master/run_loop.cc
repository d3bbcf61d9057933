#include "master/run_loop.h"

#include <algorithm>
#include <utility>

#include "master/segment_reads.h"
#include "shm/futex.h"

namespace shmtrain::master {

RunLoop::RunLoop(const shm::Segment& seg, std::function<void(int)> sleep,
                 std::vector<RunUnit*> units)
    : seg_(seg), sleep_(std::move(sleep)), units_(std::move(units)) {
  std::erase(units_, nullptr);
}

Status RunLoop::Run() {
  return End(Rounds());
}

Status RunLoop::Rounds() {
  for (RunUnit* u : units_) {
    if (Status s = u->Start(); !s.ok()) return s;
  }
  for (;;) {
    int ms = kPollMs;
    for (const RunUnit* u : units_) ms = std::min(ms, u->PollMs());
    sleep_(ms);
    const RunView view{seg_, Progress(seg_), shm::MonotonicNs()};
    for (RunUnit* u : units_) {
      if (Verdict v = u->Tick(view); v.ends) return std::move(v.status);
    }
  }
}

Status RunLoop::End(Status status) {
  RunEnd end{seg_, std::move(status)};
  for (RunUnit* u : units_) u->Stop(end);
  if (end.status.ok()) {  // nothing runs any more: the state is final
    end.end_step = Progress(seg_);
    end.end_ns = shm::MonotonicNs();
    end.params = ParamsAfter(seg_, end.end_step);
  }
  for (RunUnit* u : units_) u->Collect(end);
  for (RunUnit* u : units_) u->Save(end);
  for (RunUnit* u : units_) u->Report(end);
  return std::move(end.status);
}

}  // namespace shmtrain::master
