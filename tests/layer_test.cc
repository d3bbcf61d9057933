// The layer seam (nn/layer.h, nn/net.h): every registered layer's gradients against finite
// differences, the layers against PyTorch's definitions written here as plain NCHW loops, the
// model text, shapes and their messages, the MLP of --layers to the bit, and dropout's mask.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include "nn/cpu.h"
#include "nn/gemm.h"
#include "nn/layer.h"
#include "nn/model.h"
#include "nn/net.h"

namespace shmtrain::nn {
namespace {

std::vector<double> Random(size_t n, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = u(g);
  return v;
}

template <class T>
std::vector<T> As(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// ---- every registered layer against finite differences ------------------------------------

// A layer to check: its type with arguments derived from the registry alone (so a type added
// later is checked without a test of its own), on the first input shape it accepts.
struct Case {
  const LayerType* type;
  LayerSpec spec;
  Shape in;
  std::string name;
};

std::vector<Case> Cases() {
  const Shape inputs[] = {{3, 6, 5}, {7, 1, 1}};
  std::vector<Case> cases;
  for (const LayerType* t : LayerTypes()) {
    // The defaults (required arguments 2), then each optional argument moved off its default.
    std::vector<std::vector<double>> variants;
    std::vector<double> base;
    for (const LayerArg& a : t->args) base.push_back(a.required ? 2.0 : a.default_value);
    variants.push_back(base);
    for (size_t i = 0; i < t->args.size(); ++i) {
      const LayerArg& a = t->args[i];
      if (a.required) continue;
      std::vector<double> v = base;
      v[i] = a.boolean   ? 1 - a.default_value
             : a.integer ? std::min(a.hi, a.default_value + 1)
                         : (a.default_value + a.lo) / 2;
      variants.push_back(v);
    }
    for (size_t k = 0; k < variants.size(); ++k) {
      const LayerSpec spec{t->name, variants[k]};
      for (const Shape& in : inputs) {
        Shape out;
        if (!t->out_shape(spec, in, &out).ok()) continue;
        cases.push_back({t, spec, in, ModelText({spec}) + " on " + in.Text()});
        break;
      }
    }
  }
  // Shapes that take other paths. The convolution's kernels (nn/layers/conv2d.cc): direct
  // forward and weight gradient for multiples of 16 output channels (a first layer of few
  // channels at any size, others with at least 64 output pixels), im2col otherwise (a 3x3
  // output here); the input gradient direct for multiples of 16 input channels at stride 1
  // (dy padded by kernel - 1 - padding: 2, 1 and 0 here), im2col otherwise; rows of output
  // pixels and runs of taps both longer and shorter than a tile (6 pixels or taps, 12 on the
  // AVX-512 path), channel blocks of 32 and 16. Pooling whose windows tile the input exactly.
  for (auto [text, in] : {std::pair<const char*, Shape>{"conv2d(16,3,padding=1)", {1, 5, 8}},
                          {"conv2d(32,5,stride=2,padding=2)", {2, 7, 9}},
                          {"conv2d(48,3,padding=1)", {1, 2, 27}},
                          {"conv2d(16,2)", {6, 5, 8}},
                          {"conv2d(16,3)", {16, 10, 10}},
                          {"conv2d(16,3,padding=1,bias=false)", {16, 8, 8}},
                          {"conv2d(16,2,padding=1)", {16, 7, 7}},
                          {"conv2d(32,1)", {16, 5, 13}},
                          {"conv2d(16,3,padding=2)", {16, 1, 1}},
                          // Without a bias, on each of those kernels' paths.
                          {"conv2d(16,3,padding=1,bias=false)", {1, 5, 8}},
                          {"conv2d(32,5,stride=2,padding=2,bias=false)", {2, 7, 9}},
                          {"conv2d(16,2,bias=false)", {6, 5, 8}},
                          {"maxpool2d(2)", {3, 6, 4}},
                          {"avgpool2d(2)", {3, 6, 4}},
                          // 1x1 maps are images (PyTorch's conv2d and pools take them).
                          {"conv2d(5,1)", {7, 1, 1}},
                          {"conv2d(16,3,padding=1)", {3, 1, 1}},
                          {"maxpool2d(1)", {3, 1, 1}},
                          // Global average pooling; bins that overlap (4 of 6 rows: [0,2), [1,3),
                          // [3,5), [4,6)) and an output larger than its input (rows repeat).
                          {"adaptiveavgpool2d(1)", {19, 3, 4}},
                          {"adaptiveavgpool2d(4)", {3, 6, 5}},
                          {"adaptiveavgpool2d(3)", {2, 2, 2}},
                          // Residual blocks: an identity shortcut, a projection (a strided
                          // body and a 1x1 shortcut), blocks nested in the body and the
                          // shortcut, flat tensors, and a body without parameters whose
                          // dropout drops.
                          {"residual(conv2d(3,3,padding=1),relu,conv2d(3,3,padding=1))", {3, 6, 5}},
                          {"residual(conv2d(4,3,stride=2,padding=1,bias=false),relu,"
                           "conv2d(4,3,padding=1)|conv2d(4,1,stride=2,bias=false))",
                           {3, 6, 5}},
                          {"residual(residual(conv2d(2,3,padding=1),tanh),relu,"
                           "conv2d(2,1)|residual(conv2d(2,1)|conv2d(2,3,padding=1)))",
                           {2, 4, 3}},
                          {"residual(linear(7),tanh,linear(7))", {7, 1, 1}},
                          {"residual(relu,dropout(0.5)|maxpool2d(1),sigmoid)", {3, 2, 2}},
                          // Batch norm in a block (each pass its own batch's statistics here).
                          {"residual(conv2d(3,3,padding=1,bias=false),batchnorm2d,relu|"
                           "conv2d(3,1,bias=false),batchnorm2d)",
                           {3, 4, 3}}}) {
    std::vector<LayerSpec> l;
    if (!ParseModelText(text, &l).ok()) std::abort();
    cases.push_back({FindLayerType(l[0].kind), l[0], in, ModelText(l) + " on " + in.Text()});
  }
  return cases;
}

class EveryLayer : public ::testing::TestWithParam<Case> {};

// L = sum(r * layer(x)) for fixed r; its gradient by Backward with dy = r against central
// differences, for the input and every parameter, in double.
TEST_P(EveryLayer, GradientsMatchFiniteDifferences) {
  const Case& c = GetParam();
  Shape out;
  ASSERT_TRUE(c.type->out_shape(c.spec, c.in, &out).ok());
  auto layer = c.type->make_double(c.spec, c.in, out);
  const int64_t n = 3;
  const int64_t num_params = c.type->params == nullptr ? 0 : [&] {
    int64_t k = 0;
    for (const ParamBlock& b : c.type->params(c.spec, c.in)) k += b.Size();
    return k;
  }();
  std::vector<double> params = Random(num_params, 1), x = Random(c.in.Size() * n, 2);
  const std::vector<double> r = Random(out.Size() * n, 3);
  PassInfo pass;
  pass.train = true;  // dropout drops: its mask is fixed for a pass
  pass.seed = 7;
  pass.step = 3;
  std::vector<double> y(out.Size() * n);
  auto loss = [&] {
    layer->Forward(params.data(), x.data(), n, pass, y.data());
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += r[i] * y[i];
    return l;
  };
  loss();
  std::vector<double> dx(x.size()), dparams(params.size(), 12345.0);
  layer->Backward(params.data(), x.data(), y.data(), r.data(), n, pass, dx.data(),
                  dparams.data());
  const double h = 1e-6;
  auto check = [&](std::vector<double>& v, const std::vector<double>& analytic,
                   const char* what) {
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + h;
      const double up = loss();
      v[i] = keep - h;
      const double down = loss();
      v[i] = keep;
      const double numeric = (up - down) / (2 * h);
      ASSERT_NEAR(analytic[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
          << c.name << ": d" << what << "[" << i << "]";
    }
  };
  check(x, dx, "x");
  check(params, dparams, "params");
}

// The float layer computes what the double one does, to float's precision.
TEST_P(EveryLayer, FloatAgreesWithDouble) {
  const Case& c = GetParam();
  Shape out;
  ASSERT_TRUE(c.type->out_shape(c.spec, c.in, &out).ok());
  auto ld = c.type->make_double(c.spec, c.in, out);
  auto lf = c.type->make_float(c.spec, c.in, out);
  const int64_t n = 4;
  int64_t num_params = 0;
  if (c.type->params != nullptr) {
    for (const ParamBlock& b : c.type->params(c.spec, c.in)) num_params += b.Size();
  }
  // Values a float holds exactly, so both start from the same numbers.
  auto exact = [](std::vector<double> v) {
    for (double& e : v) e = static_cast<float>(e);
    return v;
  };
  const std::vector<double> p = exact(Random(num_params, 4)), x = exact(Random(c.in.Size() * n, 5)),
                            r = exact(Random(out.Size() * n, 6));
  PassInfo pass;
  pass.train = true;
  std::vector<double> yd(out.Size() * n), dxd(x.size()), dpd(p.size());
  std::vector<float> yf(yd.size()), dxf(dxd.size()), dpf(dpd.size());
  const std::vector<float> pf = As<float>(p), xf = As<float>(x), rf = As<float>(r);
  ld->Forward(p.data(), x.data(), n, pass, yd.data());
  lf->Forward(pf.data(), xf.data(), n, pass, yf.data());
  ld->Backward(p.data(), x.data(), yd.data(), r.data(), n, pass, dxd.data(), dpd.data());
  lf->Backward(pf.data(), xf.data(), yf.data(), rf.data(), n, pass, dxf.data(), dpf.data());
  // 1e-5, relative beyond 1: sums of a few hundred products of gradients near 20 round by 1e-5.
  auto bound = [](double want) { return 1e-5 * std::max(1.0, std::fabs(want)); };
  for (size_t i = 0; i < yd.size(); ++i) {
    ASSERT_NEAR(yf[i], yd[i], bound(yd[i])) << c.name << " y " << i;
  }
  for (size_t i = 0; i < dxd.size(); ++i) {
    ASSERT_NEAR(dxf[i], dxd[i], bound(dxd[i])) << c.name << " dx " << i;
  }
  for (size_t i = 0; i < dpd.size(); ++i) {
    ASSERT_NEAR(dpf[i], dpd[i], bound(dpd[i])) << c.name << " dp " << i;
  }
}

// Max pooling's ties (a window of equal values, as ReLU's zeros make): the gradient goes to
// the first maximum in window order (rows, then columns), as PyTorch's CPU kernel sends it,
// and the others get +0; in channels that fill SIMD packets and in the last few that do not
// (19 = 2 packets of 8 floats + 3, or 4 of 4 doubles + 3), over windows that tile the input
// (stride 2) and windows that overlap (stride 1), where dx adds.
template <class S>
void ExpectTiesGoToTheFirstMaximum() {
  const int64_t c = 19;
  for (const int stride : {2, 1}) {
    SCOPED_TRACE("stride " + std::to_string(stride));
    const LayerSpec spec{"maxpool2d", {2, static_cast<double>(stride)}};
    const Shape in{c, 4, 4};
    Shape out;
    const LayerType& t = *FindLayerType("maxpool2d");
    ASSERT_TRUE(t.out_shape(spec, in, &out).ok());
    auto layer = t.maker<S>()(spec, in, out);
    // Channel e: every value -1 but a tie of 2 at the positions of window (0, 0) that e picks
    // (the bits of 1 + e % 15 over its four positions: often two or more).
    std::vector<S> x(in.Size(), S(-1)), y(out.Size()), dx(in.Size(), S(7));
    const int64_t pos[4][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    for (int64_t e = 0; e < c; ++e) {
      for (int q = 0; q < 4; ++q) {
        if (((1 + e % 15) >> q & 1) != 0) x[(pos[q][0] * in.w + pos[q][1]) * c + e] = S(2);
      }
    }
    PassInfo pass;
    pass.train = true;
    layer->Forward(nullptr, x.data(), 1, pass, y.data());
    std::vector<S> dy(out.Size());
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = S(1 + i % 5);
    layer->Backward(nullptr, x.data(), y.data(), dy.data(), 1, pass, dx.data(), nullptr);
    for (int64_t e = 0; e < c; ++e) {
      const int first = __builtin_ctz(static_cast<unsigned>(1 + e % 15));
      // Stride 2: window (0, 0) alone covers its four positions. Stride 1: it alone covers
      // (0, 0); the windows that overlap the others add what they send.
      for (int q = 0; q < (stride == 2 ? 4 : 1); ++q) {
        const int64_t at = (pos[q][0] * in.w + pos[q][1]) * c + e;
        EXPECT_EQ(dx[at], q == first ? dy[e] : S(0)) << "channel " << e << " position " << q;
        EXPECT_FALSE(std::signbit(dx[at])) << "channel " << e << " position " << q;
      }
    }
  }
}

TEST(MaxPool, TiesSendTheGradientToTheFirstMaximum) {
  ExpectTiesGoToTheFirstMaximum<float>();
  ExpectTiesGoToTheFirstMaximum<double>();
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryLayer, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string s = std::to_string(info.index) + "_" + info.param.name;
                           for (char& ch : s) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return s;
                         });

// TypeOf (nn/layers/type_of.h) gives every registered type its makers; the rest of its
// LayerType may leave a hook out (null).
TEST(LayerTypes, EveryTypeMakesItsLayerInBothPrecisions) {
  for (const LayerType* t : LayerTypes()) {
    EXPECT_NE(t->make_float, nullptr) << t->name;
    EXPECT_NE(t->make_double, nullptr) << t->name;
  }
}

TEST(EveryLayerCases, CoverEveryRegisteredTypeAndItsOptionalArguments) {
  const std::vector<Case> cases = Cases();
  for (const LayerType* t : LayerTypes()) {
    size_t want = 1;
    for (const LayerArg& a : t->args) want += !a.required;
    const std::string name = t->name;
    want += name == "conv2d"              ? 14
            : name == "maxpool2d"         ? 2
            : name == "avgpool2d"         ? 1
            : name == "adaptiveavgpool2d" ? 3
            // Its default, an empty body, is refused: its cases are the six above.
            : name == "residual" ? 5
                                 : 0;
    EXPECT_EQ(std::count_if(cases.begin(), cases.end(), [&](const Case& c) { return c.type == t; }),
              static_cast<long>(want))
        << t->name << " has a variant on no input shape";
  }
}

// ---- the layers against PyTorch's definitions, as plain NCHW loops -------------------------

// A tensor in PyTorch's NCHW order.
struct Tensor {
  int64_t n, c, h, w;
  std::vector<double> v;
  double& at(int64_t i, int64_t ch, int64_t y, int64_t x) { return v[((i * c + ch) * h + y) * w + x]; }
  double get(int64_t i, int64_t ch, int64_t y, int64_t x) const {
    return v[((i * c + ch) * h + y) * w + x];
  }
};

// torch.nn.functional.conv2d with weight (o, c, k, k), zero padding.
Tensor Conv(const Tensor& x, const double* weight, const double* bias, int64_t o, int64_t k,
            int64_t stride, int64_t pad) {
  Tensor y{x.n, o, (x.h + 2 * pad - k) / stride + 1, (x.w + 2 * pad - k) / stride + 1, {}};
  y.v.assign(y.n * y.c * y.h * y.w, 0.0);
  for (int64_t i = 0; i < x.n; ++i)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < y.h; ++oy)
        for (int64_t ox = 0; ox < y.w; ++ox) {
          double s = bias == nullptr ? 0 : bias[oc];  // bias=False: none
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

Tensor Pool(const Tensor& x, int64_t k, int64_t stride, bool max) {
  Tensor y{x.n, x.c, (x.h - k) / stride + 1, (x.w - k) / stride + 1, {}};
  y.v.assign(y.n * y.c * y.h * y.w, 0.0);
  for (int64_t i = 0; i < x.n; ++i)
    for (int64_t ch = 0; ch < x.c; ++ch)
      for (int64_t oy = 0; oy < y.h; ++oy)
        for (int64_t ox = 0; ox < y.w; ++ox) {
          double m = max ? -INFINITY : 0;
          for (int64_t ky = 0; ky < k; ++ky)
            for (int64_t kx = 0; kx < k; ++kx) {
              const double v = x.get(i, ch, oy * stride + ky, ox * stride + kx);
              m = max ? std::max(m, v) : m + v / static_cast<double>(k * k);
            }
          y.at(i, ch, oy, ox) = m;
        }
  return y;
}

// torch.nn.functional.adaptive_avg_pool2d(x, o): output row i averages the input rows
// [floor(i*h/o), ceil((i+1)*h/o)), columns alike.
Tensor AdaptivePool(const Tensor& x, int64_t o) {
  Tensor y{x.n, x.c, o, o, {}};
  y.v.assign(y.n * y.c * o * o, 0.0);
  auto start = [](int64_t i, int64_t o, int64_t n) { return (i * n) / o; };
  auto end = [](int64_t i, int64_t o, int64_t n) {
    return static_cast<int64_t>(std::ceil(static_cast<double>((i + 1) * n) / o));
  };
  for (int64_t i = 0; i < x.n; ++i)
    for (int64_t ch = 0; ch < x.c; ++ch)
      for (int64_t oy = 0; oy < o; ++oy)
        for (int64_t ox = 0; ox < o; ++ox) {
          double s = 0;
          int64_t count = 0;
          for (int64_t iy = start(oy, o, x.h); iy < end(oy, o, x.h); ++iy)
            for (int64_t ix = start(ox, o, x.w); ix < end(ox, o, x.w); ++ix, ++count)
              s += x.get(i, ch, iy, ix);
          y.at(i, ch, oy, ox) = s / static_cast<double>(count);
        }
  return y;
}

// Layers below the first with parameters get no backward pass, and that one computes no
// input gradient (nothing below it learns); the gradients stay those of finite differences.
TEST(Net, TheBackwardPassStopsAtTheFirstLayerWithParameters) {
  ModelSpec spec;
  spec.input = {2, 3, 3};
  spec.loss = Loss::kMse;
  ASSERT_TRUE(ParseModelText("relu,flatten,linear(4),tanh,linear(2)", &spec.layers).ok());
  Net<double> net(spec);
  const bool runs[] = {false, false, true, true, true};
  const bool input_gradient[] = {false, false, false, true, true};
  for (size_t i = 0; i < net.layers(); ++i) {
    EXPECT_EQ(net.RunsBackward(i), runs[i]) << "layer " << i;
    EXPECT_EQ(net.NeedsInputGradient(i), input_gradient[i]) << "layer " << i;
  }
  ModelSpec none = spec;
  ASSERT_TRUE(ParseModelText("relu,flatten", &none.layers).ok());
  Net<double> bare(none);
  EXPECT_FALSE(bare.RunsBackward(0) || bare.RunsBackward(1));

  const int64_t n = 3;
  std::vector<double> params = Random(net.ParamCount(), 1), grad(params.size());
  const std::vector<double> x = Random(spec.input.Size() * n, 2), y = Random(2 * n, 3);
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

// The model's raw outputs (mse: no softmax) through Net, against the loops given PyTorch's
// parameter layouts (ToTorch).
TEST(Layers, MatchPyTorchsDefinitionsWrittenAsLoops) {
  const std::string text =
      "conv2d(4,3,padding=1),relu,maxpool2d(2),conv2d(5,3,stride=2,padding=1),tanh,"
      "avgpool2d(2,stride=1),flatten,linear(6),sigmoid,dropout(0.3),linear(3)";
  ModelSpec spec;
  spec.input = {3, 9, 8};
  spec.loss = Loss::kMse;
  ASSERT_TRUE(ParseModelText(text, &spec.layers).ok());
  Net<double> net(spec);
  const int64_t n = 2;
  const std::vector<double> x = Random(spec.input.Size() * n, 8);
  std::vector<float> pf(spec.ParamCount());
  InitParams(spec, Init::kTorch, 9, pf.data());
  const std::vector<double> params(pf.begin(), pf.end());
  std::vector<double> got(net.Outputs() * n);
  net.Predict(params.data(), x.data(), n, got.data());

  // PyTorch's parameters, layer by layer.
  std::vector<std::vector<double>> torch;
  std::vector<Shape> shapes;
  ASSERT_TRUE(ResolveShapes(spec.input, spec.layers, &shapes).ok());
  Shape in = spec.input;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerType& t = *FindLayerType(spec.layers[i].kind);
    std::vector<float> ours(params.begin() + net.param_offset(i),
                            params.begin() + (i + 1 < spec.layers.size()
                                                  ? net.param_offset(i + 1)
                                                  : net.ParamCount()));
    std::vector<float> theirs(ours.size());
    ToTorch(t, spec.layers[i], in, ours.data(), theirs.data());
    torch.emplace_back(theirs.begin(), theirs.end());
    in = shapes[i];
  }
  Tensor a{n, 3, 9, 8, x};  // the data is (c, h, w) per sample, as PyTorch's
  a = Conv(a, torch[0].data(), torch[0].data() + 4 * 3 * 9, 4, 3, 1, 1);
  for (double& v : a.v) v = std::max(v, 0.0);
  a = Pool(a, 2, 2, true);
  a = Conv(a, torch[3].data(), torch[3].data() + 5 * 4 * 9, 5, 3, 2, 1);
  for (double& v : a.v) v = std::tanh(v);
  a = Pool(a, 2, 1, false);
  // flatten: NCHW is already each sample's (c, h, w) order.
  const int64_t f = a.c * a.h * a.w;
  ASSERT_EQ(f, shapes[6].Size());
  auto linear = [&](const std::vector<double>& in_v, int64_t k, const std::vector<double>& p,
                    int64_t out) {
    std::vector<double> o(n * out);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t u = 0; u < out; ++u) {
        double s = p[out * k + u];
        for (int64_t j = 0; j < k; ++j) s += p[u * k + j] * in_v[i * k + j];
        o[i * out + u] = s;
      }
    return o;
  };
  std::vector<double> h = linear(a.v, f, torch[7], 6);
  for (double& v : h) v = 1 / (1 + std::exp(-v));
  const std::vector<double> want = linear(h, 6, torch[10], 3);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

// A 1x1 feature map is an image, as in PyTorch: a convolution of a kernel as large as its input
// leaves 1x1 maps for a 1x1 convolution (and a padded 3x3 one) to read. Net against the loops.
TEST(Layers, OneByOneMapsMatchPyTorchsDefinitions) {
  ModelSpec spec;
  spec.input = {2, 8, 8};
  spec.loss = Loss::kMse;
  ASSERT_TRUE(ParseModelText("conv2d(8,8),relu,conv2d(4,1),conv2d(3,3,padding=1),maxpool2d(1),"
                             "flatten,linear(2)",
                             &spec.layers)
                  .ok());
  std::vector<Shape> shapes;
  const Status resolved = ResolveShapes(spec.input, spec.layers, &shapes);
  ASSERT_TRUE(resolved.ok()) << resolved.message();
  EXPECT_EQ(shapes[2], (Shape{4, 1, 1}));
  EXPECT_EQ(shapes[4], (Shape{3, 1, 1}));
  Net<double> net(spec);
  const int64_t n = 3;
  const std::vector<double> x = Random(spec.input.Size() * n, 21);
  std::vector<float> pf(spec.ParamCount());
  InitParams(spec, Init::kTorch, 22, pf.data());
  const std::vector<double> params(pf.begin(), pf.end());
  std::vector<double> got(net.Outputs() * n);
  net.Predict(params.data(), x.data(), n, got.data());

  // PyTorch's layouts of the convolutions' weights.
  auto torch = [&](size_t i, Shape in) {
    const LayerType& t = *FindLayerType(spec.layers[i].kind);
    const int64_t size = ParamSize(t, spec.layers[i], in);
    std::vector<float> theirs(size);
    ToTorch(t, spec.layers[i], in, pf.data() + net.param_offset(i), theirs.data());
    return std::vector<double>(theirs.begin(), theirs.end());
  };
  const std::vector<double> c1 = torch(0, spec.input), c2 = torch(2, shapes[1]),
                            c3 = torch(3, shapes[2]);
  Tensor a{n, 2, 8, 8, x};
  a = Conv(a, c1.data(), c1.data() + 8 * 2 * 64, 8, 8, 1, 0);
  for (double& v : a.v) v = std::max(v, 0.0);
  a = Conv(a, c2.data(), c2.data() + 4 * 8, 4, 1, 1, 0);
  a = Conv(a, c3.data(), c3.data() + 3 * 4 * 9, 3, 3, 1, 1);
  ASSERT_EQ(a.h * a.w, 1);
  const double* lin = params.data() + net.param_offset(6);  // W (2 x 3, column-major), b
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t u = 0; u < 2; ++u) {
      double s = lin[6 + u];
      for (int64_t j = 0; j < 3; ++j) s += lin[u + j * 2] * a.get(i, j, 0, 0);
      EXPECT_NEAR(got[i * 2 + u], s, 1e-12) << "sample " << i << ", output " << u;
    }
  }
}

// The layers of a ResNet's stem and head: a convolution without a bias, global average
// pooling, and adaptive pooling whose bins overlap (7 rows in 4 bins: [0,2), [1,4), [3,6),
// [5,7)). Net against the loops, with PyTorch's layouts (a bias-free conv2d exports its weight
// alone).
TEST(Layers, BiasFreeConvolutionAndAdaptivePoolingMatchPyTorchsDefinitions) {
  ModelSpec spec;
  spec.input = {2, 9, 8};
  spec.loss = Loss::kMse;
  ASSERT_TRUE(ParseModelText("conv2d(4,3,padding=1,bias=false),relu,adaptiveavgpool2d(1),"
                             "conv2d(3,1,bias=false),conv2d(5,3,padding=1),adaptiveavgpool2d(4),"
                             "flatten,linear(3)",
                             &spec.layers)
                  .ok());
  std::vector<Shape> shapes;
  ASSERT_TRUE(ResolveShapes(spec.input, spec.layers, &shapes).ok());
  EXPECT_EQ(shapes[2], (Shape{4, 1, 1}));
  EXPECT_EQ(shapes[5], (Shape{5, 4, 4}));
  EXPECT_EQ(spec.ParamCount(), 4u * 2 * 9 + 3 * 4 + (5 * 3 * 9 + 5) + (80 * 3 + 3));
  Net<double> net(spec);
  const int64_t n = 3;
  std::vector<double> x = Random(spec.input.Size() * n, 31);
  std::vector<float> pf(spec.ParamCount());
  InitParams(spec, Init::kTorch, 32, pf.data());
  const std::vector<double> params(pf.begin(), pf.end());
  std::vector<double> got(net.Outputs() * n);
  net.Predict(params.data(), x.data(), n, got.data());

  auto torch = [&](size_t i, Shape in) {
    const LayerType& t = *FindLayerType(spec.layers[i].kind);
    std::vector<float> theirs(ParamSize(t, spec.layers[i], in));
    ToTorch(t, spec.layers[i], in, pf.data() + net.param_offset(i), theirs.data());
    return std::vector<double>(theirs.begin(), theirs.end());
  };
  const std::vector<double> c1 = torch(0, spec.input), c2 = torch(3, shapes[2]),
                            c3 = torch(4, shapes[3]);
  EXPECT_EQ(c1.size(), 4u * 2 * 9);
  Tensor a{n, 2, 9, 8, x};
  a = Conv(a, c1.data(), nullptr, 4, 3, 1, 1);
  for (double& v : a.v) v = std::max(v, 0.0);
  a = AdaptivePool(a, 1);
  a = Conv(a, c2.data(), nullptr, 3, 1, 1, 0);
  a = Conv(a, c3.data(), c3.data() + 5 * 3 * 9, 5, 3, 1, 1);
  // Padding 1 keeps the 1x1 map; adaptiveavgpool2d(4) repeats its pixel in every bin.
  a = AdaptivePool(a, 4);
  ASSERT_EQ(a.c * a.h * a.w, 80);
  const double* lin = params.data() + net.param_offset(7);  // W (3 x 80, column-major), b
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t u = 0; u < 3; ++u) {
      double s = lin[240 + u];
      for (int64_t j = 0; j < 80; ++j) s += lin[u + j * 3] * a.v[i * 80 + j];
      EXPECT_NEAR(got[i * 3 + u], s, 1e-12) << "sample " << i << ", output " << u;
    }
  }
}

// adaptiveavgpool2d's bins where they overlap and where the output is larger than the input,
// against PyTorch's rule written as loops.
TEST(Layers, AdaptivePoolingBinsArePyTorchs) {
  const LayerType& t = *FindLayerType("adaptiveavgpool2d");
  for (const auto& [o, in] : {std::pair<int64_t, Shape>{4, {3, 7, 6}}, {3, {2, 2, 5}},
                              {1, {5, 4, 3}}, {2, {4, 5, 5}}}) {
    const LayerSpec spec{"adaptiveavgpool2d", {static_cast<double>(o)}};
    Shape out;
    ASSERT_TRUE(t.out_shape(spec, in, &out).ok());
    ASSERT_EQ(out, (Shape{in.c, o, o}));
    auto layer = t.make_double(spec, in, out);
    const int64_t n = 2;
    const std::vector<double> nchw = Random(in.Size() * n, 40);
    // Ours is channels-last: pixel after pixel, the channels of a pixel together.
    std::vector<double> x(nchw.size()), y(out.Size() * n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < in.c; ++ch)
        for (int64_t p = 0; p < in.h * in.w; ++p)
          x[i * in.Size() + p * in.c + ch] = nchw[(i * in.c + ch) * in.h * in.w + p];
    layer->Forward(nullptr, x.data(), n, PassInfo{}, y.data());
    const Tensor want = AdaptivePool(Tensor{n, in.c, in.h, in.w, nchw}, o);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < in.c; ++ch)
        for (int64_t p = 0; p < o * o; ++p)
          EXPECT_NEAR(y[i * out.Size() + p * in.c + ch], want.v[(i * in.c + ch) * o * o + p],
                      1e-15)
              << "output " << o << " on " << in.Text() << ": sample " << i << " channel " << ch
              << " pixel " << p;
  }
}

// --precision bf16 on the direct kernels' layers: the forward pass and the input gradient round
// their inputs to bf16 (within bf16's rounding of the float pass, and not equal to it); the
// weight gradient is the bf16 product's from 256 taps (32 channels 3x3) and float below (16
// channels 3x3: the float pass's bits). A strided layer's input gradient is the product's.
TEST(Conv2d, Bf16RoundsWhatEachPassPromises) {
  if (!UsedCpu().avx512_bf16) GTEST_SKIP() << "this CPU has no avx512_bf16";
  const LayerType& t = *FindLayerType("conv2d");
  using Case = std::tuple<const char*, Shape, bool>;  // model text, input, float dW
  for (const Case& c : {Case{"conv2d(32,3,padding=1,bias=false)", {32, 8, 8}, false},
                        Case{"conv2d(16,3,padding=1,bias=false)", {16, 8, 8}, true},
                        Case{"conv2d(32,3,stride=2,padding=1)", {16, 16, 16}, true}}) {
    // Named copies, not a structured binding: the lambda below captures them.
    const std::string text = std::get<0>(c);
    const Shape in = std::get<1>(c);
    const bool float_weight_grad = std::get<2>(c);
    SCOPED_TRACE(text + " on " + in.Text());
    std::vector<LayerSpec> l;
    ASSERT_TRUE(ParseModelText(text, &l).ok());
    Shape out;
    ASSERT_TRUE(t.out_shape(l[0], in, &out).ok());
    const int64_t n = 3;
    const std::vector<float> w = As<float>(Random(ParamSize(t, l[0], in), 51)),
                             x = As<float>(Random(in.Size() * n, 52)),
                             dy = As<float>(Random(out.Size() * n, 53));
    struct Pass {
      std::vector<float> y, dx, g;
    };
    auto run = [&](ComputeType ct) {
      EXPECT_TRUE(SetProductInputs(ct));
      auto layer = t.make_float(l[0], in, out);
      Pass p{std::vector<float>(out.Size() * n), std::vector<float>(x.size()),
             std::vector<float>(w.size())};
      layer->Forward(w.data(), x.data(), n, PassInfo{}, p.y.data());
      layer->Backward(w.data(), x.data(), p.y.data(), dy.data(), n, PassInfo{}, p.dx.data(),
                      p.g.data());
      SetProductInputs(ComputeType::kFloat);
      return p;
    };
    const Pass f = run(ComputeType::kFloat), b = run(ComputeType::kBf16);
    // bf16 keeps 8 bits: each product is off by 2^-8 of its size at most. Measured here: the
    // largest difference 1.7e-3 to 2.4e-3 of the largest value; the bound is 2^-7 (7.8e-3).
    auto near = [](const std::vector<float>& got, const std::vector<float>& want) {
      double worst = 0, largest = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::fabs(double{got[i]} - want[i]));
        largest = std::max(largest, std::fabs(double{want[i]}));
      }
      return worst > 0 && worst <= largest * 0x1p-7;
    };
    EXPECT_TRUE(near(b.y, f.y)) << "y";
    EXPECT_TRUE(near(b.dx, f.dx)) << "dx";
    if (float_weight_grad) {
      EXPECT_EQ(b.g, f.g) << "the weight gradient is not the float pass's";
    } else {
      EXPECT_TRUE(near(b.g, f.g)) << "dW";
    }
  }
}

// bias=false is bias=true with a bias of zeros, bit for bit in float, on each of the
// convolution's kernels (direct forward and weight gradient, im2col and the product) and with
// the product's inputs in bf16 where the CPU has avx512_bf16; its gradient has no bias block.
TEST(Conv2d, WithoutABiasIsABiasOfZerosToTheBit) {
  std::vector<ComputeType> inputs = {ComputeType::kFloat};
  if (UsedCpu().avx512_bf16) inputs.push_back(ComputeType::kBf16);
  const LayerType& t = *FindLayerType("conv2d");
  for (const ComputeType ct : inputs) {
    ASSERT_TRUE(SetProductInputs(ct));
    for (const auto& [text, in] :
         {std::pair<const char*, Shape>{"conv2d(16,3,padding=1", {1, 5, 8}},
          {"conv2d(32,5,stride=2,padding=2", {2, 7, 9}},
          {"conv2d(16,2", {6, 5, 8}},
          {"conv2d(24,3,padding=1", {8, 6, 7}}}) {
      SCOPED_TRACE(std::string(text) + ") on " + in.Text() +
                   (ct == ComputeType::kBf16 ? ", bf16" : ", float"));
      std::vector<LayerSpec> with, without;
      ASSERT_TRUE(ParseModelText(std::string(text) + ")", &with).ok());
      ASSERT_TRUE(ParseModelText(std::string(text) + ",bias=false)", &without).ok());
      Shape out;
      ASSERT_TRUE(t.out_shape(with[0], in, &out).ok());
      const int64_t weights = ParamSize(t, without[0], in), n = 5;
      ASSERT_EQ(ParamSize(t, with[0], in), weights + out.c);
      auto a = t.make_float(with[0], in, out);
      auto b = t.make_float(without[0], in, out);
      const std::vector<float> w = As<float>(Random(weights, 41)),
                               x = As<float>(Random(in.Size() * n, 42)),
                               dy = As<float>(Random(out.Size() * n, 43));
      std::vector<float> wb = w;
      wb.resize(weights + out.c, 0.0f);
      std::vector<float> ya(out.Size() * n), yb(ya.size()), dxa(x.size()), dxb(x.size()),
          ga(wb.size(), 7.0f), gb(w.size() + 1, 7.0f);
      a->Forward(wb.data(), x.data(), n, PassInfo{}, ya.data());
      b->Forward(w.data(), x.data(), n, PassInfo{}, yb.data());
      a->Backward(wb.data(), x.data(), ya.data(), dy.data(), n, PassInfo{}, dxa.data(), ga.data());
      b->Backward(w.data(), x.data(), yb.data(), dy.data(), n, PassInfo{}, dxb.data(), gb.data());
      EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float))) << "y";
      EXPECT_EQ(0, std::memcmp(dxa.data(), dxb.data(), dxa.size() * sizeof(float))) << "dx";
      EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), w.size() * sizeof(float))) << "dW";
      EXPECT_EQ(gb.back(), 7.0f) << "the gradient of a bias-free layer wrote past its weights";
    }
  }
  SetProductInputs(ComputeType::kFloat);
}

// ---- the model text and shapes -------------------------------------------------------------

TEST(ModelText, ParsesPyTorchsNamesAndPrintsItsCanonicalForm) {
  std::vector<LayerSpec> l;
  ASSERT_TRUE(ParseModelText(" conv2d(32, 5, padding=2), relu,maxpool2d(2),flatten,"
                             "dropout(p=0.25),linear(10)",
                             &l)
                  .ok());
  ASSERT_EQ(l.size(), 6u);
  EXPECT_EQ(l[0], (LayerSpec{"conv2d", {32, 5, 1, 2, 1}}));
  EXPECT_EQ(l[2], (LayerSpec{"maxpool2d", {2, 0}}));
  EXPECT_EQ(l[4], (LayerSpec{"dropout", {0.25}}));
  const std::string canonical = "conv2d(32,5,padding=2),relu,maxpool2d(2),flatten,dropout(p=0.25),linear(10)";
  EXPECT_EQ(ModelText(l), canonical);
  std::vector<LayerSpec> again;
  ASSERT_TRUE(ParseModelText(canonical, &again).ok());
  EXPECT_EQ(again, l);
  ASSERT_TRUE(ParseModelText("dropout,conv2d(8,3,1,1)", &l).ok());
  EXPECT_EQ(ModelText(l), "dropout,conv2d(8,3,padding=1)");
}

// bias is PyTorch's switch: false prints, true (the default) does not, so every model text
// written before it keeps its bytes; PyTorch's spellings True and False read too, and a stored
// text holds the canonical one.
TEST(ModelText, BiasIsASwitchAndAdaptivePoolingTakesItsOutputSize) {
  std::vector<LayerSpec> l;
  ASSERT_TRUE(ParseModelText("conv2d(16,3,padding=1,bias=false),relu,adaptiveavgpool2d(1),"
                             "flatten,linear(10)",
                             &l)
                  .ok());
  EXPECT_EQ(l[0], (LayerSpec{"conv2d", {16, 3, 1, 1, 0}}));
  EXPECT_EQ(l[2], (LayerSpec{"adaptiveavgpool2d", {1}}));
  const std::string canonical =
      "conv2d(16,3,padding=1,bias=false),relu,adaptiveavgpool2d(1),flatten,linear(10)";
  EXPECT_EQ(ModelText(l), canonical);
  std::vector<LayerSpec> again;
  EXPECT_TRUE(ParseStoredModelText(canonical, &again).ok());
  EXPECT_EQ(again, l);
  const std::pair<const char*, const char*> spellings[] = {
      {"conv2d(16,3,padding=1,bias=true)", "conv2d(16,3,padding=1)"},
      {"conv2d(16, 3, bias = False)", "conv2d(16,3,bias=false)"},
      {"conv2d(16,3,bias=True)", "conv2d(16,3)"},
      {"conv2d(8,3,1,0,false)", "conv2d(8,3,bias=false)"},
      {"adaptiveavgpool2d(output_size=2)", "adaptiveavgpool2d(2)"},
  };
  for (const auto& [text, want] : spellings) {
    ASSERT_TRUE(ParseModelText(text, &l).ok()) << text;
    EXPECT_EQ(ModelText(l), want) << text;
  }
  EXPECT_FALSE(ParseStoredModelText("conv2d(16,3,bias=False)", &l).ok());
  EXPECT_FALSE(ParseStoredModelText("conv2d(16,3,bias=true)", &l).ok());

  const std::pair<const char*, const char*> bad[] = {
      {"conv2d(8,3,bias=0)", "layer 1 'conv2d(8,3,bias=0)': bias wants true or false, not '0'"},
      {"conv2d(8,3,bias=1)", "bias wants true or false, not '1'"},
      {"conv2d(8,3,bias=no)", "bias wants true or false, not 'no'"},
      {"conv2d(8,3,bias=)", "bias wants true or false, not ''"},
      {"conv2d(8,3,bias=false,bias=true)", "bias given twice"},
      {"conv2d(8,3,biass=false)",
       "conv2d has no argument 'biass' (its arguments: out, kernel, stride, padding, bias)"},
      {"adaptiveavgpool2d", "adaptiveavgpool2d needs output_size (its arguments: output_size)"},
      {"adaptiveavgpool2d(0)", "output_size must be in [1, 1024], not 0"},
      {"adaptiveavgpool2d(1.5)", "output_size wants a whole number, not 1.5"},
      {"adaptiveavgpool2d(false)", "output_size wants a number, not 'false'"},
  };
  for (const auto& [text, want] : bad) {
    const Status st = ParseModelText(text, &l);
    EXPECT_FALSE(st.ok()) << text;
    EXPECT_NE(st.message().find(want), std::string::npos) << text << ": " << st.message();
  }
  // adaptiveavgpool2d takes images, 1x1 maps too, and gives one; not flat vectors.
  std::vector<Shape> shapes;
  ASSERT_TRUE(
      ParseModelText("conv2d(8,3,bias=false),adaptiveavgpool2d(1),flatten,linear(3)", &l).ok());
  ASSERT_TRUE(ResolveShapes({1, 8, 8}, l, &shapes).ok());
  EXPECT_EQ(shapes[1], (Shape{8, 1, 1}));
  EXPECT_EQ((ModelSpec{{1, 8, 8}, l, Loss::kXent}.ParamCount()), 8u * 9 + 8 * 3 + 3);
  ASSERT_TRUE(ParseModelText("adaptiveavgpool2d(2)", &l).ok());
  ASSERT_TRUE(ResolveShapes({4, 1, 1}, l, &shapes).ok());
  EXPECT_EQ(shapes[0], (Shape{4, 2, 2}));
  ASSERT_TRUE(ParseModelText("flatten,adaptiveavgpool2d(1)", &l).ok());
  EXPECT_EQ(ResolveShapes({2, 4, 4}, l, &shapes).message(),
            "adaptiveavgpool2d #1 (layer 2): input 32 is flat (the output of flatten #1 (layer "
            "1)), not an image");
}

TEST(ModelText, RefusalsNameTheLayerAndWhatIsWrong) {
  const std::pair<const char*, const char*> bad[] = {
      {"conv2d(32,5),relu,softmax", "layer 3 'softmax': unknown layer 'softmax' (layers: "},
      {"conv2d(32)", "layer 1 'conv2d(32)': conv2d needs kernel"},
      {"linear(10,3)", "linear takes 1 arguments at most (its arguments: out)"},
      {"conv2d(8,3,paddin=1)",
       "conv2d has no argument 'paddin' (its arguments: out, kernel, stride, padding, bias)"},
      {"conv2d(8,3,padding=1,2)", "an argument by position after one by name"},
      {"linear(out=3,out=4)", "out given twice"},
      {"linear(2.5)", "out wants a whole number, not 2.5"},
      {"linear(0)", "out must be in [1, 65536], not 0"},
      {"dropout(1)", "p must be in [0, 0.99], not 1"},
      {"linear(ten)", "out wants a number, not 'ten'"},
      {"relu,,linear(2)", "layer 2 '': empty layer"},
      {"linear(2", "unbalanced parentheses in 'linear(2'"},
      {"linear(2)x", "text after its closing parenthesis"},
  };
  for (const auto& [text, want] : bad) {
    std::vector<LayerSpec> l;
    const Status s = ParseModelText(text, &l);
    EXPECT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << text << ": " << s.message();
  }
}

TEST(Shapes, ResolveAndNameTheLayerThatDoesNotFit) {
  std::vector<LayerSpec> l;
  std::vector<Shape> shapes;
  ASSERT_TRUE(ParseModelText("conv2d(32,5,padding=2),relu,maxpool2d(2),conv2d(64,5,padding=2),"
                             "relu,maxpool2d(2),flatten,linear(128),relu,linear(10)",
                             &l)
                  .ok());
  ASSERT_TRUE(ResolveShapes({1, 28, 28}, l, &shapes).ok());
  EXPECT_EQ(shapes[2], (Shape{32, 14, 14}));
  EXPECT_EQ(shapes[5], (Shape{64, 7, 7}));
  EXPECT_EQ(shapes[6], (Shape{3136, 1, 1}));
  EXPECT_EQ(shapes[9], (Shape{10, 1, 1}));
  ModelSpec cnn_small{{1, 28, 28}, l, Loss::kXent};
  EXPECT_EQ(cnn_small.ParamCount(), 32u * 25 + 32 + 64 * 32 * 25 + 64 + 3136 * 128 + 128 + 1290);

  const std::pair<const char*, const char*> bad[] = {
      {"conv2d(32,5,padding=2),relu,maxpool2d(2),conv2d(64,15)",
       "conv2d #2 (layer 4): input 32x14x14, kernel 15 with padding 0 leaves no output"},
      {"conv2d(8,3),linear(10)",
       "linear #1 (layer 2): input 8x26x26 is not flat (put flatten before it)"},
      {"maxpool2d(30)",
       "maxpool2d #1 (layer 1): input 1x28x28: the window of kernel 30 (30x30) does not fit in "
       "28x28"},
  };
  for (const auto& [text, want] : bad) {
    ASSERT_TRUE(ParseModelText(text, &l).ok()) << text;
    const Status s = ResolveShapes({1, 28, 28}, l, &shapes);
    EXPECT_EQ(s.message(), want);
  }
  ASSERT_TRUE(ParseModelText("relu,conv2d(8,1)", &l).ok());
  EXPECT_EQ(ResolveShapes({784, 1, 1}, l, &shapes, /*flat_input=*/true).message(),
            "conv2d #1 (layer 2): input 784 has no image shape (--input-shape C,H,W gives flat "
            "data one)");
}

// A map of 1x1 is an image (conv2d and the pools take it, as PyTorch's do); a flat vector, the
// output of linear or flatten, is not (PyTorch's conv2d refuses (n, features)). A window that
// does not fit says so, naming the input it gets.
TEST(Shapes, AOneByOneMapIsAnImage) {
  std::vector<LayerSpec> l;
  std::vector<Shape> shapes;
  const std::pair<const char*, Shape> ok[] = {
      {"conv2d(8,8),conv2d(4,1)", {4, 1, 1}},
      {"conv2d(8,8),relu,dropout,conv2d(4,3,padding=1)", {4, 1, 1}},
      {"conv2d(8,8),maxpool2d(1),avgpool2d(1),flatten,linear(3)", {3, 1, 1}},
      {"conv2d(8,8),linear(3)", {3, 1, 1}},  // a 1x1 map is already in flatten's order
  };
  for (const auto& [text, out] : ok) {
    ASSERT_TRUE(ParseModelText(text, &l).ok()) << text;
    const Status s = ResolveShapes({1, 8, 8}, l, &shapes);
    EXPECT_TRUE(s.ok()) << text << ": " << s.message();
    if (s.ok()) {
      EXPECT_EQ(shapes.back(), out) << text;
    }
  }
  ASSERT_TRUE(ParseModelText("conv2d(6,1),relu,conv2d(2,3,padding=1)", &l).ok());
  const Status given = ResolveShapes({4, 1, 1}, l, &shapes);  // --input-shape 4,1,1
  EXPECT_TRUE(given.ok()) << given.message();

  const std::pair<const char*, const char*> bad[] = {
      {"conv2d(8,8),maxpool2d(2)",
       "maxpool2d #1 (layer 2): input 8x1x1: the window of kernel 2 (2x2) does not fit in 1x1"},
      {"conv2d(8,7),avgpool2d(3)",
       "avgpool2d #1 (layer 2): input 8x2x2: the window of kernel 3 (3x3) does not fit in 2x2"},
      {"conv2d(8,8),conv2d(4,3)",
       "conv2d #2 (layer 2): input 8x1x1, kernel 3 with padding 0 leaves no output"},
      {"flatten,linear(16),relu,conv2d(4,1)",
       "conv2d #1 (layer 4): input 16 is flat (the output of linear #1 (layer 2)), not an image"},
      {"conv2d(8,8),flatten,maxpool2d(1)",
       "maxpool2d #1 (layer 3): input 8 is flat (the output of flatten #1 (layer 2)), not an "
       "image"},
  };
  for (const auto& [text, want] : bad) {
    ASSERT_TRUE(ParseModelText(text, &l).ok()) << text;
    EXPECT_EQ(ResolveShapes({1, 8, 8}, l, &shapes).message(), want) << text;
  }
}

// ---- the MLP of --layers ------------------------------------------------------------------

// --layers' shorthand is the model of linear and activation layers it stands for, and the
// model says it is that MLP again (model files and checkpoint fingerprints of MLPs keep the
// encoding of the releases before layers). The bits are tests/fixture_test.cc's.
TEST(Mlp, TheShorthandIsItsLayersAndBack) {
  const ModelSpec m = ModelSpec::Mlp({5, 7, 6, 3}, Activation::kRelu, Loss::kXent);
  EXPECT_EQ(m.Text(), "linear(7),relu,linear(6),relu,linear(3)");
  EXPECT_EQ(m.input, (Shape{5, 1, 1}));
  EXPECT_EQ(m.ParamCount(), 5u * 7 + 7 + 7 * 6 + 6 + 6 * 3 + 3);
  EXPECT_EQ(m.outputs(), 3);
  std::vector<int> sizes;
  Activation f = Activation::kTanh;
  ASSERT_TRUE(m.AsMlp(&sizes, &f));
  EXPECT_EQ(sizes, (std::vector<int>{5, 7, 6, 3}));
  EXPECT_EQ(f, Activation::kRelu);
  const ModelSpec linear = ModelSpec::Mlp({4, 3, 2}, Activation::kIdentity, Loss::kMse);
  EXPECT_EQ(linear.Text(), "linear(3),linear(2)");
  ASSERT_TRUE(linear.AsMlp(&sizes, &f));
  EXPECT_EQ(f, Activation::kIdentity);
  // Not MLPs: mixed activations, an activation first or last, other layers, image inputs.
  for (const char* text : {"linear(3),relu,linear(3),tanh,linear(2)", "relu,linear(2)",
                           "linear(2),relu", "linear(3),dropout,linear(2)",
                           "linear(3),relu,relu,linear(2)", "linear(3),relu,linear(3),linear(2)"}) {
    ModelSpec x;
    x.input = {4, 1, 1};
    ASSERT_TRUE(ParseModelText(text, &x.layers).ok()) << text;
    EXPECT_FALSE(x.AsMlp(&sizes, &f)) << text;
  }
  ModelSpec image = m;
  image.input = {5, 1, 2};
  EXPECT_FALSE(image.AsMlp(&sizes, &f));
}

// ---- dropout ---------------------------------------------------------------------------------

// The mask of a sample depends on its global row, not on where it sits in the batch: one
// worker's batch and two workers' halves drop the same units; eval drops nothing.
TEST(Dropout, TheMaskFollowsTheRowNotTheBatch) {
  const LayerSpec spec{"dropout", {0.5}};
  const Shape in{40, 1, 1};
  auto layer = FindLayerType("dropout")->make_float(spec, in, in);
  const int64_t n = 6;
  std::vector<float> x(in.Size() * n, 1.0f), whole(x.size()), half(x.size());
  const int64_t rows[n] = {17, 3, 99, 4, 250, 8};
  PassInfo pass{true, 42, 5, rows};
  layer->Forward(nullptr, x.data(), n, pass, whole.data());
  PassInfo first = pass, second = pass;
  second.rows = rows + 3;
  layer->Forward(nullptr, x.data(), 3, first, half.data());
  layer->Forward(nullptr, x.data() + 3 * 40, 3, second, half.data() + 3 * 40);
  EXPECT_EQ(whole, half);
  const long dropped = std::count(whole.begin(), whole.end(), 0.0f);
  EXPECT_GT(dropped, 80);
  EXPECT_LT(dropped, 160);
  EXPECT_EQ(std::count(whole.begin(), whole.end(), 2.0f), static_cast<long>(whole.size()) - dropped);
  // Another step, seed or row draws another mask; the same ones draw this one again.
  std::vector<float> other(x.size());
  PassInfo next = pass;
  next.step = 6;
  layer->Forward(nullptr, x.data(), n, next, other.data());
  EXPECT_NE(whole, other);
  layer->Forward(nullptr, x.data(), n, pass, other.data());
  EXPECT_EQ(whole, other);
  pass.train = false;
  layer->Forward(nullptr, x.data(), n, pass, other.data());
  EXPECT_EQ(other, x);
}

}  // namespace
}  // namespace shmtrain::nn
