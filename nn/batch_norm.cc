#include "nn/batch_norm.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "nn/model.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {

namespace {

std::vector<NormSite> NormSitesOf(const std::vector<LayerSite>& layers) {
  std::vector<NormSite> sites;
  for (const LayerSite& l : layers) {
    if (l.type->stats == nullptr) continue;
    sites.push_back({l.in.c, l.param_offset + 2 * l.in.c, l.stats_offset, l.spec->args[1]});
  }
  return sites;
}

}  // namespace

std::vector<NormSite> NormSites(const ModelSpec& spec) {
  return NormSitesOf(LayerSites(spec));
}

std::vector<NormSite> NormSites(const ModelSpec& spec, const std::vector<Shape>& shapes) {
  return NormSitesOf(LayerSites(spec, shapes));
}

std::string LoneValueLayer(const ResolvedModel& model, int64_t rows) {
  const ModelSpec& spec = model.spec;
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    // The layer alone on its input: its sites are itself or, for a block, its layers.
    const ModelSpec one{in, {spec.layers[i]}, spec.loss};
    for (const LayerSite& l : LayerSites(one, {model.shapes[i]})) {
      if (l.type->stats == nullptr || SatMul(rows, l.in.h * l.in.w) > 1) continue;
      const std::string top = LayerName(spec.layers, i);
      if (l.spec == &one.layers[0]) return top;
      return l.spec->kind + " in " + top;
    }
    in = model.shapes[i];
  }
  return "";
}

namespace {

// out[i] = f(i - first) for the entries i of [first, first + count) inside [lo, hi).
template <class F>
void Within(int64_t first, int64_t count, int64_t lo, int64_t hi, F f) {
  for (int64_t i = std::max(first, lo); i < std::min(first + count, hi); ++i) f(i, i - first);
}

}  // namespace

void AdvanceRunningStats(const std::vector<NormSite>& sites, const double* stats,
                         const float* in, float* out, int64_t lo, int64_t hi) {
  for (const NormSite& s : sites) {
    const int64_t c = s.channels;
    const BatchMoments mom(stats + s.stats, c);
    const double m = s.momentum;
    const double unbias = mom.count > 1 ? mom.count / (mom.count - 1) : 1;
    Within(s.running, c, lo, hi, [&](int64_t i, int64_t k) {
      out[i] = static_cast<float>((1 - m) * static_cast<double>(in[i]) + m * mom.Mean(k));
    });
    Within(s.running + c, c, lo, hi, [&](int64_t i, int64_t k) {
      out[i] = static_cast<float>((1 - m) * static_cast<double>(in[i]) +
                                  m * mom.Variance(k) * unbias);
    });
    Within(s.running + 2 * c, 1, lo, hi, [&](int64_t i, int64_t) { out[i] = in[i] + 1; });
  }
}

void ClearBufferGradients(const std::vector<NormSite>& sites, float* grad, int64_t lo,
                          int64_t hi) {
  for (const NormSite& s : sites) {
    Within(s.running, 2 * s.channels + 1, lo, hi, [&](int64_t i, int64_t) { grad[i] = 0; });
  }
}

RecordedStats::RecordedStats(const ModelSpec& spec)
    : stats_(static_cast<size_t>(StatsCount(spec)), 0.0) {}

void RecordedStats::Sum(int64_t offset, double* sums, int64_t count) {
  std::memcpy(stats_.data() + offset, sums, static_cast<size_t>(count) * sizeof(double));
}

namespace {

class CrossingLog final : public StatsCrossing {
 public:
  void Sum(int64_t offset, double*, int64_t count) override { log.push_back({offset, count}); }
  std::vector<Crossing> log;
};

}  // namespace

std::vector<Crossing> PassCrossings(const ModelSpec& spec) {
  if (StatsCount(spec) == 0) return {};
  CrossingLog crossings;
  PassInfo pass;
  pass.train = true;
  pass.stats = &crossings;
  const size_t n = spec.ParamCount();
  std::vector<float> params(n, 0.0f), grad(n);
  const float none = 0;  // no rows: nothing is read from the inputs and targets
  Workspace<float> ws;
  (void)LossAndGrad<float>(spec, params.data(), &none, &none, 0, grad.data(), ws, pass);
  return std::move(crossings.log);
}

}  // namespace shmtrain::nn
