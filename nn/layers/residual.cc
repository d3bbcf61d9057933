// residual(BODY) and residual(BODY | SHORTCUT): a block of layers, He et al.'s residual unit as
// PyTorch users write it, a module with `self.body = nn.Sequential(...)` and
// `self.shortcut = nn.Sequential(...)` (empty: the identity) whose forward is
// body(x) + shortcut(x). BODY and SHORTCUT are lists of any layers, blocks too (nn/layer.h
// parses and resolves them); both take the block's input and must give one shape.
//
// The block's slice of the flat vector is its layers' slices, the body's then the shortcut's,
// each laid out as its own type lays it out; their blocks are named "body.<j>.<name>" and
// "shortcut.<k>.<name>", PyTorch's names in that module, so an export names the weight of
// layer j of the body of the block at module i "i.body.j.weight". Initialisation draws layer
// after layer in that order, as a model of the same layers in a row would.
//
// The Layer runs the body and the shortcut layer after layer into its own buffers, then adds
// their outputs (body first: y = body + shortcut, as PyTorch writes it). Backward hands dy to
// the last layer of each list, runs each list back (stopping, when the block computes no input
// gradient, at the first layer with parameters, as Net does) and adds the two input
// gradients. The activations of its layers are its scratch, kept from Forward for Backward
// (nn/layer.h), and counted by Scratch for nn::PassBytes with the deltas and its layers' own.
#include <algorithm>
#include <string>

#include "nn/layer.h"
#include "nn/layers/type_of.h"
#include "nn/net.h"

namespace shmtrain::nn {
namespace {

// A layer of the block, with what its Layer needs once the spec is gone.
struct Member {
  bool shortcut;
  Shape in, out;
  int64_t offset;  // its first parameter within the block's slice
  int64_t params, stats;
};

// The block's layers on input `in` (BlockMembers: the spec must outlive `layers`) and the
// sizes of the buffers its Layer holds for each sample.
struct BlockPlan {
  BlockPlan(const LayerSpec& spec, Shape in) : layers(BlockMembers(spec, in)) {
    int64_t offset = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      const BlockMember& m = layers[i];
      members.push_back({m.shortcut, m.in, m.out, offset, ParamSize(*m.type, *m.spec, m.in),
                         StatsSize(*m.type, *m.spec, m.in)});
      offset += members.back().params;
      body += !m.shortcut;
      acts = SatAdd(acts, m.out.Size());
      // The input gradient of every layer but the first of its list goes into a delta, and so
      // does the shortcut's first, to be added to the body's.
      if (m.index > 0 || m.shortcut) delta = std::max(delta, m.in.Size());
    }
  }
  std::vector<BlockMember> layers;
  std::vector<Member> members;
  size_t body = 0;    // members [0, body) are the body, the rest the shortcut
  int64_t acts = 0;   // every layer's output
  int64_t delta = 0;  // each of the backward pass's two deltas
};

template <class S>
using Buffer = AlignedVector<S>;

template <class S>
S* Reserve(Buffer<S>& v, int64_t size) {
  if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  return v.data();
}

template <class S>
class Residual final : public Layer<S> {
 public:
  Residual(const LayerSpec& spec, Shape in, Shape out) : Layer<S>(in, out) {
    const BlockPlan plan(spec, in);
    members_ = plan.members;
    body_ = plan.body;
    delta_size_ = plan.delta;
    for (const BlockMember& m : plan.layers) {
      layers_.push_back(m.type->maker<S>()(*m.spec, m.in, m.out));
    }
    acts_.resize(layers_.size());
  }

  // The block's statistics are its layers', the body's then the shortcut's.
  void SetStatsOffset(int64_t offset) override {
    Layer<S>::SetStatsOffset(offset);
    for (size_t i = 0; i < layers_.size(); ++i) {
      layers_[i]->SetStatsOffset(offset);
      offset += members_[i].stats;
    }
  }

  void Forward(const S* params, const S* x, int64_t n, const PassInfo& pass, S* y) override {
    const S* prev = x;
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (i == body_) prev = x;  // the shortcut reads the block's input too
      S* out = Reserve(acts_[i], members_[i].out.Size() * n);
      layers_[i]->Forward(params + members_[i].offset, prev, n, pass, out);
      prev = out;
    }
    const S* body = acts_[body_ - 1].data();
    const S* shortcut = body_ == layers_.size() ? x : acts_.back().data();
    const int64_t size = this->out().Size() * n;
    for (int64_t e = 0; e < size; ++e) y[e] = body[e] + shortcut[e];
    forward_x_ = x;
    forward_n_ = n;
  }

  // y = body + shortcut: dy is the gradient of both outputs, and dx the sum of their dx.
  void Backward(const S* params, const S* x, const S*, const S* dy, int64_t n, const PassInfo& pass,
                S* dx, S* dparams) override {
    SHMTRAIN_CHECK(x == forward_x_ && n == forward_n_,
                   "a residual block's backward pass on another input than its forward pass");
    Reserve(delta_[0], delta_size_ * n);
    Reserve(delta_[1], delta_size_ * n);
    const bool want = dx != nullptr;
    BackList(0, body_, params, x, dy, n, pass, dx, want, dparams);
    const int64_t size = this->in().Size() * n;
    if (body_ == layers_.size()) {
      if (want) {
        for (int64_t e = 0; e < size; ++e) dx[e] += dy[e];
      }
      return;
    }
    const S* g = BackList(body_, layers_.size(), params, x, dy, n, pass, nullptr, want, dparams);
    if (want) {
      for (int64_t e = 0; e < size; ++e) dx[e] += g[e];
    }
  }

 private:
  // Layers [begin, end), one list, backward from dy. Unless `want`, the pass stops at the
  // list's first layer with parameters, which computes no input gradient; with `want`, the
  // first layer's input gradient goes to first_dx, or (null) to a delta, and is returned.
  const S* BackList(size_t begin, size_t end, const S* params, const S* x, const S* dy, int64_t n,
                    const PassInfo& pass, S* first_dx, bool want, S* dparams) {
    size_t stop = begin;
    while (!want && stop < end && members_[stop].params == 0) ++stop;
    const S* d = dy;
    for (size_t i = end; i-- > stop;) {
      S* target = nullptr;
      if (i > stop || want) {
        target = i == begin && first_dx != nullptr ? first_dx : FreeDelta(d);
      }
      const S* in = i == begin ? x : acts_[i - 1].data();
      layers_[i]->Backward(params + members_[i].offset, in, acts_[i].data(), d, n, pass, target,
                           dparams + members_[i].offset);
      d = target;
    }
    return want ? d : nullptr;
  }

  // The delta that `d` is not.
  S* FreeDelta(const S* d) { return d == delta_[0].data() ? delta_[1].data() : delta_[0].data(); }

  std::vector<Member> members_;
  size_t body_ = 0;
  int64_t delta_size_ = 0;
  std::vector<std::unique_ptr<Layer<S>>> layers_;
  std::vector<Buffer<S>> acts_;  // acts_[i]: layer i's output
  Buffer<S> delta_[2];
  const S* forward_x_ = nullptr;
  int64_t forward_n_ = -1;
};

// PyTorch's names: the layer's own, under "body.<j>." or "shortcut.<k>.".
std::vector<ParamBlock> Params(const LayerSpec& spec, Shape in) {
  std::vector<ParamBlock> blocks;
  for (const BlockMember& m : BlockMembers(spec, in)) {
    if (m.type->params == nullptr) continue;
    const std::string prefix = (m.shortcut ? "shortcut." : "body.") + std::to_string(m.index) + ".";
    for (ParamBlock b : m.type->params(*m.spec, m.in)) {
      b.name = prefix + b.name;
      blocks.push_back(std::move(b));
    }
  }
  return blocks;
}

void InitBlock(const LayerSpec& spec, Shape in, Init init, Rng& rng, float* params) {
  for (const BlockMember& m : BlockMembers(spec, in)) {
    if (m.type->init != nullptr) m.type->init(*m.spec, m.in, init, rng, params);
    params += ParamSize(*m.type, *m.spec, m.in);
  }
}

// Its layers' orders, each shifted to where the layer's parameters start.
void TorchOrder(const LayerSpec& spec, Shape in, int64_t* from) {
  int64_t start = 0;
  for (const BlockMember& m : BlockMembers(spec, in)) {
    const int64_t size = ParamSize(*m.type, *m.spec, m.in);
    if (m.type->torch_order != nullptr) {
      m.type->torch_order(*m.spec, m.in, from);
      for (int64_t e = 0; e < size; ++e) from[e] += start;
    } else {
      for (int64_t e = 0; e < size; ++e) from[e] = start + e;
    }
    from += size;
    start += size;
  }
}

// The body's layers from x, the shortcut's (none: x itself), and their sum. When one side ends
// a row and the other an image, the image has one pixel (their shapes are one): made a row.
std::string ToOnnx(const LayerSpec& spec, Shape in, Shape out, const std::string& module,
                   const std::string& x, OnnxGraph& g) {
  std::string body = x, shortcut = x;
  for (const BlockMember& m : BlockMembers(spec, in)) {
    const std::string name =
        module + (m.shortcut ? ".shortcut." : ".body.") + std::to_string(m.index);
    std::string& side = m.shortcut ? shortcut : body;
    side = m.type->to_onnx(*m.spec, m.in, m.out, name, side, g);
  }
  if (g.Rank(body) != g.Rank(shortcut)) {
    body = g.Flat(body, out, module + ".body");
    shortcut = g.Flat(shortcut, out, module + ".shortcut");
  }
  return g.Node("Add", {body, shortcut}, module);
}

// What Residual allocates: its layers' outputs, the two deltas when it runs backward, and its
// layers' own scratch.
int64_t Scratch(const LayerSpec& spec, Shape in, Shape, int64_t n, bool backward) {
  const BlockPlan plan(spec, in);
  int64_t elements = SatMul(plan.acts, n);
  if (backward) elements = SatAdd(elements, SatMul(SatMul(2, plan.delta), n));
  for (const BlockMember& m : plan.layers) {
    if (m.type->scratch != nullptr) {
      elements = SatAdd(elements, m.type->scratch(*m.spec, m.in, m.out, n, backward));
    }
  }
  return elements;
}

int64_t Stats(const LayerSpec& spec, Shape in) {
  int64_t n = 0;
  for (const BlockMember& m : BlockMembers(spec, in)) n += StatsSize(*m.type, *m.spec, m.in);
  return n;
}

}  // namespace

extern const LayerType kResidual = TypeOf<Residual>({
    .name = "residual",
    .torch = "Residual",
    .summary = "body(x) + x, or body(x) + shortcut(x): residual(LAYERS) or "
               "residual(LAYERS | SHORTCUT), any layers, blocks too",
    .args = {},
    .spatial = Spatial::kBlock,
    .out_shape = ResolveBlock,
    .params = Params,
    .init = InitBlock,
    .torch_order = TorchOrder,
    .to_onnx = ToOnnx,
    .scratch = Scratch,
    .stats = Stats,
});

}  // namespace shmtrain::nn
