#include "nn/schedule.h"

#include <cmath>
#include <numbers>

namespace shmtrain::nn {

double LearningRate(const OptimConfig& c, int64_t t) {
  if (t < c.warmup_steps) {
    return c.lr * static_cast<double>(t + 1) / static_cast<double>(c.warmup_steps);
  }
  const int64_t s = t - c.warmup_steps;
  switch (static_cast<Schedule>(c.schedule)) {
    case Schedule::kConstant:
      return c.lr;
    case Schedule::kStep:
      return c.lr * std::pow(c.gamma, static_cast<double>(s / c.step_every));
    case Schedule::kExponential:
      return c.lr * std::pow(c.gamma, static_cast<double>(s));
    case Schedule::kCosine: {
      const int64_t span = c.total_steps - c.warmup_steps;
      const double phase = span > 0 ? static_cast<double>(s) / static_cast<double>(span) : 0.0;
      return c.lr_min + (c.lr - c.lr_min) * (1 + std::cos(std::numbers::pi * phase)) / 2;
    }
  }
  return c.lr;
}

std::optional<Schedule> ParseSchedule(std::string_view s) {
  if (s == "constant") return Schedule::kConstant;
  if (s == "step") return Schedule::kStep;
  if (s == "cosine") return Schedule::kCosine;
  if (s == "exponential") return Schedule::kExponential;
  return std::nullopt;
}

const char* ToString(Schedule s) {
  switch (s) {
    case Schedule::kConstant: return "constant";
    case Schedule::kStep: return "step";
    case Schedule::kCosine: return "cosine";
    case Schedule::kExponential: return "exponential";
  }
  return "?";
}

}  // namespace shmtrain::nn
