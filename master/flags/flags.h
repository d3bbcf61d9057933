// Every flag of every command, declared once (master/flags/flags.cc): its name, value, default,
// limits, help, the field it fills, the commands that take it, and whether the workers or the
// run fingerprint depend on it.
//
// From the table come: the CLI11 wiring and --help (master/cli/cli.cc); the check of each value
// against its limits, made as the command line is read, their one home (plan::Validate
// checks the fields against each other, never one field's limits); the segment's copy of what
// the workers read (to_workers, applied by MakeHeader in master/plan/segment_plan.cc); the list of
// flags in docs/guide.md, which tests/flags_test.cc compares with the table (and rewrites when
// SHMTRAIN_UPDATE_DOCS=1).
//
// Adding a flag: its field in TrainOptions, its row here, and its test; nothing else names it.
// A flag the workers read says `workers` and writes its RunConfig field in `to_workers`
// (shm/layout.h: the field, an ABI bump, tests/layout_test.cc); a flag that decides the
// trajectory says `trajectory` (master/files/checkpoint.cc hashes it). tests/flags_test.cc proves,
// for every flag so marked, that a change of its value changes the segment's RunConfig or the
// fingerprint, and asks for a sample value of a marked flag it does not know yet.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "master/flags/command.h"
#include "shm/layout.h"

namespace shmtrain::master {

// The commands a flag belongs to, one bit each.
enum CommandBits : uint32_t {
  kTrainCmd = 1u << 0,
  kExampleCmd = 1u << 1,  // example parabola
  kSimulateCmd = 1u << 2,
  kEvalCmd = 1u << 3,
  kPredictCmd = 1u << 4,
  kExportCmd = 1u << 5,
  kCleanupCmd = 1u << 6,
  kLaunchCmd = 1u << 7,
};
// "train", "example parabola", ...: the command of one bit.
const char* CommandName(uint32_t bit);
inline constexpr uint32_t kAllCommands = (1u << 8) - 1;

// The largest integer a flag of counts takes (steps, batch, ...): no limit a run can reach,
// with room to add two of them without overflow.
inline constexpr int64_t kUnbounded = INT64_MAX / 4;

// A flag's limits, checked as its value is read. `text` is how --help ("{limits}") and
// docs/guide.md state them.
struct Limits {
  enum class Kind {
    kNone,      // none, or checked by a registry (nn/optimizer.h, nn/schedule.h) or by Validate
    kInt,       // ilo..ihi: "--workers: 0 is out of range (1..256)"
    kReal,      // lo..hi, each end open or closed: "--lr: must be a finite number > 0, got 0"
    kDuration,  // seconds: "--barrier-timeout: must be between 100ms and 86400s, got 0.05s"
  };
  Kind kind = Kind::kNone;
  int64_t ilo = 0, ihi = 0;
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  std::string text = "";     // "1..256", ">= 1", "> 0", "[0, 1)", "100ms..86400s"
  std::string refusal = "";  // kDuration: what an outside value is told, when not "must be between"
};
Limits IntRange(int64_t lo, int64_t hi);  // "lo..hi"; ">= lo" when hi is kUnbounded
// lo..hi with open or closed ends; hi = infinity: "> lo" or ">= lo".
Limits RealRange(double lo, double hi, bool lo_open, bool hi_open);
Limits SecondsRange(double lo, double hi);  // "100ms..86400s"
Limits Stated(std::string text);             // kNone: checked elsewhere, stated here

struct FlagDef;
// Parses `value` into the flag's field of *c and checks it against f.limits: kUsage naming the
// flag and quoting the value otherwise.
using FlagSetter = std::function<Status(Command* c, const FlagDef& f, std::string_view value)>;
// The value the flag's field holds, as the flag would give it ("" when none): how the tests
// compare a default with the table's.
using FlagShow = std::function<std::string(const Command& c, const FlagDef& f)>;
struct FlagValue {
  FlagSetter set;
  FlagShow show;
};

struct FlagDef {
  std::string name = "";  // "--workers"
  std::string arg = "";   // "P", "sync|async"; "" for a switch
  // --help's text; "{limits}" stands for limits.text and "{default}" for the default.
  std::string help = "";
  // The default: a value the flag takes (the tests check that it is the default TrainOptions
  // holds), or, when the default is no value, words ("required", "detected from the first
  // lines"). One of the two is set.
  std::string deflt = "";
  std::string deflt_words = "";
  Limits limits = {};
  FlagValue value = {};
  const char* group = "";  // the --help heading it is listed under; "" hides it (test hooks)
  uint32_t commands = 0;   // CommandBits
  // Its value (or what it resolves to: the model, the optimizer, the run's length, validation)
  // reaches the workers in the segment's RunConfig.
  bool workers = false;
  // Writes its RunConfig field (MakeHeader calls it); nullptr when the flag reaches the
  // workers through what it resolves to, which MakeHeader writes itself.
  void (*to_workers)(const TrainOptions& o, shm::RunConfig* c) = nullptr;
  // It decides the trajectory from a checkpoint on: the run fingerprint hashes it
  // (master/files/checkpoint.cc), so a checkpoint resumes only with the same value. Flags that
  // choose the training rows reach the fingerprint through the rows' bytes instead.
  bool trajectory = false;

  const std::string& Default() const { return deflt.empty() ? deflt_words : deflt; }
};

// Every flag, each command's in its --help order. A name may have several rows for different
// commands (--seed of train, of example parabola and of eval), never two for one command.
const std::vector<FlagDef>& Flags();
// f.help with its limits and default filled in.
std::string HelpOf(const FlagDef& f);

}  // namespace shmtrain::master
