#include "master/unit/run_figures.h"

namespace shmtrain::master {

uint64_t CrossHostTotals::TauQuantile(double q) const {
  uint64_t total = 0;
  for (uint64_t c : tau_counts) total += c;
  if (total == 0) return 0;
  uint64_t seen = 0;
  for (size_t t = 0; t < tau_counts.size(); ++t) {
    seen += tau_counts[t];
    if (static_cast<double>(seen) >= q * static_cast<double>(total)) return t;
  }
  return tau_counts.size() - 1;
}

}  // namespace shmtrain::master
