#include "master/launch/placement.h"

#include <algorithm>

#include "shmtrain/status.h"

namespace shmtrain::master::launch {

Placement Place(const std::vector<std::string>& names, const std::vector<int>& alive, int first,
                int ranks) {
  // The slots in the order their ranks come: first's, then the others of its machine, then each
  // other machine's, in --hosts order.
  std::vector<int> order = {first};
  std::vector<std::string> machines = {names[first]};
  for (int s : alive) {
    if (s != first && names[s] == names[first]) order.push_back(s);
  }
  for (int s : alive) {
    if (names[s] == names[first] ||
        std::find(machines.begin(), machines.end(), names[s]) != machines.end()) {
      continue;
    }
    machines.push_back(names[s]);
    for (int t : alive) {
      if (names[t] == names[s]) order.push_back(t);
    }
  }
  const int n = static_cast<int>(order.size());
  Placement p;
  std::vector<int> on_machine(machines.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int count = ranks / n + (i < ranks % n ? 1 : 0);
    for (int k = 0; k < count; ++k) p.rank_slot.push_back(order[i]);
    const auto m = std::find(machines.begin(), machines.end(), names[order[i]]) - machines.begin();
    on_machine[m] += count;
  }
  for (size_t m = 0; m < machines.size(); ++m) {
    if (on_machine[m] == 0) continue;
    p.host_flag +=
        (p.host_flag.empty() ? "" : ",") + machines[m] + ":" + std::to_string(on_machine[m]);
  }
  return p;
}

const SavedState* Newest(const std::vector<SavedState>& saved, const std::vector<int>& alive) {
  const SavedState* best = nullptr;
  for (const SavedState& s : saved) {
    if (std::find(alive.begin(), alive.end(), s.slot) == alive.end()) continue;
    if (best == nullptr || s.step > best->step || (s.step == best->step && s.slot < best->slot)) {
      best = &s;
    }
  }
  return best;
}

bool RankEnd::FoundSilent(const RankEnd& other) const {
  return exited && code == kExitHostLost && !other.name.empty() &&
         error.find(other.name) != std::string::npos;
}

bool RankLost(const std::vector<RankEnd>& ranks, size_t r) {
  // Another rank's message: a host's own messages begin with its name.
  const bool silent = std::any_of(ranks.begin(), ranks.end(), [&](const RankEnd& q) {
    return &q != &ranks[r] && q.FoundSilent(ranks[r]);
  });
  return silent || !(ranks[r].exited || ranks[r].ending);
}

std::vector<int> LostSlots(const std::vector<RankEnd>& ranks, const std::vector<int>& rank_slot) {
  std::vector<int> lost;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!RankLost(ranks, r)) continue;
    if (std::find(lost.begin(), lost.end(), rank_slot[r]) == lost.end()) {
      lost.push_back(rank_slot[r]);
    }
  }
  std::sort(lost.begin(), lost.end());
  return lost;
}

}  // namespace shmtrain::master::launch
