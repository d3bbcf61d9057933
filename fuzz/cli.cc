// The command line (master/cli/cli.cc, ParseCommandLine, then plan::Validate): the input
// is the arguments after the program's name, one per line (or separated by NUL bytes). Only
// the parse runs: nothing is loaded or started. The flags' value parsers (integers, numbers,
// durations, enums, the lists of --layers, --workers and --lr-milestones, host:port) are
// reached through it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "master/cli/cli.h"
#include "nn/layer.h"
#include "shm/layout.h"

using namespace shmtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"shmtrain"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n' || c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) args.push_back(cur);
  // Many thousands of arguments say nothing that a few dozen do not.
  if (args.size() > 64) return 0;
  master::Command cmd;
  const Status s = master::ParseCommandLine(args, &cmd);
  SHMTRAIN_FUZZ_CHECK(s.ok() || !s.message().empty(), "a refusal without a message");
  if (s.ok() && cmd.kind == master::Command::Kind::kTrain) {
    // The limits include/shmtrain/options.h states, which the segment and the workers rely on.
    const TrainOptions& o = cmd.train;
    SHMTRAIN_FUZZ_CHECK(o.workers >= 1 && o.workers <= shm::kMaxWorkers, "--workers %d accepted", o.workers);
    if (!o.mlp_layers.empty()) {
      SHMTRAIN_FUZZ_CHECK(o.mlp_layers.size() >= 2 && o.mlp_layers.size() <= kMaxMlpSizes,
                          "%zu layers accepted", o.mlp_layers.size());
      for (int l : o.mlp_layers) {
        SHMTRAIN_FUZZ_CHECK(l >= 1 && l <= kMaxWidth, "a layer of %d units accepted", l);
      }
    }
    // multistep's milestones, which OptimConfig holds kMaxMilestones of, 0 after the last.
    SHMTRAIN_FUZZ_CHECK(o.lr_milestones.size() <= static_cast<size_t>(kMaxMilestones),
                        "%zu milestones accepted", o.lr_milestones.size());
    for (size_t i = 0; i < o.lr_milestones.size(); ++i) {
      const int64_t m = o.lr_milestones[i];
      SHMTRAIN_FUZZ_CHECK(m >= 1 && (i == 0 || m > o.lr_milestones[i - 1]),
                          "milestone %lld accepted after %zu others", static_cast<long long>(m), i);
    }
    SHMTRAIN_FUZZ_CHECK(!o.model.layers.empty(), "a model without layers accepted");
    SHMTRAIN_FUZZ_CHECK(o.model.Text().size() < kMaxModelText, "a model text of %zu bytes accepted",
                        o.model.Text().size());
    // What the segment holds of the model must read back as the same model.
    std::vector<LayerSpec> again;
    SHMTRAIN_FUZZ_CHECK(nn::ParseModelText(o.model.Text(), &again).ok() && again == o.model.layers,
                        "the model text '%s' does not read back", o.model.Text().c_str());
  }
  return 0;
}
