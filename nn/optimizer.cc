#include "nn/optimizer.h"

#include <cmath>
#include <cstring>

#include "core/decimal.h"
#include "nn/registry.h"
#include "nn/schedule.h"

namespace shmtrain::nn {

// ---- the registry: one line per optimizer.
extern const OptimizerDef kSgd;
extern const OptimizerDef kAdam;
extern const OptimizerDef kAdamW;

const std::vector<const OptimizerDef*>& Optimizers() {
  static const std::vector<const OptimizerDef*> all = {&kSgd, &kAdam, &kAdamW};
  return all;
}

namespace {

Status Bad(const std::string& flag, const std::string& what) {
  return Status::Usage(flag + ": " + what);
}

const HyperParam* FindParam(const OptimizerDef& d, std::string_view flag) {
  for (const HyperParam& p : d.params) {
    if (flag == p.flag) return &p;
  }
  return nullptr;
}

bool InRange(const HyperParam& p, double x) {
  if (!std::isfinite(x)) return false;
  const bool above = p.lo_open ? x > p.lo : x >= p.lo;
  const bool below = p.hi_open ? x < p.hi : x <= p.hi;
  return above && below;
}

std::string RangeText(const HyperParam& p) {
  if (std::isinf(p.hi)) {
    return std::string("a finite number ") + (p.lo_open ? "> " : ">= ") + ShortestDecimal(p.lo);
  }
  return std::string("in ") + (p.lo_open ? "(" : "[") + ShortestDecimal(p.lo) + ", " +
         ShortestDecimal(p.hi) + (p.hi_open ? ")" : "]");
}

// The optimizer's hyper-parameters: given values, else defaults, in declaration order.
void ResolveHyper(const OptimizerDef& d, const TrainOptions& o, double* hyper) {
  for (int i = 0; i < kMaxHyper; ++i) hyper[i] = 0;
  for (size_t i = 0; i < d.params.size(); ++i) {
    const auto it = o.hyper.find(d.params[i].flag);
    hyper[i] = it != o.hyper.end() ? it->second : d.params[i].default_value;
  }
}

Status CheckHyper(const OptimizerDef& d, const TrainOptions& o) {
  for (const auto& [flag, value] : o.hyper) {
    const HyperParam* p = FindParam(d, flag);
    if (p == nullptr) {
      return Bad(flag, "applies to --optimizer " + OptimizersWith(flag) + ", not " + d.name);
    }
    if (!p->switch_() && !InRange(*p, value)) {
      return Bad(flag, "must be " + RangeText(*p) + ", got " + ShortestDecimal(value));
    }
  }
  double hyper[kMaxHyper];
  ResolveHyper(d, o, hyper);
  if (d.check != nullptr) {
    if (Status s = d.check(hyper); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

const OptimizerDef* FindOptimizer(std::string_view name) {
  return FindByName(Optimizers(), name);
}
const OptimizerDef* FindOptimizer(uint32_t id) { return FindById(Optimizers(), id); }
std::string OptimizerNames() { return NamesOf(Optimizers(), ", "); }

std::vector<HyperParam> AllHyperParams() {
  std::vector<HyperParam> all;
  for (const OptimizerDef* d : Optimizers()) {
    for (const HyperParam& p : d->params) {
      bool seen = false;
      for (const HyperParam& q : all) seen = seen || std::strcmp(q.flag, p.flag) == 0;
      if (!seen) all.push_back(p);
    }
  }
  return all;
}

std::string OptimizersWith(std::string_view flag) {
  std::string s;
  for (const OptimizerDef* d : Optimizers()) {
    if (FindParam(*d, flag)) s += (s.empty() ? "" : " or ") + std::string(d->name);
  }
  return s;
}

Status CheckOptimizerOptions(const TrainOptions& o) {
  const OptimizerDef* d = FindOptimizer(o.optimizer);
  if (d == nullptr) {
    return Bad("--optimizer", "unknown '" + o.optimizer + "' (known: " + OptimizerNames() + ")");
  }
  if (Status s = CheckHyper(*d, o); !s.ok()) return s;
  if (!std::isnan(o.weight_decay) && !(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) {
    return Bad("--weight-decay",
               "must be a finite number >= 0, got " + ShortestDecimal(o.weight_decay));
  }
  if ((o.Given("--clip-norm") || o.clip_norm != 0) &&
      !(o.clip_norm > 0 && std::isfinite(o.clip_norm))) {
    return Bad("--clip-norm", "must be a finite number > 0, got " + ShortestDecimal(o.clip_norm));
  }
  return CheckScheduleOptions(o);
}

std::string StateSource(const TrainOptions& o) {
  const OptimizerDef* d = FindOptimizer(o.optimizer);
  if (d == nullptr) return "";
  double hyper[kMaxHyper];
  ResolveHyper(*d, o, hyper);
  if (d->states(hyper) == 0) return "";
  // The optimizer, when it keeps state with its defaults; else the hyper-parameter given
  // (sgd: --momentum).
  double defaults[kMaxHyper] = {};
  for (size_t i = 0; i < d->params.size(); ++i) defaults[i] = d->params[i].default_value;
  return d->states(defaults) > 0 || o.hyper.empty() ? std::string("--optimizer ") + d->name
                                                    : o.hyper.begin()->first;
}

Status ResolveOptim(const TrainOptions& o, int64_t total_steps, OptimConfig* out) {
  const OptimizerDef* d = FindOptimizer(o.optimizer);
  if (d == nullptr) return Bad("--optimizer", "unknown '" + o.optimizer + "'");
  OptimConfig c;
  std::memset(&c, 0, sizeof c);  // padding and unused entries are hashed: zero them
  c.optimizer = d->id;
  ResolveHyper(*d, o, c.hyper);
  c.num_states = static_cast<uint32_t>(d->states(c.hyper));
  c.lr = o.lr;
  c.weight_decay = std::isnan(o.weight_decay) ? d->default_weight_decay : o.weight_decay;
  c.clip_norm = o.clip_norm;
  if (Status s = ResolveSchedule(o, total_steps, &c); !s.ok()) return s;
  *out = c;
  return Status::Ok();
}

std::string Describe(const OptimConfig& c) {
  const OptimizerDef* d = FindOptimizer(c.optimizer);
  if (d == nullptr) return "unknown optimizer " + std::to_string(c.optimizer);
  std::string s = d->name;
  std::string hp;
  for (size_t i = 0; i < d->params.size(); ++i) {
    const HyperParam& p = d->params[i];
    if (p.switch_() && c.hyper[i] == 0) continue;
    hp += (hp.empty() ? "" : ", ") + std::string(p.flag + 2);
    if (!p.switch_()) hp += " " + ShortestDecimal(c.hyper[i]);
  }
  hp += (hp.empty() ? "" : ", ") + std::string("weight decay ") + ShortestDecimal(c.weight_decay);
  s += " (" + hp + "), lr " + ShortestDecimal(c.lr);
  s += DescribeSchedule(c);
  if (c.clip_norm > 0) s += ", clip-norm " + ShortestDecimal(c.clip_norm);
  return s;
}

// Eight independent partial sums: one running sum is a chain of dependent additions that GCC
// may not reorder (no -ffast-math), which made this pass cost a fifth of an async update of a
// million parameters; the lanes vectorise.
double ScaleAndSquaredNorm(float* g, int64_t n, float inv) {
  constexpr int kLanes = 8;
  double part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float x = g[i + k] * inv;
      g[i + k] = x;
      part[k] += static_cast<double>(x) * x;
    }
  }
  double sq = 0;
  for (; i < n; ++i) {
    g[i] *= inv;
    sq += static_cast<double>(g[i]) * g[i];
  }
  for (const double p : part) sq += p;
  return sq;
}

void Update(const OptimConfig& c, const UpdateArgs& a) {
  FindOptimizer(c.optimizer)->update(c.hyper, a);
}

}  // namespace shmtrain::nn
