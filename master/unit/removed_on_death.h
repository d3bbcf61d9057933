// Files this process removes should it die: the declaration, for the run loop and the outputs
// that hold one; the handlers and the slots they unlink from are master/run/signals.{h,cc}'s.
#pragma once

#include <string>

namespace shmtrain::master {

// A file this process removes should it die before the owner of this object does (a crash
// signal, an escaped exception; with StopAction::kRemoveAndDie a stop signal too): the
// segment's name, an output's temporary file, its lock file. No destructor runs on those
// paths, so the handlers unlink them (async-signal-safe) from a fixed table of slots. A path
// that does not fit a slot, or a table that is full, is not registered (the next run's
// clean-up, `shmtrain cleanup` or OutputLock, still finds it).
class RemovedOnDeath {
 public:
  RemovedOnDeath() = default;
  explicit RemovedOnDeath(const std::string& path);
  ~RemovedOnDeath() { Forget(); }
  RemovedOnDeath(RemovedOnDeath&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  RemovedOnDeath& operator=(RemovedOnDeath&& o) noexcept;
  RemovedOnDeath(const RemovedOnDeath&) = delete;
  RemovedOnDeath& operator=(const RemovedOnDeath&) = delete;
  // The file is no longer this process's to remove (renamed into place, or removed).
  void Forget();

 private:
  int slot_ = -1;
};

}  // namespace shmtrain::master
