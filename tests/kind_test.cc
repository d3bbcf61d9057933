// A kind of run added by a test, one file and one line on each side (master/kinds/kind.h): on
// the master's side this file's ShadowSync, handed to RunTrain as KindOf's table would hand a
// kind --mode names; on the workers' side tests/kind_test_worker.cc, shmtrain-worker's table with
// one line more. ShadowSync is sync under a mode word of its own, with its own words in the
// summary line: what it trains must be sync's, bit for bit, and the run must reach the workers
// only through the table.
#include <unistd.h>

#include <string>
#include <vector>

#include "master/cli/cli.h"
#include "master/files/model_file.h"
#include "master/hosts/hosts.h"
#include "master/kinds/sync.h"
#include "master/run/launcher.h"
#include "master/run/run.h"
#include "tests/proc_util.h"

namespace shmtrain::master {
namespace {

class ShadowSync final : public SyncKind {
 public:
  Mode mode() const override { return static_cast<Mode>(100); }
  const char* name() const override { return "shadow sync"; }
  void AddText(const RunSummary& s, std::string* text) const override {
    SyncKind::AddText(s, text);
    *text += " (shadow sync)";
  }
};

struct Trained {
  Status status;
  std::string out;  // stdout: the loss lines and the summary line
  Model model;
};

// `shmtrain train` of a small sync run, in this process, of `kind` with workers at `worker`.
Trained Train(const RunKind& kind, const std::string& worker, const std::string& save) {
  Command cmd;
  const Status parsed = ParseCommandLine(
      {"shmtrain", "train", "--no-metrics", "--example", "parabola", "--layers", "1,5,1", "--lr",
       "0.1", "--steps", "20", "--workers", "2", "--max-restarts", "1", "--save", save},
      &cmd);
  EXPECT_TRUE(parsed.ok()) << parsed.message();
  std::unique_ptr<Hosts> joined;
  int argc = 1;
  char arg0[] = "shmtrain";
  char* args[] = {arg0, nullptr};
  char** argv = args;
  EXPECT_TRUE(JoinHosts(&argc, &argv, &joined).ok());
  const std::shared_ptr<Hosts> hosts = std::move(joined);
  Trained t;
  Logger log(LogFormat::kText, false);
  ProcessLauncher launcher(worker);
  std::unique_ptr<monitoring::Exporter> exporter;
  testing::internal::CaptureStdout();
  t.status = RunTrain(cmd.train, kind, log, launcher, hosts, &exporter);
  log.Drain([] { return false; });
  t.out = testing::internal::GetCapturedStdout();
  if (t.status.ok()) {
    EXPECT_TRUE(LoadModel(save, &t.model).ok()) << save;
  }
  return t;
}

TEST(KindOfRun, ATestsKindRunsOnBothSidesAndTrainsWhatSyncTrains) {
  test::TempDir dir;
  const Trained sync = Train(KindOf(Mode::kSync, 1), SHMTRAIN_WORKER_BIN, dir.File("sync.bin"));
  ASSERT_TRUE(sync.status.ok()) << sync.status.message();
  const ShadowSync shadow;
  const Trained t = Train(shadow, KIND_TEST_WORKER_BIN, dir.File("shadow.bin"));
  ASSERT_TRUE(t.status.ok()) << t.status.message() << "\n" << t.out;
  EXPECT_NE(t.out.find("done: 20 steps"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find(" (shadow sync), "), std::string::npos) << "the kind's own words\n" << t.out;
  EXPECT_EQ(sync.out.find("shadow"), std::string::npos) << sync.out;
  EXPECT_EQ(t.model.params, sync.model.params) << "the shadow of sync trains what sync trains";
}

// The workers reach a kind only through their table: shmtrain-worker, whose table lacks the
// kind's line, refuses the segment (its mode word is no kind's), and the run cannot end well.
TEST(KindOfRun, WorkersWithoutTheKindsLineRefuseItsRun) {
  test::TempDir dir;
  const ShadowSync shadow;
  const Trained t = Train(shadow, SHMTRAIN_WORKER_BIN, dir.File("shadow.bin"));
  EXPECT_FALSE(t.status.ok()) << t.out;
  EXPECT_NE(t.status.message().find("code 14"), std::string::npos) << t.status.message();
}

}  // namespace
}  // namespace shmtrain::master
