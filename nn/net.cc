#include "nn/net.h"

#include "nn/model.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "nn/loss.h"
#include "nn/rng.h"
#include "shmtrain/status.h"

namespace shmtrain::nn {
namespace {

std::vector<Shape> Shapes(const ModelSpec& spec) {
  std::vector<Shape> shapes;
  Status s = ResolveShapes(spec.input, spec.layers, &shapes);
  SHMTRAIN_CHECK(s.ok(), "a model that does not resolve: " + s.message());
  return shapes;
}

// The activations a block keeps for each sample: its layers' outputs, nested blocks' too. 0 for
// any other layer.
int64_t BlockActivations(const LayerSpec& l, Shape in) {
  if (FindLayerType(l.kind)->spatial != Spatial::kBlock) return 0;
  int64_t n = 0;
  for (const BlockMember& m : BlockMembers(l, in)) {
    n = SatAdd(n, SatAdd(m.out.Size(), BlockActivations(*m.spec, m.in)));
  }
  return n;
}

template <class S>
void Reserve(AlignedVector<S>& v, int64_t size) {
  if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
}

}  // namespace

void InitParams(const ModelSpec& spec, Init init, uint64_t seed, float* params) {
  ResolvedModel model;
  model.spec = spec;
  model.shapes = Shapes(spec);
  InitParams(model, init, seed, params);
}

void InitParams(const ResolvedModel& model, Init init, uint64_t seed, float* params) {
  const ModelSpec& spec = model.spec;
  const std::vector<Shape>& shapes = model.shapes;
  Rng rng(seed);
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerType& t = *FindLayerType(spec.layers[i].kind);
    if (t.init != nullptr) t.init(spec.layers[i], in, init, rng, params);
    params += ParamSize(t, spec.layers[i], in);
    in = shapes[i];
  }
}

int64_t EvalChunk(const ModelSpec& spec) {
  ResolvedModel model;
  if (!ResolveShapes(spec.input, spec.layers, &model.shapes).ok()) return 1;
  model.spec = spec;
  return EvalChunk(model);
}

int64_t EvalChunk(const ResolvedModel& model) {
  const ModelSpec& spec = model.spec;
  const std::vector<Shape>& shapes = model.shapes;
  int64_t per_sample = spec.input.Size();
  Shape in = spec.input;
  for (size_t i = 0; i < shapes.size(); ++i) {
    per_sample = SatAdd(per_sample, SatAdd(shapes[i].Size(), BlockActivations(spec.layers[i], in)));
    in = shapes[i];
  }
  constexpr int64_t kFloats = int64_t{16} << 20;
  return std::clamp<int64_t>(kFloats / std::max<int64_t>(1, per_sample), 1, 4096);
}

NetPlan::NetPlan(const ModelSpec& spec) : NetPlan(spec, Shapes(spec)) {}

NetPlan::NetPlan(const ModelSpec& spec, std::vector<Shape> resolved)
    : shapes(std::move(resolved)), reorder_input(spec.input.c > 1 && !spec.input.Flat()) {
  delta = shapes.back().Size();
  for (size_t i = 0; i + 1 < shapes.size(); ++i) delta = std::max(delta, shapes[i].Size());
  Shape in = spec.input;
  for (first_params = 0; first_params < spec.layers.size(); ++first_params) {
    const LayerSpec& l = spec.layers[first_params];
    if (ParamSize(*FindLayerType(l.kind), l, in) > 0) break;
    in = shapes[first_params];
  }
}

uint64_t PassBytes(const ModelSpec& spec, int64_t n, bool backward, size_t scalar) {
  ResolvedModel model;
  if (spec.layers.empty() || !ResolveShapes(spec.input, spec.layers, &model.shapes).ok()) return 0;
  model.spec = spec;
  return PassBytes(model, n, backward, scalar);
}

uint64_t PassBytes(const ResolvedModel& model, int64_t n, bool backward, size_t scalar) {
  const ModelSpec& spec = model.spec;
  if (spec.layers.empty()) return 0;
  const NetPlan plan(spec, model.shapes);
  int64_t per_sample = plan.reorder_input ? spec.input.Size() : 0;
  for (const Shape& s : plan.shapes) per_sample = SatAdd(per_sample, s.Size());
  if (backward) per_sample = SatAdd(per_sample, SatMul(2, plan.delta));
  int64_t elements = SatMul(per_sample, n);
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerType& t = *FindLayerType(spec.layers[i].kind);
    if (t.scratch != nullptr) {
      elements = SatAdd(elements, t.scratch(spec.layers[i], in, plan.shapes[i], n, backward));
    }
    in = plan.shapes[i];
  }
  uint64_t bytes = 0;
  return __builtin_mul_overflow(static_cast<uint64_t>(elements), scalar, &bytes) ? UINT64_MAX
                                                                                 : bytes;
}

template <class S>
Net<S>::Net(const ModelSpec& spec) : Net(spec, Shapes(spec)) {}

template <class S>
Net<S>::Net(const ResolvedModel& model) : Net(model.spec, model.shapes) {}

template <class S>
Net<S>::Net(const ModelSpec& spec, std::vector<Shape> resolved)
    : spec_(spec), plan_(spec, std::move(resolved)) {
  const std::vector<Shape>& shapes = plan_.shapes;
  Shape in = spec.input;
  int64_t stats = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerType& t = *FindLayerType(spec.layers[i].kind);
    offsets_.push_back(param_count_);
    param_count_ += ParamSize(t, spec.layers[i], in);
    layers_.push_back(t.maker<S>()(spec.layers[i], in, shapes[i]));
    layers_.back()->SetStatsOffset(stats);
    stats += StatsSize(t, spec.layers[i], in);
    in = shapes[i];
  }
  outputs_ = in.Size();
  acts_.resize(layers_.size());
}

template <class S>
const S* Net<S>::Forward(const S* params, const S* x, int64_t n, const PassInfo& pass) {
  const S* prev = x;
  if (plan_.reorder_input) {
    // (c, h, w) to channels-last: each sample's (hw x c) matrix is its (c x hw) transposed.
    using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
    const int64_t c = spec_.input.c, hw = spec_.input.h * spec_.input.w;
    Reserve(input_, c * hw * n);
    for (int64_t i = 0; i < n; ++i) {
      Eigen::Map<Mat>(input_.data() + i * c * hw, c, hw) =
          Eigen::Map<const Mat>(x + i * c * hw, hw, c).transpose();
    }
    prev = input_.data();
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    Reserve(acts_[i], plan_.shapes[i].Size() * n);
    layers_[i]->Forward(params + offsets_[i], prev, n, pass, acts_[i].data());
    prev = acts_[i].data();
  }
  return prev;
}

template <class S>
double Net<S>::LossSum(const S* params, const S* x, const S* y, int64_t n,
                       const PassInfo& pass) {
  if (n == 0) return 0;
  return OutputLoss<S>(spec_.loss, Forward(params, x, n, pass), y, outputs_, n, nullptr);
}

template <class S>
double Net<S>::LossAndGrad(const S* params, const S* x, const S* y, int64_t n,
                           const PassInfo& pass, S* grad) {
  // A worker with no rows in a step still takes part in its batch norm crossings, which
  // every worker must reach (nn/layer.h, StatsCrossing): its pass runs over 0 samples.
  if (n == 0 && pass.stats == nullptr) {
    std::fill(grad, grad + param_count_, S(0));
    return 0;
  }
  const S* input = Forward(params, x, n, pass);
  // Never empty: over 0 rows a null delta_prev_.data() would tell a layer that it has no input
  // gradient to compute (dx == nullptr), and batch norm would skip its backward crossing,
  // which every other worker makes.
  Reserve(delta_, std::max<int64_t>(plan_.delta * n, 1));
  Reserve(delta_prev_, std::max<int64_t>(plan_.delta * n, 1));
  const double loss = OutputLoss<S>(spec_.loss, input, y, outputs_, n, delta_.data());
  if (plan_.reorder_input) x = input_.data();
  for (size_t i = layers_.size(); i-- > plan_.first_params;) {
    const S* layer_in = i == 0 ? x : acts_[i - 1].data();
    S* dx = NeedsInputGradient(i) ? delta_prev_.data() : nullptr;
    layers_[i]->Backward(params + offsets_[i], layer_in, acts_[i].data(), delta_.data(), n, pass,
                         dx, grad + offsets_[i]);
    std::swap(delta_, delta_prev_);
  }
  return loss;
}

template <class S>
void Net<S>::Predict(const S* params, const S* x, int64_t n, S* out) {
  if (n == 0) return;
  OutputPrediction<S>(spec_.loss, Forward(params, x, n, PassInfo{}), outputs_, n, out);
}

template class Net<float>;
template class Net<double>;

}  // namespace shmtrain::nn
