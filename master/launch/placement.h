// Where `shmtrain launch` runs a job's H host masters (master/launch/launch.h): the pure part
// of the launcher, the rules it decides by, with no process or socket in sight.
//
// The job's shape is logical: H host masters (MPI ranks) × P workers, fixed at the first start
// by the length of --hosts. Each entry of --hosts is a slot, the place of one rank at the first
// start (a name given twice is two slots on that machine). A rank whose master ends without a
// word loses its slot; a relaunch runs the same H ranks on the slots left, several to a slot
// where it must, so that every rank's share of each batch and its place in the order of the
// sums stay what they were, and a sync run ends with the bits of a run that lost nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shmtrain::master::launch {

// The ranks of one mpirun job, on the slots it may use.
struct Placement {
  std::vector<int> rank_slot;  // the slot (index into --hosts) of each rank
  std::string host_flag;       // mpirun --host: "a:2,c:1", each machine once, in rank order
};

// H = ranks spread evenly over `alive` (indices into names, at least one), in rank order:
// `first` (an entry of `alive`: the slot holding the state to resume from, which rank 0 reads),
// the other slots of its machine, then each other machine's in --hosts order, the earlier slots
// taking one more while H does not divide evenly. Open MPI fills the machines of --host in
// order, so the ranks of one machine are consecutive.
Placement Place(const std::vector<std::string>& names, const std::vector<int>& alive, int first,
                int ranks);

// What one rank said of its end, as the job reported it (master/log/report.h).
struct RankEnd {
  bool connected = false;  // it said hello
  bool exited = false;     // it said exit: its master ended by itself
  int code = 0;            // that exit's code
  // It outlived the loss: it said its run was ending (an error, its stop checkpoint), or its
  // connection closed only after the launcher had told every host master to stop. mpirun may
  // kill such a one before it says exit (a second from SIGCONT to SIGTERM, then milliseconds),
  // or Open MPI may hold it in its transport once a peer is gone: a survivor all the same.
  bool ending = false;
  std::string name;   // as it named itself ("host 1 (node-b)"), "" until its hello
  std::string error;  // its last error message
  // Whether it ended with exit 6 naming `other` as the host that stopped answering.
  bool FoundSilent(const RankEnd& other) const;
};

// A stop checkpoint a rank wrote, on the slot where it ran.
struct SavedState {
  int slot = -1;
  std::string path;
  int64_t step = -1;
};

// The newest state on a slot of `alive`, or nullptr: the one with the highest step (the
// earliest slot among equals, whose rank came first).
const SavedState* Newest(const std::vector<SavedState>& saved, const std::vector<int>& alive);

// Whether rank r is lost: it neither ended by itself nor said it was ending (it died), or
// another rank found it silent past --host-timeout (stopped, hung: it may say more once mpirun
// has woken it to end it).
bool RankLost(const std::vector<RankEnd>& ranks, size_t r);

// The slots of the lost ranks, each once, in order: a slot is lost with any rank on it.
std::vector<int> LostSlots(const std::vector<RankEnd>& ranks, const std::vector<int>& rank_slot);

}  // namespace shmtrain::master::launch
