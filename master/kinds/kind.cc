#include "master/kinds/kind.h"

#include "master/kinds/async.h"
#include "master/kinds/sync.h"

namespace shmtrain::master {

// Each kind's file defines its own (the across-hosts kinds extend the one-host ones).
const RunKind& SyncAcrossHostsKind();
const RunKind& AsyncAcrossHostsKind();

namespace {

const RunKind& SyncOnOneHost() {
  static const SyncKind kind;
  return kind;
}

const RunKind& AsyncOnOneHost() {
  static const AsyncKind kind;
  return kind;
}

// The registry: one line per kind.
struct KindEntry {
  Mode mode;
  bool across_hosts;
  const RunKind& (*kind)();
};
constexpr KindEntry kKinds[] = {
    {Mode::kSync, false, SyncOnOneHost},
    {Mode::kSync, true, SyncAcrossHostsKind},
    {Mode::kAsync, false, AsyncOnOneHost},
    {Mode::kAsync, true, AsyncAcrossHostsKind},
};

}  // namespace

const RunKind& KindOf(Mode mode, int hosts) {
  for (const KindEntry& e : kKinds) {
    if (e.mode == mode && e.across_hosts == (hosts > 1)) return e.kind();
  }
  // Every Mode has both entries (the enum's names table and this one are checked by a test);
  // a mode word no table knows is refused when the segment or the command line is read.
  return SyncOnOneHost();
}

const RunKind& KindOf(const shm::RunConfig& c) {
  return KindOf(static_cast<Mode>(c.mode), static_cast<int>(c.hosts));
}

Status CheckModeFlags(const TrainOptions& o) {
  for (const KindEntry& e : kKinds) {
    if (e.mode == o.mode || e.across_hosts) continue;
    for (const char* f : e.kind().OwnFlags()) {
      if (!o.Given(f)) continue;
      return Status::Usage(std::string(f) + ": applies to " + ToString(e.mode) +
                           " mode only (add --mode " + ToString(e.mode) + "); this run is " +
                           ToString(o.mode));
    }
  }
  return Status::Ok();
}

Status CheckModeOptions(const TrainOptions& o) {
  if (Status s = CheckModeFlags(o); !s.ok()) return s;
  return KindOf(o.mode, 1).CheckOptions(o);
}

Status CheckKindOnHosts(const TrainOptions& o) {
  return KindOf(o.mode, o.host_count).CheckHosts(o);
}

}  // namespace shmtrain::master
