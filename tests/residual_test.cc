// Residual blocks (nn/layers/residual.cc) through the layer seam: their model text, its
// refusals, shapes, the walks that go into blocks (LayerSites, TakesImages), PyTorch's names,
// a model of blocks against PyTorch's definitions written as plain NCHW loops, the backward
// pass of a block that computes no input gradient, the memory a pass takes, and the ResNet-20
// text of docs/models.md. The gradient check of every registered layer (tests/layer_test.cc)
// covers blocks with identity and projection shortcuts, nested.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "master/files/model_file.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "nn/net.h"
#include "tests/proc_util.h"

namespace shmtrain::nn {
namespace {

std::vector<double> Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (double& x : v) x = u(g);
  return v;
}

std::vector<LayerSpec> Parse(const std::string& text) {
  std::vector<LayerSpec> l;
  const Status s = ParseModelText(text, &l);
  EXPECT_TRUE(s.ok()) << text << ": " << s.message();
  return l;
}

// ---- the model text -------------------------------------------------------------------------

TEST(ResidualText, ParsesBodyAndShortcutAndPrintsTheCanonicalForm) {
  const std::pair<const char*, const char*> spellings[] = {
      {" residual( conv2d(16,3,padding=1,bias=false), relu , conv2d(16, 3, padding=1, bias=False) "
       "),"
       "relu",
       "residual(conv2d(16,3,padding=1,bias=false),relu,conv2d(16,3,padding=1,bias=false)),relu"},
      {"residual(conv2d(32,3,stride=2,padding=1,bias=false),relu,conv2d(32,3,padding=1,bias=false)"
       " | conv2d(32,1,stride=2,bias=false))",
       "residual(conv2d(32,3,stride=2,padding=1,bias=false),relu,conv2d(32,3,padding=1,bias=false)|"
       "conv2d(32,1,stride=2,bias=false))"},
      {"residual(residual(relu | tanh()), sigmoid | residual(relu, dropout(p=0.5)))",
       "residual(residual(relu|tanh),sigmoid|residual(relu,dropout))"},
      {"residual(relu)", "residual(relu)"},
  };
  for (const auto& [text, canonical] : spellings) {
    const std::vector<LayerSpec> l = Parse(text);
    EXPECT_EQ(ModelText(l), canonical) << text;
    std::vector<LayerSpec> again;
    const Status stored = ParseStoredModelText(canonical, &again);
    EXPECT_TRUE(stored.ok()) << canonical << ": " << stored.message();
    EXPECT_EQ(again, l) << canonical;
    if (std::string(text) != canonical) {
      EXPECT_FALSE(ParseStoredModelText(text, &again).ok()) << text;
    }
  }
  // The lists, nested: body, then the shortcut after the bar.
  const std::vector<LayerSpec> l = Parse("residual(residual(relu|tanh),sigmoid|residual(relu))");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(l[0].args.empty());
  ASSERT_EQ(l[0].body.size(), 2u);
  ASSERT_EQ(l[0].shortcut.size(), 1u);
  EXPECT_EQ(l[0].body[0].kind, "residual");
  EXPECT_EQ(l[0].body[0].body, (std::vector<LayerSpec>{{"relu", {}}}));
  EXPECT_EQ(l[0].body[0].shortcut, (std::vector<LayerSpec>{{"tanh", {}}}));
  EXPECT_EQ(l[0].body[1], (LayerSpec{"sigmoid", {}}));
  EXPECT_TRUE(l[0].shortcut[0].shortcut.empty());
  // Messages name blocks as any layer.
  const std::vector<LayerSpec> m = Parse("residual(relu),relu,residual(tanh),relu,residual(relu)");
  EXPECT_EQ(LayerName(m, 4), "residual #3 (layer 5)");
}

TEST(ResidualText, RefusalsNameTheBlockAndTheLayerInIt) {
  std::string deep = "relu", deepest = "relu";
  for (int i = 0; i < kMaxBlockDepth; ++i) deep = "residual(" + deep + ")";
  deepest = "residual(" + deep + ")";
  EXPECT_EQ(Parse(deep).size(), 1u);
  const std::pair<std::string, std::string> bad[] = {
      {"residual()",
       "layer 1 'residual()': an empty body (residual(LAYERS) needs a layer at least)"},
      {"relu,residual( | conv2d(8,1))", "layer 2 'residual( | conv2d(8,1))': an empty body"},
      {"residual",
       "layer 1 'residual': residual needs its layers: residual(LAYERS) adds its input to their "
       "output, residual(LAYERS | SHORTCUT) the shortcut's"},
      {"residual(relu|relu|relu)",
       "layer 1 'residual(relu|relu|relu)': more than one '|' (residual(BODY | SHORTCUT) has one "
       "shortcut)"},
      {"residual(relu|)",
       "layer 1 'residual(relu|)': an empty shortcut after '|' (leave out '|' for the identity)"},
      {"relu,residual(conv2d(8,3),conv2d(8))",
       "layer 2 'residual(conv2d(8,3),conv2d(8))': in its body, layer 2 'conv2d(8)': conv2d needs "
       "kernel"},
      {"residual(relu|softmax)",
       "layer 1 'residual(relu|softmax)': in its shortcut, layer 1 'softmax': unknown layer "
       "'softmax'"},
      {"residual(residual(relu,,tanh))",
       "layer 1 'residual(residual(relu,,tanh))': in its body, layer 1 'residual(relu,,tanh)': in "
       "its body, layer 2 '': empty layer"},
      {"relu|tanh", "layer 1 'relu|tanh': '|' outside a block"},
      {"residual(relu)x", "layer 1 'residual(relu)x': text after its closing parenthesis"},
      {"residual(relu,(tanh)", "unbalanced parentheses in 'residual(relu,(tanh)'"},
      {deepest, "blocks nested more than 32 deep"},
      // A long block is quoted by its start.
      {"residual(conv2d(8,3,padding=1,bias=false),relu,conv2d(8,3,padding=1,bias=false),x)",
       "layer 1 'residual(conv2d(8,3,padding=1,bias=false),relu,conv2d(8, ...': in its body, "
       "layer 4 'x': unknown layer 'x'"},
  };
  for (const auto& [text, want] : bad) {
    std::vector<LayerSpec> l;
    const Status s = ParseModelText(text, &l);
    EXPECT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << text << ": " << s.message();
  }
  // Blocks nested 10000 deep (90 kB): refused at the 33rd, in a message of the 32 around it.
  std::string huge = "relu";
  for (int i = 0; i < 10000; ++i) huge = "residual(" + huge + ")";
  std::vector<LayerSpec> l;
  const Status s = ParseModelText(huge, &l);
  EXPECT_NE(s.message().find("blocks nested more than 32 deep"), std::string::npos);
  EXPECT_LT(s.message().size(), 4000u);
}

// ---- shapes ---------------------------------------------------------------------------------

TEST(ResidualShapes, BodyAndShortcutMustAgreeAndMessagesNameTheBlock) {
  std::vector<Shape> shapes;
  ASSERT_TRUE(ResolveShapes({16, 32, 32},
                            Parse("residual(conv2d(16,3,padding=1),relu,conv2d(16,3,padding=1)),"
                                  "relu,residual(conv2d(32,3,stride=2,padding=1)|conv2d(32,1,"
                                  "stride=2)),adaptiveavgpool2d(1),flatten,linear(10)"),
                            &shapes)
                  .ok());
  EXPECT_EQ(shapes,
            (std::vector<Shape>{
                {16, 32, 32}, {16, 32, 32}, {32, 16, 16}, {32, 1, 1}, {32, 1, 1}, {10, 1, 1}}));
  struct Bad {
    Shape input;
    const char* text;
    const char* want;
    bool flat = false;
  };
  const Bad bad[] = {
      {{16, 32, 32},
       "residual(relu),relu,relu,relu,residual(conv2d(32,3,stride=2,padding=1)|relu)",
       "residual #2 (layer 5): body gives 32x16x16, shortcut gives 16x32x32"},
      {{1, 8, 8},
       "conv2d(8,3),residual(conv2d(8,3))",
       "residual #1 (layer 2): body gives 8x4x4, shortcut (the identity) gives 8x6x6"},
      {{3, 4, 4},
       "residual(relu,maxpool2d(8))",
       "residual #1 (layer 1): in its body, maxpool2d #1 (layer 2): input 3x4x4: the window of "
       "kernel 8 (8x8) does not fit in 4x4"},
      {{3, 4, 4},
       "relu,residual(relu|conv2d(3,5))",
       "residual #1 (layer 2): in its shortcut, conv2d #1 (layer 1): input 3x4x4, kernel 5 with "
       "padding 0 leaves no output"},
      {{3, 4, 4},
       "residual(residual(relu|conv2d(4,1)))",
       "residual #1 (layer 1): in its body, residual #1 (layer 1): body gives 3x4x4, shortcut "
       "gives 4x4x4"},
      {{4, 1, 1},
       "flatten,residual(conv2d(4,1))",
       "residual #1 (layer 2): in its body, conv2d #1 (layer 1): input 4 is flat (the output of "
       "flatten #1 (layer 1)), not an image"},
      // PyTorch would broadcast (n, 8) and (n, 8, 1, 1) into a larger tensor.
      {{8, 1, 1},
       "residual(flatten)",
       "residual #1 (layer 1): body gives 8 (flat), shortcut (the identity) gives 8x1x1"},
      {{8, 1, 1},
       "residual(linear(8),relu),conv2d(2,1)",
       "conv2d #1 (layer 2): input 8 is flat (the output of residual #1 (layer 1)), not an image",
       true},
  };
  for (const Bad& b : bad) {
    EXPECT_EQ(ResolveShapes(b.input, Parse(b.text), &shapes, b.flat).message(), b.want) << b.text;
  }
  // Flat data through blocks of linear layers, as PyTorch adds two (n, 8) tensors.
  const Status mlp = ResolveShapes(
      {8, 1, 1},
      Parse("residual(linear(8),relu,linear(8)),relu,residual(linear(4)|linear(4)),linear(2)"),
      &shapes, /*flat_input=*/true);
  EXPECT_TRUE(mlp.ok()) << mlp.message();
}

// A 1x1 input is an image to a model whose first use of it is a window, in a block too.
TEST(ResidualShapes, TakesImagesLooksIntoBlocks) {
  const std::pair<const char*, bool> cases[] = {
      {"residual(relu|conv2d(3,1)),flatten,linear(2)", true},
      {"residual(residual(relu,conv2d(3,1))),flatten,linear(2)", true},
      {"residual(relu),flatten,linear(2)", false},
      {"residual(relu|relu),linear(2),residual(conv2d(2,1))", false},
      {"residual(tanh),residual(sigmoid),maxpool2d(1),flatten,linear(2)", true},
  };
  for (const auto& [text, images] : cases) {
    EXPECT_EQ(TakesImages({3, 1, 1}, Parse(text)), images) << text;
  }
}

// ---- the walks into blocks and PyTorch's names ----------------------------------------------

TEST(ResidualSites, AreTheLeafLayersInTheFlatVectorsOrder) {
  ModelSpec spec;
  spec.input = {2, 4, 4};
  spec.loss = Loss::kXent;
  spec.layers = Parse(
      "conv2d(3,3,padding=1,bias=false),residual(conv2d(3,3,padding=1),relu,"
      "residual(conv2d(3,1)|tanh)|conv2d(3,1,bias=false)),flatten,linear(2)");
  const std::vector<LayerSite> sites = LayerSites(spec);
  const LayerSpec& block = spec.layers[1];
  struct Want {
    const LayerSpec* spec;
    Shape in, out;
    int64_t param;
  };
  const Shape map{3, 4, 4};
  const Want want[] = {{&spec.layers[0], {2, 4, 4}, map, 0},
                       {&block.body[0], map, map, 54},
                       {&block.body[1], map, map, 138},
                       {&block.body[2].body[0], map, map, 138},
                       {&block.body[2].shortcut[0], map, map, 150},
                       {&block.shortcut[0], map, map, 150},
                       {&spec.layers[2], map, {48, 1, 1}, 159},
                       {&spec.layers[3], {48, 1, 1}, {2, 1, 1}, 159}};
  ASSERT_EQ(sites.size(), std::size(want));
  for (size_t i = 0; i < sites.size(); ++i) {
    EXPECT_EQ(sites[i].spec, want[i].spec) << "site " << i;
    EXPECT_EQ(sites[i].type, FindLayerType(want[i].spec->kind)) << "site " << i;
    EXPECT_EQ(sites[i].in, want[i].in) << "site " << i;
    EXPECT_EQ(sites[i].out, want[i].out) << "site " << i;
    EXPECT_EQ(sites[i].param_offset, want[i].param) << "site " << i;
    EXPECT_EQ(sites[i].stats_offset, 0) << "site " << i;
  }
  EXPECT_EQ(spec.ParamCount(), 159u + 98);
  EXPECT_EQ(StatsCount(spec), 0);
  // A model file's messages name a parameter by its block (a non-finite value).
  EXPECT_EQ(ParamName(spec, 54 + 5),
            "residual #1 (layer 2) body.0.weight, element 5 of 81 (1.body.0.weight in an export)");
  EXPECT_EQ(ParamName(spec, 150 + 8),
            "residual #1 (layer 2) shortcut.0.weight, element 8 of 9 "
            "(1.shortcut.0.weight in an export)");

  // The block's blocks, as PyTorch names them in a module of body and shortcut Sequentials.
  const LayerType& t = *FindLayerType("residual");
  std::vector<std::string> names;
  for (const ParamBlock& b : t.params(block, map)) {
    names.push_back(b.name + " " + std::to_string(b.Size()));
    EXPECT_FALSE(b.buffer || b.integer) << b.name;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"body.0.weight 81", "body.0.bias 3", "body.2.body.0.weight 9",
                                      "body.2.body.0.bias 3", "shortcut.0.weight 9"}));
}

// Batch norm inside blocks: its statistics sit where LayerSites says (the body's before the
// shortcut's, nested alike, each 4C + 1), and the block's layers cross them there, forward in
// the flat vector's order and backward at the second half of each.
class Recorder final : public StatsCrossing {
 public:
  void Sum(int64_t offset, double*, int64_t count) override { calls.push_back({offset, count}); }
  std::vector<std::pair<int64_t, int64_t>> calls;
};

TEST(ResidualStats, BatchNormInBlocksCrossesAtItsSitesOffsets) {
  ModelSpec spec;
  spec.input = {2, 4, 4};
  spec.loss = Loss::kXent;
  spec.layers = Parse(
      "conv2d(3,3,padding=1,bias=false),batchnorm2d,relu,residual(conv2d(3,3,"
      "padding=1,bias=false),batchnorm2d,relu,residual(conv2d(5,1,bias=false),"
      "batchnorm2d,conv2d(3,1)|tanh)|conv2d(3,1,bias=false),batchnorm2d),"
      "flatten,linear(2),batchnorm1d");
  std::vector<std::pair<int64_t, int64_t>> forward, backward;
  for (const LayerSite& site : LayerSites(spec)) {
    if (site.type->stats == nullptr) continue;
    const int64_t c = site.in.c;
    forward.push_back({site.stats_offset, 2 * c + 1});
    backward.push_back({site.stats_offset + 2 * c + 1, 2 * c});
  }
  const std::vector<std::pair<int64_t, int64_t>> want = {
      {0, 7}, {13, 7}, {26, 11}, {47, 7}, {60, 5}};
  EXPECT_EQ(forward, want);
  EXPECT_EQ(StatsCount(spec), 60 + 9);
  Net<double> net(spec);
  const int64_t n = 3;
  std::vector<double> params = Random(net.ParamCount(), 71), grad(params.size());
  const std::vector<double> x = Random(spec.input.Size() * n, 72), y = {1, 0, 1};
  Recorder recorder;
  PassInfo pass;
  pass.train = true;
  pass.stats = &recorder;
  net.LossAndGrad(params.data(), x.data(), y.data(), n, pass, grad.data());
  ASSERT_EQ(recorder.calls.size(), forward.size() + backward.size());
  EXPECT_EQ(std::vector(recorder.calls.begin(), recorder.calls.begin() + 5), forward);
  std::vector<std::pair<int64_t, int64_t>> back(recorder.calls.begin() + 5, recorder.calls.end());
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back, backward);
}

// ---- against PyTorch's definitions ----------------------------------------------------------

// A tensor in PyTorch's NCHW order.
struct Tensor {
  int64_t n, c, h, w;
  std::vector<double> v;
  double& at(int64_t i, int64_t ch, int64_t y, int64_t x) {
    return v[((i * c + ch) * h + y) * w + x];
  }
  double get(int64_t i, int64_t ch, int64_t y, int64_t x) const {
    return v[((i * c + ch) * h + y) * w + x];
  }
};

// torch.nn.functional.conv2d with weight (out, c, k, k), zero padding; bias null: none.
Tensor Conv(const Tensor& x, const std::vector<double>& weight, const std::vector<double>* bias,
            int64_t out, int64_t k, int64_t stride, int64_t pad) {
  EXPECT_EQ(weight.size(), static_cast<size_t>(out * x.c * k * k));
  Tensor y{x.n, out, (x.h + 2 * pad - k) / stride + 1, (x.w + 2 * pad - k) / stride + 1, {}};
  y.v.assign(y.n * y.c * y.h * y.w, 0.0);
  for (int64_t i = 0; i < x.n; ++i)
    for (int64_t oc = 0; oc < out; ++oc)
      for (int64_t oy = 0; oy < y.h; ++oy)
        for (int64_t ox = 0; ox < y.w; ++ox) {
          double s = bias == nullptr ? 0 : (*bias)[oc];
          for (int64_t ch = 0; ch < x.c; ++ch)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) continue;
                s += weight[((oc * x.c + ch) * k + ky) * k + kx] * x.get(i, ch, iy, ix);
              }
          y.at(i, oc, oy, ox) = s;
        }
  return y;
}

template <class F>
Tensor Map(Tensor x, F f) {
  for (double& v : x.v) v = f(v);
  return x;
}

Tensor Add(Tensor a, const Tensor& b) {
  EXPECT_EQ(a.v.size(), b.v.size());
  for (size_t i = 0; i < a.v.size(); ++i) a.v[i] += b.v[i];
  return a;
}

double Relu(double v) {
  return std::max(v, 0.0);
}
double Sigmoid(double v) {
  return 1 / (1 + std::exp(-v));
}
double Tanh(double v) {
  return std::tanh(v);
}

// The arrays an export would hold: every block of every layer by its name "{i}.{block}", in
// PyTorch's layout (ToTorch).
std::map<std::string, std::vector<double>> TorchArrays(const ModelSpec& spec, const float* p) {
  std::vector<Shape> shapes;
  EXPECT_TRUE(ResolveShapes(spec.input, spec.layers, &shapes).ok());
  std::map<std::string, std::vector<double>> arrays;
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerType& t = *FindLayerType(spec.layers[i].kind);
    const int64_t size = ParamSize(t, spec.layers[i], in);
    std::vector<float> torch(size);
    ToTorch(t, spec.layers[i], in, p, torch.data());
    const float* q = torch.data();
    if (t.params != nullptr) {
      for (const ParamBlock& b : t.params(spec.layers[i], in)) {
        arrays[std::to_string(i) + "." + b.name] = std::vector<double>(q, q + b.Size());
        q += b.Size();
      }
    }
    p += size;
    in = shapes[i];
  }
  return arrays;
}

// Identity and projection shortcuts, a block nested in a body, another with a parameter-free
// shortcut: Net's raw outputs against the loops, given the arrays by their export names.
TEST(ResidualForward, MatchesPyTorchsDefinitionsWrittenAsLoops) {
  ModelSpec spec;
  spec.input = {2, 6, 5};
  spec.loss = Loss::kMse;
  spec.layers = Parse(
      "conv2d(3,3,padding=1,bias=false),relu,residual(conv2d(3,3,padding=1),relu,conv2d(3,3,"
      "padding=1,bias=false)),relu,residual(conv2d(4,3,stride=2,padding=1,bias=false),tanh,"
      "conv2d(4,3,padding=1)|conv2d(4,1,stride=2,bias=false)),residual(residual(conv2d(4,1),"
      "sigmoid),relu|maxpool2d(1)),adaptiveavgpool2d(1),flatten,linear(3)");
  Net<double> net(spec);
  const int64_t n = 3;
  const std::vector<double> x = Random(spec.input.Size() * n, 51);
  std::vector<float> pf(spec.ParamCount());
  InitParams(spec, Init::kTorch, 52, pf.data());
  const std::vector<double> params(pf.begin(), pf.end());
  std::vector<double> got(net.Outputs() * n);
  net.Predict(params.data(), x.data(), n, got.data());

  std::map<std::string, std::vector<double>> z = TorchArrays(spec, pf.data());
  std::vector<std::string> names;
  for (const auto& [name, v] : z) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "0.weight", "2.body.0.bias", "2.body.0.weight", "2.body.2.weight",
                       "4.body.0.weight", "4.body.2.bias", "4.body.2.weight", "4.shortcut.0.weight",
                       "5.body.0.body.0.bias", "5.body.0.body.0.weight", "8.bias", "8.weight"}));
  Tensor a = Map(Conv(Tensor{n, 2, 6, 5, x}, z["0.weight"], nullptr, 3, 3, 1, 1), Relu);
  Tensor body = Conv(a, z["2.body.0.weight"], &z["2.body.0.bias"], 3, 3, 1, 1);
  body = Conv(Map(body, Relu), z["2.body.2.weight"], nullptr, 3, 3, 1, 1);
  a = Map(Add(body, a), Relu);  // body(x) + x
  body = Map(Conv(a, z["4.body.0.weight"], nullptr, 4, 3, 2, 1), Tanh);
  body = Conv(body, z["4.body.2.weight"], &z["4.body.2.bias"], 4, 3, 1, 1);
  a = Add(body, Conv(a, z["4.shortcut.0.weight"], nullptr, 4, 1, 2, 0));  // body(x) + shortcut(x)
  ASSERT_EQ(a.c * a.h * a.w, 36);
  const Tensor inner =
      Map(Conv(a, z["5.body.0.body.0.weight"], &z["5.body.0.body.0.bias"], 4, 1, 1, 0), Sigmoid);
  a = Add(Map(Add(inner, a), Relu), a);          // maxpool2d(1) is the identity
  const std::vector<double>& w = z["8.weight"];  // (3, 4), row-major
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t u = 0; u < 3; ++u) {
      double s = z["8.bias"][u];
      for (int64_t ch = 0; ch < 4; ++ch) {
        double mean = 0;
        for (int64_t p = 0; p < 9; ++p) mean += a.get(i, ch, p / 3, p % 3);
        s += w[u * 4 + ch] * (mean / 9);
      }
      EXPECT_NEAR(got[i * 3 + u], s, 1e-12) << "sample " << i << ", output " << u;
    }
  }
}

// A block first in the model gets no input gradient to compute (Net's first layer with
// parameters), and its lists stop at their own first layers with parameters; the gradients stay
// those of finite differences.
TEST(ResidualBackward, AFirstBlockComputesNoInputGradient) {
  ModelSpec spec;
  spec.input = {3, 4, 4};
  spec.loss = Loss::kXent;
  spec.layers = Parse(
      "residual(relu,conv2d(3,3,padding=1)|relu,conv2d(3,1)),tanh,"
      "residual(relu|tanh,sigmoid),flatten,linear(3)");
  Net<double> net(spec);
  EXPECT_TRUE(net.RunsBackward(0));
  EXPECT_FALSE(net.NeedsInputGradient(0));
  const int64_t n = 3;
  std::vector<double> params = Random(net.ParamCount(), 61), grad(params.size(), 7.0);
  const std::vector<double> x = Random(spec.input.Size() * n, 62), y = {2, 0, 1};
  PassInfo pass;
  pass.train = true;
  net.LossAndGrad(params.data(), x.data(), y.data(), n, pass, grad.data());
  const double h = 1e-6;
  for (size_t i = 0; i < params.size(); ++i) {
    const double keep = params[i];
    params[i] = keep + h;
    const double up = net.LossSum(params.data(), x.data(), y.data(), n, pass);
    params[i] = keep - h;
    const double down = net.LossSum(params.data(), x.data(), y.data(), n, pass);
    params[i] = keep;
    ASSERT_NEAR(grad[i], (up - down) / (2 * h), 1e-6) << "parameter " << i;
  }
}

// What a block holds is in PassBytes: its layers' outputs, and its two deltas when it runs
// backward (the largest input of a layer but the first of its list, or its input with a
// shortcut: 5 here).
TEST(ResidualMemory, PassBytesCountsTheBlocksActivationsAndDeltas) {
  ModelSpec spec;
  spec.input = {3, 1, 1};
  spec.loss = Loss::kXent;
  spec.layers = Parse("linear(4),residual(linear(5),tanh,linear(4)|linear(4)),linear(2)");
  // The net: outputs 4 + 4 + 2, two deltas of 4; the block: 5 + 5 + 4 + 4, two deltas of 5.
  const int64_t n = 7;
  EXPECT_EQ(PassBytes(spec, n, false), uint64_t{(10 + 18) * n * 4});
  EXPECT_EQ(PassBytes(spec, n, true), uint64_t{(10 + 8 + 18 + 10) * n * 4});
  EXPECT_EQ(PassBytes(spec, n, true, sizeof(double)), uint64_t{(10 + 8 + 18 + 10) * n * 8});
}

// ---- ResNet-20 ------------------------------------------------------------------------------

// docs/models.md's ResNet-20 for CIFAR-10 (examples/resnet20.txt): the canonical text, within
// what a run holds, of 3x32x32 images to 10 classes, its parameters and batch norm statistics,
// and a training pass of it.
TEST(ResNet20, TheExampleIsCanonicalResolvesAndTrains) {
  std::string text =
      test::ReadWholeFile(std::string(SHMTRAIN_SOURCE_DIR) + "/examples/resnet20.txt");
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  text.pop_back();
  EXPECT_LT(text.size(), kMaxModelText);
  ModelSpec spec;
  spec.input = {3, 32, 32};
  spec.loss = Loss::kXent;
  ASSERT_TRUE(ParseStoredModelText(text, &spec.layers).ok());
  std::vector<Shape> shapes;
  const Status s = ResolveShapes(spec.input, spec.layers, &shapes);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(spec.outputs(), 10);
  EXPECT_EQ(shapes[shapes.size() - 4], (Shape{64, 8, 8}));
  EXPECT_EQ(std::count_if(spec.layers.begin(), spec.layers.end(),
                          [](const LayerSpec& l) { return l.kind == "residual"; }),
            9);
  // 19 3x3 convolutions (the stem's and 2 in each of 9 blocks), the two 1x1 projections, a
  // batch norm after each of those 21, and the linear layer.
  int64_t convs = 0, norms = 0, linears = 0;
  for (const LayerSite& site : LayerSites(spec)) {
    convs += site.spec->kind == "conv2d";
    norms += site.spec->kind == "batchnorm2d";
    linears += site.spec->kind == "linear";
  }
  EXPECT_EQ(convs, 21);
  EXPECT_EQ(norms, 21);
  EXPECT_EQ(linears, 1);
  const uint64_t weights = 16 * 3 * 9 + 6 * 16 * 16 * 9 + (32 * 16 * 9 + 5 * 32 * 32 * 9) +
                           (64 * 32 * 9 + 5 * 64 * 64 * 9) + 32 * 16 + 64 * 32 + 64 * 10 + 10;
  // Batch norm: weight, bias, running_mean and running_var per channel, num_batches_tracked;
  // 7 of 16 channels, 7 of 32 and 7 of 64.
  const int64_t channels = 7 * 16 + 7 * 32 + 7 * 64;
  EXPECT_EQ(spec.ParamCount(), weights + 4 * channels + 21);
  EXPECT_EQ(StatsCount(spec), 4 * channels + 21);
  // A training pass on two images: a finite loss and a gradient for every convolution.
  Workspace<float> ws;
  const int64_t n = 2;
  std::vector<float> params(spec.ParamCount()), grad(params.size());
  InitParams(spec, Init::kTorch, 81, params.data());
  const std::vector<double> xd = Random(spec.input.Size() * n, 82);
  const std::vector<float> x(xd.begin(), xd.end()), y = {3, 7};
  PassInfo pass;
  pass.train = true;
  const double loss =
      LossAndGrad<float>(spec, params.data(), x.data(), y.data(), n, grad.data(), ws, pass);
  EXPECT_TRUE(std::isfinite(loss)) << loss;
  EXPECT_NE(grad[0], 0.0f);  // the stem's first weight: the gradient went through every block
}

}  // namespace
}  // namespace shmtrain::nn
