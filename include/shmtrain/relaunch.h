// A relaunch: what `shmtrain launch` tells the job it starts again on the surviving machines
// after a host master was lost, and the one place its words are read and written.
//
// The launcher sets one environment variable, passed to every host master (mpirun -x):
//   SHMTRAIN_RELAUNCH={"relaunches":2,"reason":"host_died",
//                      "reasons":{"host_died":1,"host_silent":1},
//                      "lost":["host 1 (node-b)"],"step":412}
//   relaunches  integer >= 1: which relaunch of the job this is (1: the first)
//   reason      this relaunch's: "host_died" (a host master's process ended without saying
//               goodbye) or "host_silent" (a host stopped answering past --host-timeout)
//   reasons     object: the count of every relaunch so far by reason, integers >= 0, keys among
//               the reasons above (a reason left out counts 0); they sum to relaunches, and
//               this relaunch's reason counts at least 1
//   lost        non-empty array of non-empty strings: the hosts lost at this relaunch, as the
//               messages name them ("host 1 (node-b)")
//   step        integer >= 0: the step the job continues from (the resumed checkpoint's)
// Other members are ignored (a newer launcher may say more). Unset or empty: not a relaunch.
// The job (host 0) shows it: shmtrain_relaunches_total by reason, the TensorBoard scalar
// hosts/relaunches, a mark on the live page's charts, and one log line (event "relaunched").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/status.h"

namespace shmtrain {

inline constexpr const char* kRelaunchEnv = "SHMTRAIN_RELAUNCH";

// Why a job was relaunched. Label values of shmtrain_relaunches_total, in this order.
enum class RelaunchReason { kHostDied = 0, kHostSilent = 1 };
inline constexpr int kRelaunchReasons = 2;
const char* ToString(RelaunchReason r);

struct Relaunch {
  int64_t relaunches = 0;  // 0: not a relaunch (every other field then as default)
  RelaunchReason reason = RelaunchReason::kHostDied;
  int64_t reasons[kRelaunchReasons] = {};  // by RelaunchReason
  std::vector<std::string> lost;
  int64_t step = 0;

  bool active() const { return relaunches > 0; }
  // "host 1 (node-b) lost" / "host 1 (node-b), host 2 (node-c) lost".
  std::string LostText() const;
  // The live page's mark: "relaunch 2: host 1 (node-b) lost".
  std::string Label() const;
  // The log's line: "relaunch 2 (host_died): host 1 (node-b) lost; continuing from step 412".
  std::string Line() const;
};

// The value of SHMTRAIN_RELAUNCH read into *out; "" gives a Relaunch that is not active. kUsage
// naming SHMTRAIN_RELAUNCH and what is wrong (not JSON, a field missing or of the wrong type or
// out of range, an unknown reason, counts that do not sum); *out is untouched then.
Status ParseRelaunch(std::string_view text, Relaunch* out);
// The environment's SHMTRAIN_RELAUNCH (unset: not a relaunch), as ParseRelaunch.
Status RelaunchFromEnvironment(Relaunch* out);
// The value a launcher sets: the JSON above, which ParseRelaunch reads back to r. r active.
std::string RelaunchJson(const Relaunch& r);

}  // namespace shmtrain
