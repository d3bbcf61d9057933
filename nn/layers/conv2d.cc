// conv2d(out, kernel, stride=1, padding=0, bias=true): PyTorch's nn.Conv2d with square
// kernels, zero padding, no dilation and no groups; bias=false has no bias parameter at all
// (PyTorch's, for convolutions that batch norm follows).
//
// Two kinds of kernel, chosen per layer by its shape alone:
// - Direct kernels (nn/kernels/direct_conv.h) for layers of a multiple of 16 output channels
//   whose weights and maps suit them (kDirectMaxTaps, kDirectMinPixels below):
//   no im2col matrix and no packing. A sample is copied once into a zero-padded buffer (a few
//   to a few hundred KB, in L1 or L2), and a tile of pixels x 16 or 32 output channels stays in
//   registers while each tap adds input (broadcast) x weights (loaded); the weight gradient
//   keeps a tile of taps x channels and sums over the pixels. The input gradient is the same
//   forward kernel at stride 1 (for layers of a multiple of 16 input channels): dy padded by
//   kernel - 1 - padding, convolved with the weights flipped in space and transposed, is dx.
//   ResNets' 3x3 and 1x1 convolutions of 16 to 512 channels on small maps make short, wide
//   products that im2col + GEMM ran at half the FMA peak or less: the direct kernels run
//   them at 0.8 of it (bench/conv_bench, docs/benchmarks.md).
// - im2col + one matrix product (nn/gemm.h) per chunk of samples otherwise (other channel
//   counts, and the input gradient of strided layers). The input is channels-last
//   (nn/layer.h), so the kernel's window over one input row is one contiguous run of memory;
//   the product's result (out x pixels, column-major) is the output, channels-last. Samples
//   are taken in chunks whose im2col matrix stays near the cache (kColTarget); the weights,
//   the same operand in every chunk's product, are packed once a pass (nn/gemm.h's SameA).
// Under --precision bf16 the direct forward kernel (and so the input gradient) rounds its
// inputs to bf16 and sums their products in float by vdpbf16ps, a kernel row's taps in pairs,
// where k*c is even (nn/kernels/direct_conv.h); the weight gradient stays float for layers of
// fewer than kBf16ProductTaps taps and is the bf16 product's for the others. In float,
// the AVX2 path runs nn/kernels/direct_conv_packets.h's (6 pixels x 16 channels), the AVX-512
// path nn/kernels/direct_conv_avx512.cc's (12 pixels x 32 channels), which sum in the same
// order by the same FMAs and so give the same bits. Every kernel sums in an order fixed by the
// shapes: the same input gives the same bits on every run, and a sample's outputs do not
// depend on the other samples of its batch.
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
#include "nn/kernels/direct_conv_packets.h"
#include "nn/layer.h"
#include "nn/layers/type_of.h"
#include "nn/rng.h"

namespace shmtrain::nn {
namespace {

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// Elements of the im2col matrix of one chunk of samples.
constexpr int64_t kColTarget = int64_t{1} << 18;
// The direct kernels take layers of a multiple of kOb output channels (their blocks of
// channels); the input gradient's, layers of a multiple of kOb input channels. Where a block's
// weights outgrow the caches (more than kDirectMaxTaps taps: they are read again for every
// tile of pixels) or a sample has fewer than kDirectMinPixels output pixels (the weight
// gradient's tiles are loaded and stored for every sample, over a few pixels), the product,
// which reads the weights once for a chunk of samples, was faster: measured on Zen 4 (AVX-512),
// 256 channels on 8x8 maps took 1.5x, 512 2.5x, 64 on 4x4 1.5x and on 2x2 10x as long in the
// backward pass; 128 on 8x8 and 16x16 and 64 on 8x8 (ResNet-20's last stage) ran as fast or
// faster. A first layer of at most kDirectMaxIn channels stays direct at any size.
constexpr int64_t kOb = direct_packets::kOb, kDirectMaxTaps = 1152, kDirectMinPixels = 64,
                  kDirectMaxIn = 4;
// Under --precision bf16 the weight gradient of a direct layer of at least kBf16ProductTaps
// taps is the bf16 product's (im2col + nn/gemm.h), whose k runs over a chunk's every pixel:
// measured on Zen 4, 32 and 64 channels 3x3 (288, 576 taps) and cnn-small's 5x5 over 32 (800)
// took 0.6-0.85x the time of the direct float kernel, 16 channels 3x3 (144) 1.5x.
constexpr int64_t kBf16ProductTaps = 256;

bool HasBias(const LayerSpec& spec) { return spec.args[4] != 0; }

// What the layer's kernels hold, from its spec and shapes alone: the layer sizes its scratch
// from it and Scratch() counts it for nn::PassBytes, so the memory the master checks is the
// memory a worker allocates. Sizes saturate at INT64_MAX: a plan that large is refused by that
// check before a layer is built.
struct ConvPlan {
  ConvPlan(const LayerSpec& spec, Shape in, Shape out)
      : kdim(spec.Int(1) * spec.Int(1) * in.c),
        pix(out.h * out.w),
        chunk(std::max<int64_t>(1, kColTarget / SatMul(kdim, pix))),
        direct(spec.Int(0) % kOb == 0 &&
               (in.c <= kDirectMaxIn || (kdim <= kDirectMaxTaps && pix >= kDirectMinPixels))),
        direct_input_grad(direct && in.c % kOb == 0 && spec.Int(2) == 1 &&
                          spec.Int(3) < spec.Int(1)),
        flip_pad(spec.Int(1) - 1 - spec.Int(3)),
        padded(direct ? SatMul(SatMul(in.h + 2 * spec.Int(3), in.w + 2 * spec.Int(3)), in.c)
                      : 0),
        dy_padded(direct_input_grad
                      ? SatMul(SatMul(out.h + 2 * flip_pad, out.w + 2 * flip_pad), spec.Int(0))
                      : 0),
        flipped(direct_input_grad ? SatMul(kdim, spec.Int(0)) : 0),
        zeros(std::max(direct && !HasBias(spec) ? spec.Int(0) : 0,
                       direct_input_grad ? in.c : 0)),
        bf16_inputs(direct ? std::max(padded, dy_padded) / 2 + 1 : 0),
        bf16_weights(direct ? SatMul(kdim, spec.Int(0)) / 2 : 0) {}
  // The im2col matrix of m samples (m up to chunk).
  int64_t Col(int64_t m) const { return SatMul(SatMul(kdim, m), pix); }
  // Whether a pass uses im2col: the forward pass and the weight gradient unless the direct
  // kernels take them (or, in bf16, the product takes the weight gradient: counted whatever
  // the precision, an upper bound in float), the input gradient unless its direct kernel does.
  bool UsesCol(bool backward) const {
    return !direct || (backward && (!direct_input_grad || kdim >= kBf16ProductTaps));
  }

  int64_t kdim;   // the taps of one output value: kernel x kernel x input channels
  int64_t pix;    // one sample's output pixels
  int64_t chunk;  // the samples of one im2col matrix
  bool direct;             // forward pass and weight gradient by the direct kernels
  bool direct_input_grad;  // the input gradient by the direct forward kernel (stride 1)
  int64_t flip_pad;        // dy's padding for it: kernel - 1 - padding
  int64_t padded;     // the direct kernels' zero-padded sample (0: they do not run)
  int64_t dy_padded;  // a sample's zero-padded dy for the input gradient
  int64_t flipped;    // the input gradient's weights: W flipped and transposed
  int64_t zeros;      // where a direct kernel's sums start without a bias
  // --precision bf16's direct forward kernel: the padded sample (or dy) rounded to bf16, and
  // the weights (or the flipped ones) in pairs, counted as floats.
  int64_t bf16_inputs, bf16_weights;
};

template <class S>
class Conv2d final : public Layer<S> {
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
        avx512_(UsedPath() == CpuPath::kAvx512),
        bias_(HasBias(spec)) {
    padded_.assign(plan_.padded, S(0));
    dy_padded_.assign(plan_.dy_padded, S(0));
    flipped_.assign(plan_.flipped, S(0));
    zeros_.assign(plan_.zeros, S(0));
    bf16_in_.assign(2 * plan_.bf16_inputs, 0);
    bf16_w_.assign(plan_.bf16_weights, 0);
  }

  void Forward(const S* params, const S* x, int64_t n, const PassInfo&, S* y) override {
    Eigen::Map<const Mat<S>> w(params, co_, kdim_);
    Eigen::Map<const Vec<S>> b(params + co_ * kdim_, bias_ ? co_ : 0);
    if (plan_.direct) {
      const bool bf16 = Bf16Weights(Direct(), params);
      for (int64_t s = 0; s < n; ++s) {
        Pad(x + s * this->in().Size(), this->in(), pad_, padded_.data());
        DirectForward(Direct(), padded_, params, Bias(params), bf16, y + s * this->out().Size());
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
    if (bias_) {
      Eigen::Map<const Mat<S>> d(dy, co_, n * pix_);
      for (int64_t j = 0; j < n * pix_; ++j) grad_b += d.col(j);
    }
    const bool product_weight_grad = !plan_.direct || Bf16ProductWeightGrad();
    if (!product_weight_grad) {
      for (int64_t s = 0; s < n; ++s) {
        Pad(x + s * this->in().Size(), this->in(), pad_, padded_.data());
        DirectWeightGrad(Direct(), padded_.data(), dy + s * this->out().Size(), dparams);
      }
    }
    if (dx != nullptr && plan_.direct_input_grad) {
      FlipWeights(params);
      const bool bf16 = Bf16Weights(Flipped(), flipped_.data());
      for (int64_t s = 0; s < n; ++s) {
        Pad(dy + s * this->out().Size(), this->out(), plan_.flip_pad, dy_padded_.data());
        DirectForward(Flipped(), dy_padded_, flipped_.data(), zeros_.data(), bf16,
                      dx + s * this->in().Size());
      }
    }
    S* product_dx = plan_.direct_input_grad ? nullptr : dx;
    if (product_weight_grad || product_dx != nullptr) {
      ProductBackward(params, x, dy, n, product_weight_grad ? dparams : nullptr, product_dx);
    }
  }

 private:
  // The weight gradient (unless dparams is null) and dx (unless null) by im2col and products.
  void ProductBackward(const S* params, const S* x, const S* dy, int64_t n, S* dparams, S* dx) {
    std::optional<SameA> weights_t;  // W^T, packed once for all chunks
    if constexpr (std::is_same_v<S, float>) {
      if (dx != nullptr) weights_t.emplace(kdim_, co_, Operand{params, co_, true});
    }
    for (int64_t i = 0; i < n; i += chunk_) {
      const int64_t m = std::min(chunk_, n - i);
      Eigen::Map<const Mat<S>> d(dy + i * this->out().Size(), co_, m * pix_);
      if (dparams != nullptr) {
        Im2col(x + i * this->in().Size(), m);
        if constexpr (std::is_same_v<S, float>) {
          Gemm(co_, kdim_, m * pix_, {d.data(), co_}, {col_.data(), kdim_, true}, dparams, co_,
               true);
        } else {
          Eigen::Map<Mat<S>>(dparams, co_, kdim_).noalias() +=
              d * Eigen::Map<const Mat<S>>(col_.data(), kdim_, m * pix_).transpose();
        }
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

  // The direct kernels' shape for nn/kernels/direct_conv.h.
  DirectConv Direct() const {
    return {this->in().c, k_, stride_, co_, this->out().h, this->out().w,
            this->in().w + 2 * pad_};
  }
  // The input gradient's convolution (stride 1): dy padded by kernel - 1 - padding, convolved
  // with the flipped weights, gives dx, its co input channels summed for each of c outputs.
  DirectConv Flipped() const {
    return {co_, k_, 1, this->in().c, this->in().h, this->in().w,
            this->out().w + 2 * plan_.flip_pad};
  }

  // flipped_ = the weights of Flipped(): W'(c, (ky', kx', o)) = W(o, (k-1-ky', k-1-kx', c)),
  // column-major (c rows) as the forward kernel reads W.
  void FlipWeights(const S* params) {
    const int64_t c = this->in().c;
    for (int64_t ky = 0; ky < k_; ++ky) {
      for (int64_t kx = 0; kx < k_; ++kx) {
        const S* w = params + (ky * k_ + kx) * c * co_;
        S* f = flipped_.data() + ((k_ - 1 - ky) * k_ + (k_ - 1 - kx)) * co_ * c;
        for (int64_t o = 0; o < co_; ++o) {
          for (int64_t ci = 0; ci < c; ++ci) f[o * c + ci] = w[ci * co_ + o];
        }
      }
    }
  }

  // Copies one tensor of shape `sh` into the interior of dst, padded by `pad` on each side
  // (the border, never written, stays zero).
  static void Pad(const S* img, Shape sh, int64_t pad, S* dst) {
    const int64_t wp = sh.w + 2 * pad;
    for (int64_t iy = 0; iy < sh.h; ++iy) {
      std::copy(img + iy * sh.w * sh.c, img + (iy + 1) * sh.w * sh.c,
                dst + ((iy + pad) * wp + pad) * sh.c);
    }
  }

  // Whether the product takes a direct layer's weight gradient (kBf16ProductTaps).
  bool Bf16ProductWeightGrad() const {
    return std::is_same_v<S, float> && ProductInputs() == ComputeType::kBf16 &&
           kdim_ >= kBf16ProductTaps;
  }

  // Whether the direct forward kernel of shape d runs in bf16 (--precision bf16, in float, with
  // each kernel row's taps in pairs): if so, w packed into bf16_w_ for it.
  bool Bf16Weights(const DirectConv& d, const S* w) {
    if constexpr (std::is_same_v<S, float>) {
      if (ProductInputs() == ComputeType::kBf16 && d.k * d.c % 2 == 0) {
        PackDirectBf16Weights(d, w, bf16_w_.data());
        return true;
      }
    }
    return false;
  }

  // One sample's direct forward kernel (nn/kernels/direct_conv.h) on `padded`: in bf16 (the
  // sample rounded into bf16_in_, the weights Bf16Weights packed), AVX-512's in float on that
  // path, else the packets' (nn/kernels/direct_conv_packets.h).
  void DirectForward(const DirectConv& d, const std::vector<S>& padded, const S* w,
                     const S* bias, bool bf16, S* y) {
    if constexpr (std::is_same_v<S, float>) {
      if (bf16) {
        RoundToBf16Avx512(padded.data(), static_cast<int64_t>(padded.size()), bf16_in_.data());
        return DirectConvForwardBf16(d, bf16_in_.data(), bf16_w_.data(), bias, y);
      }
      if (avx512_) return DirectConvForwardAvx512(d, padded.data(), w, bias, y);
    }
    direct_packets::Forward<S>(d, padded.data(), w, bias, y);
  }
  void DirectWeightGrad(const DirectConv& d, const S* padded, const S* dy, S* g) {
    if constexpr (std::is_same_v<S, float>) {
      if (avx512_) return DirectConvWeightGradAvx512(d, padded, dy, g);
    }
    direct_packets::WeightGrad<S>(d, padded, dy, g);
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
  const bool avx512_;  // the direct kernels run nn/kernels/direct_conv.h's (float only)
  const bool bias_;    // false: bias=false, no b in params
  std::vector<S, Eigen::aligned_allocator<S>> col_;
  std::vector<S> padded_;     // the direct kernels' zero-padded sample
  std::vector<S> dy_padded_;  // the input gradient's zero-padded dy of one sample
  std::vector<S> flipped_;    // the input gradient's weights
  std::vector<S> zeros_;      // the direct kernels' start without a bias
  std::vector<uint16_t> bf16_in_;  // the padded sample or dy in bf16
  std::vector<uint32_t> bf16_w_;   // the weights in bf16 pairs
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

// What Conv2d allocates: im2col matrices where a pass uses them (ConvPlan::UsesCol), the
// padded sample, dy and flipped weights of the direct kernels, their zeros, and their bf16
// copies.
int64_t Scratch(const LayerSpec& spec, Shape in, Shape out, int64_t n, bool backward) {
  const ConvPlan p(spec, in, out);
  const int64_t col = p.UsesCol(backward) ? p.Col(std::min(p.chunk, n)) : 0;
  return SatAdd(SatAdd(SatAdd(col, p.padded), SatAdd(p.dy_padded, p.flipped)),
                SatAdd(p.zeros, SatAdd(p.bf16_inputs, p.bf16_weights)));
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
void TorchOrder(const LayerSpec& spec, Shape in, int64_t* from) {
  const int64_t co = spec.Int(0), k = spec.Int(1), c = in.c;
  for (int64_t o = 0; o < co; ++o) {
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t ky = 0; ky < k; ++ky) {
        for (int64_t kx = 0; kx < k; ++kx) {
          from[((o * c + ci) * k + ky) * k + kx] = o + ((ky * k + kx) * c + ci) * co;
        }
      }
    }
  }
  const int64_t w = co * k * k * c;
  for (int64_t o = 0; HasBias(spec) && o < co; ++o) from[w + o] = w + o;
}

std::string ToOnnx(const LayerSpec& spec, Shape, Shape, const std::string& module,
                   const std::string& x, OnnxGraph& g) {
  const int64_t k = spec.Int(1), s = spec.Int(2), p = spec.Int(3);
  std::vector<std::string> inputs = {x, g.Param(module + ".weight")};
  if (HasBias(spec)) inputs.push_back(g.Param(module + ".bias"));
  return g.Node("Conv", std::move(inputs), module,
                {OnnxAttr::Ints("kernel_shape", {k, k}), OnnxAttr::Ints("strides", {s, s}),
                 OnnxAttr::Ints("pads", {p, p, p, p})});
}

}  // namespace

extern const LayerType kConv2d = TypeOf<Conv2d>({
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
    .torch_order = TorchOrder,
    .to_onnx = ToOnnx,
    .scratch = Scratch,
});

}  // namespace shmtrain::nn
