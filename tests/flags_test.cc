// The flag table (master/flags/flags.h) against what it declares: each name once per command, the
// defaults the options hold, the limits the values are checked against, docs/guide.md's list
// of flags, and, for every flag it marks, that the flag's value reaches the workers' RunConfig
// and the run fingerprint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/decimal.h"
#include "data/format.h"
#include "data/pipeline.h"
#include "master/cli/cli.h"
#include "master/flags/flags.h"
#include "master/files/checkpoint.h"
#include "master/run/run.h"
#include "master/plan/segment_plan.h"
#include "nn/cpu.h"
#include "nn/optimizer.h"
#include "tests/proc_util.h"

namespace shmtrain::master {
namespace {

// Every command's bit, from the table's own mask: a new command is in the list by itself.
const std::vector<uint32_t> kBits = [] {
  std::vector<uint32_t> bits;
  for (uint32_t bit = 1; (bit & kAllCommands) != 0; bit <<= 1) bits.push_back(bit);
  return bits;
}();

TEST(FlagTable, EachNameOnceACommandWithADefaultAndItsHelp) {
  std::set<std::pair<std::string, uint32_t>> seen;
  for (const FlagDef& f : Flags()) {
    SCOPED_TRACE(f.name);
    EXPECT_EQ(f.name.rfind("--", 0), 0u);
    EXPECT_NE(f.commands, 0u);
    EXPECT_EQ(f.commands & ~kAllCommands, 0u);
    for (uint32_t bit : kBits) {
      if ((f.commands & bit) != 0) {
        EXPECT_TRUE(seen.insert({f.name, bit}).second) << "twice for " << CommandName(bit);
      }
    }
    EXPECT_NE(f.deflt.empty(), f.deflt_words.empty()) << "a default value or words, one of them";
    EXPECT_TRUE(f.value.set != nullptr && f.value.show != nullptr);
    if (f.to_workers != nullptr) {
      EXPECT_TRUE(f.workers) << "writes a RunConfig field";
    }
    EXPECT_EQ(f.help.find("{limits}") != std::string::npos && f.limits.text.empty(), false);
    const std::string help = HelpOf(f);
    EXPECT_EQ(help.find('{'), std::string::npos) << help;
  }
}

// A default written as a value is the value a TrainOptions (or Command) holds, and it is
// within the flag's limits: the setter takes it and the field then shows what it showed.
// --format's choices are the data formats' registry (data/format.h), "auto" first.
TEST(FlagTable, FormatChoicesAreTheRegistrysNames) {
  int rows = 0;
  for (const FlagDef& f : Flags()) {
    if (f.name != "--format") continue;
    ++rows;
    std::string want = "auto";
    for (const data::DataFormatDef* d : data::Formats()) want += std::string("|") + d->name;
    EXPECT_EQ(f.arg, want);
  }
  EXPECT_EQ(rows, 1);
}

// --data's rows name every format of the registry, image folders among them.
TEST(FlagTable, DataRowsNameEveryRegisteredFormat) {
  int rows = 0;
  for (const FlagDef& f : Flags()) {
    if (f.name != "--data") continue;
    ++rows;
    const std::string help = HelpOf(f);
    for (const data::DataFormatDef* d : data::Formats()) {
      EXPECT_NE(help.find(d->noun), std::string::npos) << help << " lacks " << d->noun;
    }
  }
  EXPECT_EQ(rows, 3);
}

TEST(FlagTable, DefaultsAreTheOptionsDefaults) {
  for (const FlagDef& f : Flags()) {
    if (f.deflt.empty()) continue;
    SCOPED_TRACE(f.name);
    ASSERT_FALSE(f.arg.empty()) << "a switch has no default value, only words";
    const Command fresh;
    Command parsed;
    const Status s = f.value.set(&parsed, f, f.deflt);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(f.value.show(parsed, f), f.value.show(fresh, f)) << "default " << f.deflt;
  }
}

// Status of setting `value` on a fresh Command.
Status Set(const FlagDef& f, const std::string& value) {
  Command c;
  return f.value.set(&c, f, value);
}

// The limits the table states are the ones the values are checked against: each end is taken,
// and a value past it is refused naming the flag.
TEST(FlagTable, ValuesAreCheckedAgainstTheirLimits) {
  int checked = 0;
  for (const FlagDef& f : Flags()) {
    SCOPED_TRACE(f.name);
    const Limits& l = f.limits;
    std::vector<std::string> in, out;
    switch (l.kind) {
      case Limits::Kind::kNone: continue;
      case Limits::Kind::kInt:
        in = {std::to_string(l.ilo), std::to_string(l.ihi)};
        out = {std::to_string(l.ilo - 1),
               l.ihi == INT64_MAX ? "9223372036854775808" : std::to_string(l.ihi + 1)};
        break;
      case Limits::Kind::kReal:
        in = {ShortestDecimal(l.lo + (l.lo_open ? 1e-3 : 0))};
        out = {ShortestDecimal(l.lo_open ? l.lo : l.lo - 1e-3)};
        if (std::isfinite(l.hi)) {
          in.push_back(ShortestDecimal(l.hi - (l.hi_open ? 1e-3 : 0)));
          out.push_back(ShortestDecimal(l.hi_open ? l.hi : l.hi + 1e-3));
        }
        break;
      case Limits::Kind::kDuration:
        in = {ShortestDecimal(l.lo + (l.lo_open ? 1e-3 : 0)), ShortestDecimal(l.hi)};
        out = {ShortestDecimal(l.hi + 1)};
        if (l.lo > 0 || l.lo_open) out.push_back(ShortestDecimal(l.lo_open ? l.lo : l.lo / 2));
        break;
    }
    for (const std::string& v : in) {
      const Status s = Set(f, v);
      EXPECT_TRUE(s.ok()) << v << ": " << s.message();
    }
    for (const std::string& v : out) {
      const Status s = Set(f, v);
      EXPECT_EQ(s.code(), Status::Code::kUsage) << v;
      EXPECT_EQ(s.message().rfind(f.name + ": ", 0), 0u) << s.message();
    }
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

// ---- docs/guide.md's list of flags: made from the table, so the two never disagree.

constexpr const char* kListStart =
    "<!-- The list below is made from master/flags/flags.cc: tests/flags_test.cc fails when the two "
    "differ; SHMTRAIN_UPDATE_DOCS=1 ctest -R FlagTable.TheGuide writes it anew. -->\n";
constexpr const char* kListEnd = "<!-- end of the flag list -->\n";

std::string Cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string FlagList() {
  std::string s = std::string(kListStart) + "| flag | value | default | limits | commands |\n" +
                  "|---|---|---|---|---|\n";
  for (const FlagDef& f : Flags()) {
    if (*f.group == '\0') continue;  // test hooks
    std::string commands;
    for (uint32_t bit : kBits) {
      if ((f.commands & bit) != 0) commands += (commands.empty() ? "" : ", ") + std::string(CommandName(bit));
    }
    s += "| `" + Cell(f.name) + "` | " + (f.arg.empty() ? "" : "`" + Cell(f.arg) + "`") + " | " +
         Cell(f.Default()) + " | " + Cell(f.limits.text) + " | " + commands + " |\n";
  }
  return s + kListEnd;
}

// SHMTRAIN_UPDATE_DOCS=1 (or SHMTRAIN_UPDATE_README=1, its name while the list was in README.md)
// writes the list anew instead of comparing.
TEST(FlagTable, TheGuideListsEveryFlagAsTheTableDoes) {
  const std::string path = std::string(SHMTRAIN_SOURCE_DIR) + "/docs/guide.md";
  std::string page = test::ReadWholeFile(path);
  const size_t start = page.find(kListStart);
  const size_t end = page.find(kListEnd);
  ASSERT_NE(start, std::string::npos) << "docs/guide.md lacks the flag list's first line";
  ASSERT_NE(end, std::string::npos) << "docs/guide.md lacks the flag list's last line";
  const std::string listed = page.substr(start, end + std::strlen(kListEnd) - start);
  const std::string want = FlagList();
  const bool update = std::getenv("SHMTRAIN_UPDATE_DOCS") != nullptr ||
                      std::getenv("SHMTRAIN_UPDATE_README") != nullptr;
  if (listed != want && update) {
    page.replace(start, listed.size(), want);
    std::ofstream(path, std::ios::binary) << page;
    return;
  }
  const std::vector<std::string> got = test::SplitLines(listed), lines = test::SplitLines(want);
  size_t i = 0;
  while (i < got.size() && i < lines.size() && got[i] == lines[i]) ++i;
  EXPECT_EQ(listed, want) << "docs/guide.md's flag list is not the table's, from line " << i + 1
                          << " of the list on:\n  guide: " << (i < got.size() ? got[i] : "(end)")
                          << "\n  table: " << (i < lines.size() ? lines[i] : "(end)")
                          << "\n(SHMTRAIN_UPDATE_DOCS=1 rewrites it)";
}

// ---- Flags marked `workers` or `trajectory`: a change of the value reaches the segment's
// RunConfig, or the run fingerprint. A run is a train command line on the parabola (example
// parabola for a flag only it takes); `a` gives the flag's base value or none, `b` the
// sample's.

struct Sample {
  std::vector<std::string> context;  // flags both runs take
  std::string value;                 // b's value ("" for a switch)
  std::string base = "";             // a's value; "" = a does not give the flag
  std::vector<std::string> b_context = {};  // flags b takes besides the value
  // The value needs the CPU path's avx512_bf16 (a run without it is refused at its start):
  // the tests that start runs skip it, saying so, on a path without it.
  bool needs_bf16 = false;
};

// Whether x can run on the CPU path in use; prints why not.
bool Runnable(const FlagDef& f, const Sample& x) {
  if (!x.needs_bf16 || nn::UsedCpu().avx512_bf16) return true;
  std::printf("[ skipped ] %s %s: the CPU path in use has no avx512_bf16\n", f.name.c_str(),
              x.value.c_str());
  return false;
}

// A CSV file of one feature and labels 0 and 1, for the run's lifetime.
std::string TwoClasses() {
  static const test::TempDir dir;
  static const std::string path = dir.Write("two.csv", "x,y\n0,0\n1,1\n2,0\n3,1\n");
  return path;
}

// A value for every flag the table marks. A flag marked later fails the tests below until it
// has one here.
const std::map<std::string, Sample>& Samples() {
  const std::vector<std::string> async = {"--mode", "async"};
  static const std::map<std::string, Sample> samples = {
      {"--workers", {{}, "2"}},
      {"--precision", {{}, "bf16", "", {}, true}},
      {"--mode", {{}, "async"}},
      {"--layers", {{}, "1,3,1", "1,5,1"}},
      {"--activation", {{}, "relu"}},
      {"--model", {{}, "linear(5),relu,linear(1)"}},
      {"--input-shape",
       {{"--example", "blobs", "--rows", "40", "--features", "4", "--loss", "xent", "--model",
         "flatten,linear(3)"},
        "1,2,2"}},
      {"--augment",
       {{"--example", "blobs", "--rows", "40", "--features", "16", "--loss", "xent",
         "--input-shape", "1,4,4", "--model", "conv2d(2,3,padding=1),flatten,linear(3)"},
        "crop=1,hflip"}},
      // xent needs an output per class: two classes, 0 and 1, which mse takes as numbers.
      {"--loss", {{"--data", TwoClasses()}, "xent", "mse", {"--layers", "1,5,2"}}},
      {"--task", {{"--data", TwoClasses()}, "classification", "", {"--layers", "1,5,2"}}},
      {"--lr", {{}, "0.05", "0.1"}},
      {"--steps", {{"--lr-schedule", "cosine"}, "20", "10"}},
      {"--epochs", {{"--lr-schedule", "cosine"}, "3"}},
      {"--batch", {{}, "10"}},
      {"--seed", {{}, "7"}},
      {"--optimizer", {{}, "adam"}},
      {"--weight-decay", {{}, "0.01"}},
      {"--clip-norm", {{}, "1"}},
      {"--lr-schedule", {{}, "cosine"}},
      {"--lr-step-every", {{"--lr-schedule", "step"}, "5", "3"}},
      {"--lr-gamma", {{"--lr-schedule", "exponential"}, "0.5", "0.9"}},
      {"--lr-min", {{"--lr-schedule", "cosine"}, "0.01"}},
      {"--lr-milestones", {{"--lr-schedule", "multistep"}, "3,6", "2,6"}},
      {"--warmup-steps", {{}, "2"}},
      {"--momentum", {{}, "0.9"}},
      {"--nesterov", {{"--momentum", "0.9"}, ""}},
      {"--beta1", {{"--optimizer", "adam"}, "0.8"}},
      {"--beta2", {{"--optimizer", "adam"}, "0.99"}},
      {"--eps", {{"--optimizer", "adam"}, "1e-6"}},
      {"--rule", {async, "asgd"}},
      {"--lambda", {async, "0.5"}},
      {"--ms-decay", {async, "0.9"}},
      {"--epsilon", {async, "1e-6"}},
      {"--max-staleness", {async, "4"}},
      {"--eval-every", {{"--val-split", "0.2"}, "3"}},
      {"--early-stop", {{"--val-split", "0.2"}, "2"}},
      {"--log-every", {{}, "5"}},
      {"--barrier-timeout", {{}, "60s"}},
      {"--checkpoint-every", {{"--checkpoint", "unused.ckpt"}, "5"}},
      {"--fault-rank", {{}, "0"}},
      {"--fault-step", {{}, "3"}},
      {"--fault-incarnations", {{}, "2"}},
      {"--fault-point", {{}, "2"}},
      {"--fault-host", {{"--fault-rank", "0"}, "1"}},
  };
  return samples;
}

// What a command line gives the workers and the fingerprint.
struct RunOf {
  shm::RunConfig config{};
  uint64_t fingerprint = 0;
};

// The flags that a sample's run gives unless the sample gives them (or one they exclude).
const std::vector<std::vector<std::string>>& Defaults() {
  static const std::vector<std::vector<std::string>> d = {
      {"--example", "parabola", "--data"}, {"--layers", "1,5,1", "--model"}, {"--lr", "0.1"},
      {"--steps", "10", "--epochs"}};
  return d;
}

std::vector<std::string> Args(const FlagDef& f, const std::vector<std::string>& given) {
  std::vector<std::string> args = {"shmtrain"};
  if ((f.commands & kTrainCmd) == 0) {
    args.insert(args.end(), {"example", "parabola", "--no-metrics"});
    args.insert(args.end(), given.begin(), given.end());
    return args;
  }
  args.insert(args.end(), {"train", "--no-metrics"});
  for (const std::vector<std::string>& d : Defaults()) {
    bool overridden = false;
    for (size_t i = 0; i < d.size(); i += (i == 0 ? 2 : 1)) {
      for (const std::string& g : given) overridden = overridden || g == d[i];
    }
    if (!overridden) args.insert(args.end(), d.begin(), d.begin() + 2);
  }
  args.insert(args.end(), given.begin(), given.end());
  return args;
}

RunOf Run(const std::vector<std::string>& args) {
  std::string line;
  for (const std::string& a : args) line += a + " ";
  SCOPED_TRACE(line);
  RunOf r;
  Command cmd;
  Status s = ParseCommandLine(args, &cmd);
  EXPECT_TRUE(s.ok()) << s.message();
  TrainOptions o = cmd.train;
  RunData rd;
  const RunKind& kind = KindOf(o.mode, o.host_count);
  s = data::PrepareData(o, plan::SizingOf(kind), &rd);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return r;
  const int64_t total = o.TotalSteps(rd.train.rows);
  OptimConfig optim{};
  s = nn::ResolveOptim(o, total, &optim);
  EXPECT_TRUE(s.ok()) << s.message();
  r.config = plan::MakeHeader(kind, o, rd.model, optim, rd.train.rows, rd.train.features, total,
                              plan::EvalEvery(o, rd.train.rows))
                 .config;
  r.fingerprint = RunFingerprint(o, optim, rd.train);
  return r;
}

// The runs without and with the sample's value of f.
std::pair<RunOf, RunOf> Runs(const FlagDef& f, const Sample& x) {
  std::vector<std::string> a = x.context, b = x.context;
  if (!x.base.empty()) a.insert(a.end(), {f.name, x.base});
  b.insert(b.end(), x.b_context.begin(), x.b_context.end());
  b.push_back(f.name);
  if (!f.arg.empty()) b.push_back(x.value);
  return {Run(Args(f, a)), Run(Args(f, b))};
}

bool SameConfig(const shm::RunConfig& a, const shm::RunConfig& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

TEST(FlagTable, WorkerFlagsReachTheRunConfig) {
  for (const FlagDef& f : Flags()) {
    if (!f.workers) continue;
    SCOPED_TRACE(f.name + " of " + CommandName(f.commands & -f.commands));
    const auto it = Samples().find(f.name);
    ASSERT_NE(it, Samples().end()) << "a flag the workers read: give it a sample above";
    if (!Runnable(f, it->second)) continue;
    const auto [a, b] = Runs(f, it->second);
    EXPECT_FALSE(SameConfig(a.config, b.config)) << "the RunConfig does not change with it";
  }
}

TEST(FlagTable, TrajectoryFlagsChangeTheFingerprint) {
  int marked = 0;
  for (const FlagDef& f : Flags()) {
    if (!f.trajectory) continue;
    SCOPED_TRACE(f.name + " of " + CommandName(f.commands & -f.commands));
    ++marked;
    const auto it = Samples().find(f.name);
    ASSERT_NE(it, Samples().end()) << "a flag of the trajectory: give it a sample above";
    if (!Runnable(f, it->second)) continue;
    const auto [a, b] = Runs(f, it->second);
    EXPECT_NE(a.fingerprint, b.fingerprint) << "the fingerprint does not change with it";
  }
  EXPECT_GT(marked, 20);
}

// A resumed run may change what the workers read but not the trajectory (the deadlines, the
// log, the checkpoints, the hooks): the fingerprint stays.
TEST(FlagTable, OtherWorkerFlagsLeaveTheFingerprintAlone) {
  for (const FlagDef& f : Flags()) {
    if (!f.workers || f.trajectory) continue;
    SCOPED_TRACE(f.name);
    const auto it = Samples().find(f.name);
    ASSERT_NE(it, Samples().end());
    const auto [a, b] = Runs(f, it->second);
    EXPECT_EQ(a.fingerprint, b.fingerprint) << "changes the fingerprint: mark it `trajectory`";
  }
}

// Checkpoints carry the fingerprint of the run that wrote them, and a run resumes one only when
// its own fingerprint is the same: these runs' fingerprints, as the builds before them computed
// them, must stay what they were (tests/fixtures/v0.1 holds one such checkpoint). A change to
// OptimConfig, RunFingerprint or the flags' resolution that moves one of these strands every
// checkpoint of that kind of run.
TEST(FlagTable, FingerprintsOfEarlierRunsStay) {
  const std::vector<std::pair<std::vector<std::string>, uint64_t>> runs = {
      {{}, 0x5d8a45df147168b9},
      {{"--momentum", "0.9", "--batch", "10"}, 0x84e3d365f93c407e},
      {{"--optimizer", "adam", "--lr-schedule", "cosine", "--warmup-steps", "3", "--clip-norm",
        "1", "--weight-decay", "0.01"},
       0x69c748e7c51592b6},
      {{"--lr-schedule", "step", "--lr-step-every", "4", "--lr-gamma", "0.5"}, 0x53751f0c1b7ffd1d},
      {{"--lr-schedule", "exponential", "--lr-gamma", "0.9", "--mode", "async"},
       0x82cfcc00802f2927},
      {{"--optimizer", "adamw", "--lr-schedule", "cosine", "--lr-min", "0.01", "--epochs", "3"},
       0x9654c4994af550fc},
  };
  for (const auto& [given, want] : runs) {
    std::vector<std::string> args = {"shmtrain", "train", "--no-metrics", "--example",
                                     "parabola", "--layers", "1,5,1", "--lr", "0.1"};
    args.insert(args.end(), given.begin(), given.end());
    if (std::find(given.begin(), given.end(), "--epochs") == given.end()) {
      args.insert(args.end(), {"--steps", "10"});
    }
    const uint64_t got = master::Run(args).fingerprint;
    EXPECT_EQ(got, want) << "the fingerprint of this run moved";
  }
}

// The snapshot ring (RunConfig::snapshots). With --early-stop it is exactly 2: the stop that
// eval k decides is stop_eval = k + 2 (master/run/validation.h), which every rank reads only after
// its wait for eval_ack >= k + 2 - snapshots, so only a ring of 2 makes that wait end after the
// master's decision on eval k. Otherwise the ring is 2 to 16 long (shm/barrier.h, AckEval).
TEST(SnapshotRing, TwoWithEarlyStoppingElseTwoToSixteen) {
  const std::vector<std::string> args = {"shmtrain", "train",  "--no-metrics", "--example",
                                         "parabola", "--layers", "1,5,1",       "--lr",
                                         "0.1",      "--steps",  "100",         "--val-split",
                                         "0.2",      "--eval-every", "10"};
  std::vector<std::string> stopping = args;
  stopping.insert(stopping.end(), {"--early-stop", "2"});
  EXPECT_EQ(master::Run(stopping).config.snapshots, 2);
  const int64_t ring = master::Run(args).config.snapshots;
  EXPECT_GE(ring, 2);
  EXPECT_LE(ring, 16);
}

}  // namespace
}  // namespace shmtrain::master
