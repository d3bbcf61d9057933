#include "nn/schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/decimal.h"
#include "nn/registry.h"

namespace shmtrain::nn {

// ---- the registry: one line per schedule.
extern const ScheduleDef kConstant;
extern const ScheduleDef kStep;
extern const ScheduleDef kCosine;
extern const ScheduleDef kExponential;
extern const ScheduleDef kMultiStep;

const std::vector<const ScheduleDef*>& Schedules() {
  static const std::vector<const ScheduleDef*> all = {&kConstant, &kStep, &kCosine, &kExponential,
                                                      &kMultiStep};
  return all;
}

namespace {

// "30,80": a list of milestones as --lr-milestones takes it.
std::string MilestoneText(const std::vector<int64_t>& m) {
  std::string s;
  for (int64_t x : m) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// --lr-milestones: strictly increasing, each >= 1, at most kMaxMilestones; a refusal quotes
// the list as typed.
Status CheckMilestones(const TrainOptions& o) {
  const std::vector<int64_t>& m = o.lr_milestones;
  const std::string in = " (in '" + o.As("--lr-milestones", MilestoneText(m)) + "')";
  if (m.empty()) return Status::Usage("--lr-milestones: needs at least one step");
  if (m.size() > static_cast<size_t>(kMaxMilestones)) {
    return Status::Usage("--lr-milestones: at most " + std::to_string(kMaxMilestones) +
                         " milestones, got " + std::to_string(m.size()) + in);
  }
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i] < 1) {
      return Status::Usage("--lr-milestones: each must be >= 1, got " + std::to_string(m[i]) + in);
    }
    if (i > 0 && m[i] <= m[i - 1]) {
      return Status::Usage("--lr-milestones: must be strictly increasing, got " +
                           std::to_string(m[i]) + " after " + std::to_string(m[i - 1]) + in);
    }
  }
  return Status::Ok();
}

}  // namespace

// ---- the flags schedules take, each with its fixed fields.
const std::vector<ScheduleFlag>& ScheduleFlags() {
  static const std::string milestone_limits =
      "steps >= 1, strictly increasing, at most " + std::to_string(kMaxMilestones);
  static const std::vector<ScheduleFlag> all = {
      {.flag = "--lr-step-every",
       .value_name = "N",
       .limits = "N >= 1",
       .given_int = &TrainOptions::lr_step_every,
       .resolved_int = &OptimConfig::step_every,
       .check = [](const TrainOptions& o) {
         if (o.lr_step_every >= 1) return Status::Ok();
         return Status::Usage("--lr-step-every: must be >= 1, got " +
                              std::to_string(o.lr_step_every));
       }},
      {.flag = "--lr-gamma",
       .value_name = "G",
       .limits = "G in (0, 1]",
       .given_real = &TrainOptions::lr_gamma,
       .resolved_real = &OptimConfig::gamma,
       .check = [](const TrainOptions& o) {
         if (o.lr_gamma > 0 && o.lr_gamma <= 1) return Status::Ok();
         return Status::Usage("--lr-gamma: must be in (0, 1], got " + ShortestDecimal(o.lr_gamma));
       }},
      {.flag = "--lr-min",
       .value_name = "X",
       .limits = "X >= 0 and < --lr",
       .given_real = &TrainOptions::lr_min,
       .resolved_real = &OptimConfig::lr_min,
       .check = [](const TrainOptions& o) {
         if (!(o.lr_min >= 0 && std::isfinite(o.lr_min))) {
           return Status::Usage("--lr-min: must be a finite number >= 0, got " +
                                ShortestDecimal(o.lr_min));
         }
         if (!(o.lr_min < o.lr)) {
           return Status::Usage("--lr-min: " + ShortestDecimal(o.lr_min) + " must be below --lr (" +
                                ShortestDecimal(o.lr) + ")");
         }
         return Status::Ok();
       }},
      {.flag = "--lr-milestones",
       .value_name = "M1,M2,...",
       .limits = milestone_limits.c_str(),
       .given_list = &TrainOptions::lr_milestones,
       .resolved_list = &OptimConfig::milestones,
       .check = CheckMilestones},
  };
  return all;
}

namespace {

const ScheduleTakes* TakesOf(const ScheduleDef& d, std::string_view flag) {
  for (const ScheduleTakes& t : d.takes) {
    if (flag == t.flag) return &t;
  }
  return nullptr;
}

// "step, exponential or multistep": the schedules that take `flag`, with how many they are.
std::pair<std::string, int> Taking(std::string_view flag) {
  std::vector<std::string> names;
  for (const ScheduleDef* d : Schedules()) {
    if (TakesOf(*d, flag) != nullptr) names.push_back(d->name);
  }
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return {s, static_cast<int>(names.size())};
}

Status UnknownSchedule(const std::string& name) {
  return Status::Usage("--lr-schedule: unknown value '" + name + "' (known: " +
                       ScheduleNames(", ") + ")");
}

// The value `o` gives for f when d takes it, else d's default; 0 when d does not take f (a
// list: its values, then 0; all 0 when d does not take it).
void ResolveFlag(const ScheduleFlag& f, const ScheduleTakes* use, const TrainOptions& o,
                 OptimConfig* c) {
  if (f.resolved_list != nullptr) {
    const std::vector<int64_t>& v = o.*f.given_list;
    SHMTRAIN_CHECK(v.size() <= static_cast<size_t>(kMaxMilestones), "a list flag's check passed");
    int64_t* out = c->*f.resolved_list;
    for (size_t i = 0; i < static_cast<size_t>(kMaxMilestones); ++i) {
      out[i] = use != nullptr && i < v.size() ? v[i] : 0;
    }
  } else if (f.resolved_int != nullptr) {
    const int64_t v = o.*f.given_int;
    c->*f.resolved_int =
        use == nullptr ? 0 : v != 0 ? v : static_cast<int64_t>(use->default_value);
  } else {
    const double v = o.*f.given_real;
    c->*f.resolved_real = use == nullptr ? 0 : !std::isnan(v) ? v : use->default_value;
  }
}

}  // namespace

const ScheduleDef* FindSchedule(std::string_view name) { return FindByName(Schedules(), name); }
const ScheduleDef* FindSchedule(uint32_t id) { return FindById(Schedules(), id); }
std::string ScheduleNames(const char* sep) { return NamesOf(Schedules(), sep); }

std::string ScheduleHelp() {
  std::string s = "the rate s updates after the warmup, of S (N, G, X, Mi: the flags below): ";
  for (const ScheduleDef* d : Schedules()) {
    s += std::string(d == Schedules().front() ? "" : "; ") + d->name + ": " + d->summary;
  }
  return s + " (default " + TrainOptions().lr_schedule + ")";
}

// "step: ...; exponential: ...; G in (0, 1] (default 0.1 for step; required by exponential)".
std::string ScheduleFlagHelp(const ScheduleFlag& f) {
  std::string meanings;
  for (const ScheduleDef* d : Schedules()) {
    const ScheduleTakes* use = TakesOf(*d, f.flag);
    if (use == nullptr) continue;
    meanings += (meanings.empty() ? "" : "; ") + std::string(d->name) + ": " + use->meaning;
  }
  return meanings + "; " + f.limits + " (" + ScheduleFlagDefaults(f) + ")";
}

// "default 0.1 for step; required by exponential".
std::string ScheduleFlagDefaults(const ScheduleFlag& f) {
  std::string required;
  std::vector<std::pair<double, std::string>> defaults;  // a default and who has it
  for (const ScheduleDef* d : Schedules()) {
    const ScheduleTakes* use = TakesOf(*d, f.flag);
    if (use == nullptr) continue;
    if (use->required) {
      required += (required.empty() ? "" : " or ") + std::string(d->name);
      continue;
    }
    auto same = std::find_if(defaults.begin(), defaults.end(),
                             [&](const auto& g) { return g.first == use->default_value; });
    if (same == defaults.end()) {
      defaults.push_back({use->default_value, d->name});
    } else {
      same->second += std::string(", ") + d->name;
    }
  }
  std::string when;
  for (const auto& [value, names] : defaults) {
    const bool alone = defaults.size() == 1 && required.empty();
    when += (when.empty() ? "default " : "; default ") + ShortestDecimal(value) +
            (alone ? "" : " for " + names);
  }
  if (!required.empty()) when += (when.empty() ? "required by " : "; required by ") + required;
  return when;
}

// Every refusal below is kUsage with "--flag: what is wrong".
Status CheckScheduleOptions(const TrainOptions& o) {
  const ScheduleDef* d = FindSchedule(o.lr_schedule);
  if (d == nullptr) return UnknownSchedule(o.lr_schedule);
  for (const ScheduleFlag& f : ScheduleFlags()) {
    const std::string flag = f.flag;
    const ScheduleTakes* use = TakesOf(*d, flag);
    const bool given = o.Given(flag);
    if (given && use == nullptr) {
      const auto [takers, n] = Taking(flag);
      return Status::Usage(flag + ": applies to --lr-schedule " + takers +
                           (n == 1 ? " only" : "") + "; this run's is " + d->name);
    }
    if (use != nullptr && use->required && !given) {
      return Status::Usage(std::string("--lr-schedule ") + d->name + ": needs " + flag + " " +
                           f.value_name + " (" + use->meaning + ")");
    }
    if (given) {
      if (Status s = f.check(o); !s.ok()) return s;
    }
  }
  if (o.warmup_steps < 0) {
    return Status::Usage("--warmup-steps: must be >= 0, got " + std::to_string(o.warmup_steps));
  }
  return Status::Ok();
}

Status ResolveSchedule(const TrainOptions& o, int64_t total_steps, OptimConfig* c) {
  const ScheduleDef* d = FindSchedule(o.lr_schedule);
  if (d == nullptr) return UnknownSchedule(o.lr_schedule);
  if (o.warmup_steps >= total_steps && o.warmup_steps > 0) {
    return Status::Usage("--warmup-steps: " + std::to_string(o.warmup_steps) +
                         " must be shorter than the run (" + std::to_string(total_steps) +
                         " steps)");
  }
  c->schedule = d->id;
  c->warmup_steps = o.warmup_steps;
  for (const ScheduleFlag& f : ScheduleFlags()) ResolveFlag(f, TakesOf(*d, f.flag), o, c);
  c->total_steps = total_steps;
  return Status::Ok();
}

double LearningRate(const OptimConfig& c, int64_t t) {
  if (t < c.warmup_steps) {
    return c.lr * static_cast<double>(t + 1) / static_cast<double>(c.warmup_steps);
  }
  const ScheduleDef* d = FindSchedule(c.schedule);
  return d != nullptr ? d->rate(c, t - c.warmup_steps) : c.lr;
}

double LearningRateAfter(const OptimConfig& c, int64_t done) {
  return LearningRate(c, std::min(done, std::max<int64_t>(c.total_steps - 1, 0)));
}

bool RateVaries(const OptimConfig& c) {
  return c.warmup_steps > 0 || c.schedule != kConstant.id;
}

bool SpansRun(const OptimConfig& c) {
  const ScheduleDef* d = FindSchedule(c.schedule);
  return d != nullptr && d->spans_run;
}

std::string DescribeSchedule(const OptimConfig& c) {
  const ScheduleDef* d = FindSchedule(c.schedule);
  const std::string words =
      d != nullptr ? d->describe(c) : "unknown schedule " + std::to_string(c.schedule);
  std::string s = words.empty() ? "" : ", " + words;
  if (c.warmup_steps > 0) s += ", warmup " + std::to_string(c.warmup_steps) + " steps";
  return s;
}

}  // namespace shmtrain::nn
