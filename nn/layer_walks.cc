// The walks over a model's parameters and statistics (nn/layer.h): each block's and layer's
// size, and every layer that computes, in the flat vector's order.
#include <algorithm>
#include <utility>
#include <vector>

#include "nn/layer.h"

namespace shmtrain::nn {

int64_t ParamBlock::Size() const {
  int64_t n = 1;
  for (int64_t d : torch_shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

int64_t ParamSize(const LayerType& t, const LayerSpec& spec, Shape in) {
  if (t.params == nullptr) return 0;
  int64_t n = 0;
  for (const ParamBlock& b : t.params(spec, in)) {
    const int64_t size = b.Size();
    if (size < 0 || __builtin_add_overflow(n, size, &n)) return -1;
  }
  return n;
}

// The permutation of the layer's parameters (torch_order; none: the identity), applied one way
// or the other.
namespace {
template <bool kToTorch>
void Permute(const LayerType& t, const LayerSpec& spec, Shape in, const float* src, float* dst) {
  const int64_t size = ParamSize(t, spec, in);
  if (t.torch_order == nullptr) {
    std::copy(src, src + size, dst);
    return;
  }
  std::vector<int64_t> from(static_cast<size_t>(size));
  t.torch_order(spec, in, from.data());
  for (int64_t e = 0; e < size; ++e) {
    if constexpr (kToTorch) {
      dst[e] = src[from[e]];
    } else {
      dst[from[e]] = src[e];
    }
  }
}
}  // namespace

void ToTorch(const LayerType& t, const LayerSpec& spec, Shape in, const float* ours, float* torch) {
  Permute<true>(t, spec, in, ours, torch);
}

void FromTorch(const LayerType& t, const LayerSpec& spec, Shape in, const float* torch,
               float* ours) {
  Permute<false>(t, spec, in, torch, ours);
}

int64_t StatsSize(const LayerType& t, const LayerSpec& spec, Shape in) {
  return t.stats == nullptr ? 0 : t.stats(spec, in);
}

namespace {

// Layer `l` on `in`, or in place of a block the layers it holds, nested alike.
void AddSites(const LayerSpec& l, Shape in, Shape out, int64_t* param, int64_t* stats,
              std::vector<LayerSite>* sites) {
  const LayerType* t = FindLayerType(l.kind);
  if (t->spatial == Spatial::kBlock) {
    for (const BlockMember& m : BlockMembers(l, in)) {
      AddSites(*m.spec, m.in, m.out, param, stats, sites);
    }
    return;
  }
  sites->push_back({&l, t, in, out, *param, *stats});
  *param += ParamSize(*t, l, in);
  *stats += StatsSize(*t, l, in);
}

}  // namespace

std::vector<LayerSite> LayerSites(const ModelSpec& spec) {
  std::vector<Shape> shapes;
  const Status s = ResolveShapes(spec.input, spec.layers, &shapes);
  SHMTRAIN_CHECK(s.ok(), "a model that does not resolve: " + s.message());
  return LayerSites(spec, shapes);
}

std::vector<LayerSite> LayerSites(const ModelSpec& spec, const std::vector<Shape>& shapes) {
  std::vector<LayerSite> sites;
  Shape in = spec.input;
  int64_t param = 0, stats = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    AddSites(spec.layers[i], in, shapes[i], &param, &stats, &sites);
    in = shapes[i];
  }
  return sites;
}

Status ResolveModel(const ModelSpec& spec, bool flat_input, ResolvedModel* out) {
  ResolvedModel r;
  if (Status s = ResolveShapes(spec.input, spec.layers, &r.shapes, flat_input); !s.ok()) return s;
  r.spec = spec;
  r.outputs = r.shapes.back().Size();
  uint64_t params = 0;
  bool fits = true;
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const int64_t size = ParamSize(*FindLayerType(spec.layers[i].kind), spec.layers[i], in);
    fits = fits && size >= 0 &&
           !__builtin_add_overflow(params, static_cast<uint64_t>(size), &params);
    in = r.shapes[i];
  }
  if (fits) r.param_count = params;
  for (const LayerSite& site : LayerSites(r.spec, r.shapes)) {
    r.stats_count += StatsSize(*site.type, *site.spec, site.in);
  }
  *out = std::move(r);
  return Status::Ok();
}

int64_t StatsCount(const ModelSpec& spec) {
  int64_t n = 0;
  for (const LayerSite& s : LayerSites(spec)) n += StatsSize(*s.type, *s.spec, s.in);
  return n;
}

}  // namespace shmtrain::nn
