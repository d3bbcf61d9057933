// conv2d(out, kernel, stride=1, padding=0, bias=true): PyTorch's nn.Conv2d with square
// kernels, zero padding, no dilation and no groups; bias=false has no bias parameter at all
// (PyTorch's, for convolutions that batch norm follows).
//
// Two kernels, chosen per layer by its shape:
// - im2col + one matrix product (nn/gemm.h) per chunk of samples, for layers with many input
//   channels. The input is channels-last (nn/layer.h), so the kernel's window over one input
//   row is one contiguous run of memory, and im2col is a few copies per output pixel; the
//   product's result (out x pixels, column-major) is the output, channels-last, with nothing
//   to reorder. Samples are taken in chunks whose im2col matrix stays near the cache
//   (kColTarget), not the whole batch's; the weights, the same operand in every chunk's
//   product, are packed once a pass (nn/gemm.h's SameA), not once a chunk.
// - A direct convolution for layers with few input channels (kDirectMaxIn), typically the
//   first one on images: there the product's inner dimension is k*k*c (25 on a 5x5 kernel
//   over grey images), too short for the GEMM to run near its rate, and im2col moves 25
//   floats for every output pixel. The direct kernel reads one zero-padded sample (a few KB,
//   in L1) and keeps a tile of kTile output pixels x kOb output channels in registers; its
//   weight gradient keeps kTile kernel taps x kOb channels. bench/conv_bench measures both
//   (docs/benchmarks.md). Its weight gradient also serves layers with more input
//   channels on the AVX2 path, where it beats Eigen's product; on the AVX-512 path (nn/cpu.h)
//   those take nn/gemm.h's product, which is faster there and takes --precision bf16. The
//   direct kernels compute in float whatever the precision; on the AVX-512 path they run
//   nn/kernels/direct_conv.h's tiles (16 lanes, 12 pixels x 32 channels), which sum in the
//   same order by the same FMAs and so give the same bits.
// Both sum in a fixed order: the same input gives the same bits on every run.
//
// Parameters: W (out x K, column-major) with K = kernel*kernel*in_channels ordered (ky, kx,
// c), then b (out) unless bias=false. PyTorch's weight is (out, in, kh, kw): export reorders.
// Without a bias the direct kernels start their sums from a vector of zeros (the same bits as
// a bias of zeros), and the product's output is left as it is.
#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>

#include "nn/cpu.h"
#include "nn/gemm.h"
#include "nn/kernels/direct_conv.h"
#include "nn/layer.h"
#include "nn/rng.h"

namespace shmtrain::nn {
namespace {

using Eigen::internal::pmadd;
using Eigen::internal::ploadu;
using Eigen::internal::pset1;
using Eigen::internal::pstoreu;

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// Elements of the im2col matrix of one chunk of samples.
constexpr int64_t kColTarget = int64_t{1} << 18;
// The direct kernel: for layers of at most kDirectMaxIn input channels and a multiple of kOb
// output channels; tiles of up to kTile pixels (forward) or kernel taps (weight gradient):
// kTile x kOb accumulators fill 12 of AVX2's 16 registers with floats.
constexpr int64_t kDirectMaxIn = 4, kOb = 16, kTile = 6;

bool HasBias(const LayerSpec& spec) { return spec.args[4] != 0; }

// f(std::integral_constant<int, N>{}, i) for tiles [i, i+N) covering [0, n): N = kTile but
// for a narrower last tile. N is a constant so that the tile's loops unroll into registers.
template <class F>
void ForTiles(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + kTile <= n; i += kTile) f(std::integral_constant<int, kTile>{}, i);
  switch (n - i) {
    case 5: return f(std::integral_constant<int, 5>{}, i);
    case 4: return f(std::integral_constant<int, 4>{}, i);
    case 3: return f(std::integral_constant<int, 3>{}, i);
    case 2: return f(std::integral_constant<int, 2>{}, i);
    case 1: return f(std::integral_constant<int, 1>{}, i);
    default: return;
  }
}

// What the layer's kernels hold, from its spec and shapes alone: the layer sizes its scratch
// from it and Scratch() counts it for nn::PassBytes, so the memory the master checks is the
// memory a worker allocates. Sizes saturate at INT64_MAX: a plan that large is refused by that
// check before a layer is built.
struct ConvPlan {
  ConvPlan(const LayerSpec& spec, Shape in, Shape out)
      : kdim(spec.Int(1) * spec.Int(1) * in.c),
        pix(out.h * out.w),
        chunk(std::max<int64_t>(1, kColTarget / SatMul(kdim, pix))),
        direct_forward(in.c <= kDirectMaxIn && spec.Int(0) % kOb == 0),
        direct_weight_grad(spec.Int(0) % kOb == 0 &&
                           (in.c <= kDirectMaxIn || UsedPath() == CpuPath::kAvx2)),
        padded(direct_forward || direct_weight_grad
                   ? SatMul(SatMul(in.h + 2 * spec.Int(3), in.w + 2 * spec.Int(3)), in.c)
                   : 0),
        zeros(direct_forward && !HasBias(spec) ? spec.Int(0) : 0) {}
  // The im2col matrix of m samples (m up to chunk).
  int64_t Col(int64_t m) const { return SatMul(SatMul(kdim, m), pix); }

  int64_t kdim;   // the taps of one output value: kernel x kernel x input channels
  int64_t pix;    // one sample's output pixels
  int64_t chunk;  // the samples of one im2col matrix
  bool direct_forward, direct_weight_grad;
  int64_t padded;  // the direct kernels' zero-padded sample (0: neither runs)
  int64_t zeros;   // the direct forward kernel's bias without one
};

template <class S>
class Conv2d final : public Layer<S> {
  // Eigen's SIMD packet for S (8 floats or 4 doubles with AVX2; S itself without vector units)
  // and its operations: the direct kernel's registers.
  using Packet = typename Eigen::internal::packet_traits<S>::type;
  static constexpr int kLanes = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr int kPackets = kOb / kLanes;
  static_assert(kOb % kLanes == 0);

 public:
  Conv2d(const LayerSpec& spec, Shape in, Shape out)
      : Layer<S>(in, out),
        plan_(spec, in, out),
        co_(spec.Int(0)),
        k_(spec.Int(1)),
        stride_(spec.Int(2)),
        pad_(spec.Int(3)),
        kdim_(plan_.kdim),
        pix_(plan_.pix),
        chunk_(plan_.chunk),
        direct_forward_(plan_.direct_forward),
        direct_weight_grad_(plan_.direct_weight_grad),
        wp_(in.w + 2 * pad_),
        avx512_(UsedPath() == CpuPath::kAvx512),
        bias_(HasBias(spec)) {
    padded_.assign(plan_.padded, S(0));
    zeros_.assign(plan_.zeros, S(0));
  }

  void Forward(const S* params, const S* x, int64_t n, const PassInfo&, S* y) override {
    Eigen::Map<const Mat<S>> w(params, co_, kdim_);
    Eigen::Map<const Vec<S>> b(params + co_ * kdim_, bias_ ? co_ : 0);
    if (direct_forward_) {
      for (int64_t s = 0; s < n; ++s) {
        DirectForward(params, x + s * this->in().Size(), y + s * this->out().Size());
      }
      return;
    }
    std::optional<SameA> weights;  // W, packed once for all chunks
    if constexpr (std::is_same_v<S, float>) weights.emplace(co_, kdim_, Operand{params, co_});
    for (int64_t i = 0; i < n; i += chunk_) {
      const int64_t m = std::min(chunk_, n - i);
      Im2col(x + i * this->in().Size(), m);
      Eigen::Map<Mat<S>> out(y + i * this->out().Size(), co_, m * pix_);
      if constexpr (std::is_same_v<S, float>) {
        weights->Gemm(m * pix_, {col_.data(), kdim_}, out.data(), co_, false);
      } else {
        out.noalias() = w * Eigen::Map<const Mat<S>>(col_.data(), kdim_, m * pix_);
      }
      if (bias_) out.colwise() += b;
    }
  }

  void Backward(const S* params, const S* x, const S*, const S* dy, int64_t n, const PassInfo&,
                S* dx, S* dparams) override {
    Eigen::Map<Mat<S>> grad_w(dparams, co_, kdim_);
    Eigen::Map<Vec<S>> grad_b(dparams + co_ * kdim_, bias_ ? co_ : 0);
    grad_w.setZero();
    grad_b.setZero();
    if (direct_weight_grad_) {
      for (int64_t s = 0; s < n; ++s) {
        DirectWeightGrad(x + s * this->in().Size(), dy + s * this->out().Size(), dparams);
      }
    }
    std::optional<SameA> weights_t;  // W^T, packed once for all chunks
    if constexpr (std::is_same_v<S, float>) {
      if (dx != nullptr) weights_t.emplace(kdim_, co_, Operand{params, co_, true});
    }
    for (int64_t i = 0; i < n; i += chunk_) {
      const int64_t m = std::min(chunk_, n - i);
      Eigen::Map<const Mat<S>> d(dy + i * this->out().Size(), co_, m * pix_);
      if (!direct_weight_grad_) {
        Im2col(x + i * this->in().Size(), m);
        if constexpr (std::is_same_v<S, float>) {
          Gemm(co_, kdim_, m * pix_, {d.data(), co_}, {col_.data(), kdim_, true}, dparams, co_,
               true);
        } else {
          grad_w.noalias() +=
              d * Eigen::Map<const Mat<S>>(col_.data(), kdim_, m * pix_).transpose();
        }
      }
      if (bias_) {
        for (int64_t j = 0; j < m * pix_; ++j) grad_b += d.col(j);
      }
      if (dx != nullptr) {
        S* dcol = Col(m);
        if constexpr (std::is_same_v<S, float>) {
          weights_t->Gemm(m * pix_, {d.data(), co_}, dcol, kdim_, false);
        } else {
          Eigen::Map<Mat<S>>(dcol, kdim_, m * pix_).noalias() =
              Eigen::Map<const Mat<S>>(params, co_, kdim_).transpose() * d;
        }
        Col2im(m, dx + i * this->in().Size());
      }
    }
  }

 private:
  // The direct kernels' shape for nn/kernels/direct_conv.h.
  DirectConv Direct() const {
    return {this->in().c, k_, stride_, co_, this->out().h, this->out().w, wp_};
  }

  // Copies one sample into the interior of padded_ (its border stays zero).
  void Pad(const S* img) {
    const Shape in = this->in();
    for (int64_t iy = 0; iy < in.h; ++iy) {
      std::copy(img + iy * in.w * in.c, img + (iy + 1) * in.w * in.c,
                padded_.data() + ((iy + pad_) * wp_ + pad_) * in.c);
    }
  }

  // One sample's output, direct: tiles of kTile pixels along a row (and a last, narrower
  // one) for each block of kOb channels.
  void DirectForward(const S* params, const S* img, S* y) {
    Pad(img);
    if constexpr (std::is_same_v<S, float>) {
      if (avx512_) {
        return DirectConvForwardAvx512(Direct(), padded_.data(), params, Bias(params), y);
      }
    }
    const Shape out = this->out();
    for (int64_t ob = 0; ob < co_; ob += kOb) {
      for (int64_t oy = 0; oy < out.h; ++oy) {
        ForTiles(out.w, [&](auto np, int64_t ox) {
          ForwardTile<decltype(np)::value>(params, ob, oy, ox, y);
        });
      }
    }
  }

  // Output pixels (oy, ox .. ox+NP-1), channels ob .. ob+kOb-1: bias, then each kernel row's
  // k*c taps in (ky, kx, c) order.
  template <int NP>
  void ForwardTile(const S* params, int64_t ob, int64_t oy, int64_t ox, S* y) const {
    const int64_t c = this->in().c, run = k_ * c, step = stride_ * c;
    Packet acc[NP][kPackets];
    for (int q = 0; q < kPackets; ++q) {
      const Packet b = ploadu<Packet>(Bias(params) + ob + q * kLanes);
      for (int p = 0; p < NP; ++p) acc[p][q] = b;
    }
    for (int64_t ky = 0; ky < k_; ++ky) {
      const S* src = padded_.data() + ((oy * stride_ + ky) * wp_ + ox * stride_) * c;
      const S* w = params + ky * run * co_ + ob;
      for (int64_t j = 0; j < run; ++j, w += co_) {
        Packet wv[kPackets];
        for (int q = 0; q < kPackets; ++q) wv[q] = ploadu<Packet>(w + q * kLanes);
        for (int p = 0; p < NP; ++p) {
          const Packet v = pset1<Packet>(src[p * step + j]);
          for (int q = 0; q < kPackets; ++q) acc[p][q] = pmadd(v, wv[q], acc[p][q]);
        }
      }
    }
    S* dst = y + (oy * this->out().w + ox) * co_ + ob;
    for (int p = 0; p < NP; ++p) {
      for (int q = 0; q < kPackets; ++q) pstoreu(dst + p * co_ + q * kLanes, acc[p][q]);
    }
  }

  // Adds one sample's weight gradient to dparams' W, direct: for each block of kOb channels
  // and each run of kTile taps within a kernel row, the sum over the output pixels.
  void DirectWeightGrad(const S* img, const S* dy, S* dparams) {
    Pad(img);
    if constexpr (std::is_same_v<S, float>) {
      if (avx512_) return DirectConvWeightGradAvx512(Direct(), padded_.data(), dy, dparams);
    }
    const int64_t run = k_ * this->in().c;
    for (int64_t ob = 0; ob < co_; ob += kOb) {
      for (int64_t ky = 0; ky < k_; ++ky) {
        ForTiles(run, [&](auto nt, int64_t j) {
          WeightTile<decltype(nt)::value>(ob, ky, j, dy, dparams);
        });
      }
    }
  }

  // Taps (ky, j .. j+NT-1) of kernel row ky (j counts (kx, c) pairs), channels ob ..
  // ob+kOb-1: their gradient plus the sum over output pixels of input tap x dy.
  template <int NT>
  void WeightTile(int64_t ob, int64_t ky, int64_t j, const S* dy, S* dparams) const {
    const Shape out = this->out();
    const int64_t c = this->in().c, run = k_ * c;
    S* g = dparams + (ky * run + j) * co_ + ob;
    Packet acc[NT][kPackets];
    for (int t = 0; t < NT; ++t) {
      for (int q = 0; q < kPackets; ++q) acc[t][q] = ploadu<Packet>(g + t * co_ + q * kLanes);
    }
    for (int64_t oy = 0; oy < out.h; ++oy) {
      const S* src = padded_.data() + ((oy * stride_ + ky) * wp_) * c + j;
      const S* d = dy + oy * out.w * co_ + ob;
      for (int64_t ox = 0; ox < out.w; ++ox, src += stride_ * c, d += co_) {
        Packet dv[kPackets];
        for (int q = 0; q < kPackets; ++q) dv[q] = ploadu<Packet>(d + q * kLanes);
        for (int t = 0; t < NT; ++t) {
          const Packet v = pset1<Packet>(src[t]);
          for (int q = 0; q < kPackets; ++q) acc[t][q] = pmadd(v, dv[q], acc[t][q]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      for (int q = 0; q < kPackets; ++q) pstoreu(g + t * co_ + q * kLanes, acc[t][q]);
    }
  }

  // Where the direct kernels' sums start: the bias, or zeros without one.
  const S* Bias(const S* params) const { return bias_ ? params + co_ * kdim_ : zeros_.data(); }

  // col_, grown to hold the im2col matrix of m samples.
  S* Col(int64_t m) {
    if (static_cast<int64_t>(col_.size()) < plan_.Col(m)) col_.resize(plan_.Col(m));
    return col_.data();
  }

  // col_ (kdim x m*pix, column-major) from m samples of x: column p is output pixel p's
  // window, (ky, kx, c) order, zeros where it overhangs the padded border.
  void Im2col(const S* x, int64_t m) {
    const Shape in = this->in(), out = this->out();
    const int64_t c = in.c, row = k_ * c;
    S* dst = Col(m);
    for (int64_t s = 0; s < m; ++s) {
      const S* img = x + s * in.Size();
      for (int64_t oy = 0; oy < out.h; ++oy) {
        for (int64_t ox = 0; ox < out.w; ++ox, dst += kdim_) {
          const int64_t x0 = ox * stride_ - pad_;
          // The kernel's columns inside the image: kx in [lo, hi).
          const int64_t lo = std::max<int64_t>(0, -x0), hi = std::min(k_, in.w - x0);
          for (int64_t ky = 0; ky < k_; ++ky) {
            S* d = dst + ky * row;
            const int64_t iy = oy * stride_ - pad_ + ky;
            if (iy < 0 || iy >= in.h || lo >= hi) {
              std::fill(d, d + row, S(0));
              continue;
            }
            std::fill(d, d + lo * c, S(0));
            std::memcpy(d + lo * c, img + (iy * in.w + x0 + lo) * c, (hi - lo) * c * sizeof(S));
            std::fill(d + hi * c, d + row, S(0));
          }
        }
      }
    }
  }

  // dx of m samples (overwritten) from col_ holding dLoss/dcol: each window adds back.
  void Col2im(int64_t m, S* dx) {
    const Shape in = this->in(), out = this->out();
    const int64_t c = in.c, row = k_ * c;
    std::fill(dx, dx + m * in.Size(), S(0));
    const S* src = col_.data();
    for (int64_t s = 0; s < m; ++s) {
      S* img = dx + s * in.Size();
      for (int64_t oy = 0; oy < out.h; ++oy) {
        for (int64_t ox = 0; ox < out.w; ++ox, src += kdim_) {
          const int64_t x0 = ox * stride_ - pad_;
          const int64_t lo = std::max<int64_t>(0, -x0), hi = std::min(k_, in.w - x0);
          for (int64_t ky = 0; ky < k_; ++ky) {
            const int64_t iy = oy * stride_ - pad_ + ky;
            if (iy < 0 || iy >= in.h || lo >= hi) continue;
            const S* a = src + ky * row + lo * c;
            S* b = img + (iy * in.w + x0 + lo) * c;
            for (int64_t e = 0; e < (hi - lo) * c; ++e) b[e] += a[e];
          }
        }
      }
    }
  }

  const ConvPlan plan_;
  const int64_t co_, k_, stride_, pad_, kdim_, pix_, chunk_;
  const bool direct_forward_, direct_weight_grad_;
  const int64_t wp_;  // the padded input's width
  const bool avx512_;  // the direct kernels run nn/kernels/direct_conv.h's (float only)
  const bool bias_;    // false: bias=false, no b in params
  std::vector<S, Eigen::aligned_allocator<S>> col_;
  std::vector<S> padded_;  // the direct kernel's zero-padded sample
  std::vector<S> zeros_;   // the direct forward kernel's bias without one
};

Status OutShape(const LayerSpec& spec, Shape in, Shape* out) {
  const int64_t k = spec.Int(1), stride = spec.Int(2), pad = spec.Int(3);
  if (in.h + 2 * pad < k || in.w + 2 * pad < k) {
    return Status::Usage("input " + ImageText(in) + ", kernel " + std::to_string(k) +
                         " with padding " + std::to_string(pad) + " leaves no output");
  }
  *out = {spec.Int(0), (in.h + 2 * pad - k) / stride + 1, (in.w + 2 * pad - k) / stride + 1};
  return Status::Ok();
}

// What Conv2d allocates: im2col matrices where the forward pass uses them (the direct kernel
// does not), and in the backward pass (for the weight gradient unless the direct kernel takes
// it, and for dx), then the padded sample and, without a bias, the direct kernel's zeros.
int64_t Scratch(const LayerSpec& spec, Shape in, Shape out, int64_t n, bool backward) {
  const ConvPlan p(spec, in, out);
  const int64_t col = !p.direct_forward || backward ? p.Col(std::min(p.chunk, n)) : 0;
  return SatAdd(SatAdd(col, p.padded), p.zeros);
}

std::vector<ParamBlock> Params(const LayerSpec& spec, Shape in) {
  const int64_t k = spec.Int(1);
  if (!HasBias(spec)) return {{"weight", {spec.Int(0), in.c, k, k}}};
  return {{"weight", {spec.Int(0), in.c, k, k}}, {"bias", {spec.Int(0)}}};
}

void InitConv(const LayerSpec& spec, Shape in, Init init, Rng& rng, float* params) {
  const int64_t co = spec.Int(0), kk = spec.Int(1) * spec.Int(1);
  InitWeightsAndBias(init, in.c * kk, co * kk, co * kk * in.c, HasBias(spec) ? co : 0, rng,
                     params);
}

// PyTorch's weight[o][c][ky][kx] is our W(o, (ky*k + kx)*C + c).
void ToTorch(const LayerSpec& spec, Shape in, const float* ours, float* torch) {
  const int64_t co = spec.Int(0), k = spec.Int(1), c = in.c;
  for (int64_t o = 0; o < co; ++o) {
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t ky = 0; ky < k; ++ky) {
        for (int64_t kx = 0; kx < k; ++kx) {
          torch[((o * c + ci) * k + ky) * k + kx] = ours[o + ((ky * k + kx) * c + ci) * co];
        }
      }
    }
  }
  if (HasBias(spec)) {
    std::copy(ours + co * k * k * c, ours + co * k * k * c + co, torch + co * k * k * c);
  }
}

}  // namespace

extern const LayerType kConv2d = {
    .name = "conv2d",
    .torch = "Conv2d",
    .summary = "2-D convolution: out channels, a kernel x kernel window, zero padding, a bias "
               "unless bias=false",
    .args = {{"out", true, 0, 1, kMaxWidth, true},
             {"kernel", true, 0, 1, 1024, true},
             {"stride", false, 1, 1, 1024, true},
             {"padding", false, 0, 0, 1024, true},
             {"bias", false, 1, 0, 1, true, true}},
    .spatial = Spatial::kWindows,
    .out_shape = OutShape,
    .params = Params,
    .init = InitConv,
    .to_torch = ToTorch,
    .scratch = Scratch,
    .make_float = MakeLayer<Conv2d, float>,
    .make_double = MakeLayer<Conv2d, double>,
};

}  // namespace shmtrain::nn
