// The learning-rate schedule seam: one unit per schedule, a registry, and the rate of an update.
//
// Rates are pure functions of the update index, so a redone sync phase, a resumed run and the
// master's progress line all see the same rate for the same step. The definitions and names are
// PyTorch's (torch.optim.lr_scheduler). t is the 0-based index of the update being applied;
// W = warmup_steps, T = total_steps:
//   t < W:  lr_t = lr * (t + 1) / W      (PyTorch: LinearLR(start_factor=1/W, total_iters=W-1))
//   else    lr_t = the schedule's rate at s = t - W of the remaining S = T - W updates, e.g.
//           step: lr * gamma^floor(s / step_every) (StepLR). Each schedule's definition, with
//           its PyTorch class, opens its file in nn/schedules/. Every schedule counts s from
//           the end of the warmup, as PyTorch's SequentialLR([LinearLR, ...], [W]) does.
//
// A schedule is a ScheduleDef: its id (stored), its name, the flags it takes with what each
// means to it and its default (or that it is required), whether its rate depends on the run's
// length, its rate and its words for logs. The CLI's --lr-schedule names and help, the checks
// of the schedule flags, the resolution into OptimConfig and Describe all come from the
// registry. Adding one: its file in nn/schedules/ (CMakeLists.txt lists it), one line in the
// registry (nn/schedule.cc), its rates against PyTorch's in tests, its row in docs/guide.md's
// table. tests/nn_test.cc and tests/cli_test.cc check every registered schedule (names, ids,
// the rate after the warmup, refusals without a required flag, the run's length) without a
// test of its own.
//
// The values a schedule takes are the ScheduleFlags (--lr-step-every, --lr-gamma, --lr-min,
// --lr-milestones), each with a fixed home in TrainOptions and in OptimConfig: a schedule
// reuses them. A new flag is a new OptimConfig field, which changes the segment layout (bump
// shm::kAbiVersion); append it, zero for every schedule that does not take it, and hash it in
// RunFingerprint only when it is set, so that existing checkpoints keep their fingerprints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shmtrain/optim_config.h"
#include "shmtrain/options.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {

// A flag that schedules take, declared once: its limits and where its value lives. An integer
// flag is a number of updates (>= 1; 0 in TrainOptions when not given), a real one a float32
// value (NaN in TrainOptions when not given), a list one numbers of updates separated by commas
// (empty in TrainOptions when not given; in OptimConfig, 0 after the last). One of the three
// pairs of fields is set.
struct ScheduleFlag {
  const char* flag;        // "--lr-gamma"
  const char* value_name;  // "G"
  const char* limits;      // "G in (0, 1]": what check enforces, for --help
  int64_t TrainOptions::*given_int = nullptr;
  int64_t OptimConfig::*resolved_int = nullptr;
  double TrainOptions::*given_real = nullptr;
  double OptimConfig::*resolved_real = nullptr;
  std::vector<int64_t> TrainOptions::*given_list = nullptr;
  int64_t (OptimConfig::*resolved_list)[kMaxMilestones] = nullptr;
  // Ok when the value given is within the limits, else kUsage naming the flag and what is
  // wrong ("--lr-gamma: must be in (0, 1], got 2"), as OptimizerDef::check does.
  Status (*check)(const TrainOptions& o) = nullptr;
};

// What one of the ScheduleFlags is to a schedule that takes it.
struct ScheduleTakes {
  const char* flag;      // "--lr-gamma"
  const char* meaning;   // "the factor applied every step": --help and the refusal without it
  bool required;         // refused without it
  double default_value;  // when not required and not given
};

struct ScheduleDef {
  uint32_t id;          // OptimConfig::schedule, stored in segments, checkpoints and
                        // fingerprints: append only, never reused
  const char* name;     // --lr-schedule NAME
  const char* summary;  // the rate at s of S, with PyTorch's name: "lr*G^s (ExponentialLR)"
  std::vector<ScheduleTakes> takes;  // the ScheduleFlags it takes; any other is refused
  // The rate depends on the run's length T: a checkpoint then resumes only with the same T
  // (master/files/checkpoint.cc keeps T in the fingerprint of such runs alone).
  bool spans_run;
  // The rate s >= 0 updates after the warmup (c.total_steps - c.warmup_steps of them).
  double (*rate)(const OptimConfig& c, int64_t s);
  // "step schedule (x0.1 every 100)", for Describe; "" when the rate alone says it all.
  std::string (*describe)(const OptimConfig& c);
};

// Every schedule, in --help order.
const std::vector<const ScheduleDef*>& Schedules();
const ScheduleDef* FindSchedule(std::string_view name);  // nullptr when unknown
const ScheduleDef* FindSchedule(uint32_t id);
// "constant, step, cosine, exponential, multistep" (with sep ", ").
std::string ScheduleNames(const char* sep);
// Every flag that schedules take, in --help order.
const std::vector<ScheduleFlag>& ScheduleFlags();
// --help of --lr-schedule and of each ScheduleFlag: what it is to each schedule that takes it,
// its limits, defaults and which schedules require it.
std::string ScheduleHelp();
std::string ScheduleFlagHelp(const ScheduleFlag& f);
// The defaults part of ScheduleFlagHelp: "default 0.1 for step; required by exponential".
std::string ScheduleFlagDefaults(const ScheduleFlag& f);

// The command-line checks of the schedule: a known name, each ScheduleFlag given only to a
// schedule that takes it, given when required, within its limits; the warmup >= 0. kUsage
// with "--flag: what is wrong".
Status CheckScheduleOptions(const TrainOptions& o);
// Fills c's schedule fields for a run of total_steps updates: the id, the warmup, each flag's
// value given or defaulted (0 when the schedule does not take it) and total_steps.
Status ResolveSchedule(const TrainOptions& o, int64_t total_steps, OptimConfig* c);

// lr_t: the rate of update t (0-based), warmup included.
double LearningRate(const OptimConfig& c, int64_t t);
// The rate a run shows after `done` updates (progress line, metrics): the update in progress,
// or the last one once all are done.
double LearningRateAfter(const OptimConfig& c, int64_t done);
// Whether the rate changes over the run: a warmup, or a schedule other than constant.
bool RateVaries(const OptimConfig& c);
// Whether the rate depends on the run's length (ScheduleDef::spans_run).
bool SpansRun(const OptimConfig& c);
// ", step schedule (x0.1 every 100)", ", warmup 10 steps": Describe's part; "" for none.
std::string DescribeSchedule(const OptimConfig& c);

}  // namespace shmtrain::nn
