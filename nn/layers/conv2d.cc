// conv2d(out, kernel, stride=1, padding=0): PyTorch's nn.Conv2d with square kernels, zero
// padding, no dilation and no groups.
//
// Channels-last im2col and one matrix product per chunk of samples. The input is channels-
// last (nn/layer.h), so the kernel's window over one input row is one contiguous run of
// memory, and im2col is a few copies per output pixel; the product's result (out x pixels,
// column-major) is the output, channels-last, with nothing to reorder. Samples are taken in
// chunks whose im2col matrix stays near the cache (kColTarget), not the whole batch's.
//
// Parameters: W (out x K, column-major) with K = kernel*kernel*in_channels ordered (ky, kx,
// c), then b (out). PyTorch's weight is (out, in, kh, kw): export reorders.
#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "nn/layer.h"
#include "nn/rng.h"

namespace shmtrain::nn {
namespace {

template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;

// Elements of the im2col matrix of one chunk of samples.
constexpr int64_t kColTarget = int64_t{1} << 18;

template <class S>
class Conv2d final : public Layer<S> {
 public:
  Conv2d(const LayerSpec& spec, Shape in, Shape out)
      : Layer<S>(in, out),
        co_(spec.Int(0)),
        k_(spec.Int(1)),
        stride_(spec.Int(2)),
        pad_(spec.Int(3)),
        kdim_(k_ * k_ * in.c),
        pix_(out.h * out.w),
        chunk_(std::max<int64_t>(1, kColTarget / (kdim_ * pix_))) {}

  void Forward(const S* params, const S* x, int64_t n, const PassInfo&, S* y) override {
    Eigen::Map<const Mat<S>> w(params, co_, kdim_);
    Eigen::Map<const Vec<S>> b(params + co_ * kdim_, co_);
    for (int64_t i = 0; i < n; i += chunk_) {
      const int64_t m = std::min(chunk_, n - i);
      Im2col(x + i * this->in().Size(), m);
      Eigen::Map<Mat<S>> out(y + i * this->out().Size(), co_, m * pix_);
      out.noalias() = w * Eigen::Map<const Mat<S>>(col_.data(), kdim_, m * pix_);
      out.colwise() += b;
    }
  }

  void Backward(const S* params, const S* x, const S*, const S* dy, int64_t n, const PassInfo&,
                S* dx, S* dparams) override {
    Eigen::Map<Mat<S>> grad_w(dparams, co_, kdim_);
    Eigen::Map<Vec<S>> grad_b(dparams + co_ * kdim_, co_);
    grad_w.setZero();
    grad_b.setZero();
    for (int64_t i = 0; i < n; i += chunk_) {
      const int64_t m = std::min(chunk_, n - i);
      Eigen::Map<const Mat<S>> d(dy + i * this->out().Size(), co_, m * pix_);
      Im2col(x + i * this->in().Size(), m);
      grad_w.noalias() += d * Eigen::Map<const Mat<S>>(col_.data(), kdim_, m * pix_).transpose();
      for (int64_t j = 0; j < m * pix_; ++j) grad_b += d.col(j);
      if (dx != nullptr) {
        Eigen::Map<Mat<S>>(col_.data(), kdim_, m * pix_).noalias() =
            Eigen::Map<const Mat<S>>(params, co_, kdim_).transpose() * d;
        Col2im(m, dx + i * this->in().Size());
      }
    }
  }

 private:
  // col_ (kdim x m*pix, column-major) from m samples of x: column p is output pixel p's
  // window, (ky, kx, c) order, zeros where it overhangs the padded border.
  void Im2col(const S* x, int64_t m) {
    if (static_cast<int64_t>(col_.size()) < kdim_ * m * pix_) col_.resize(kdim_ * m * pix_);
    const Shape in = this->in(), out = this->out();
    const int64_t c = in.c, row = k_ * c;
    S* dst = col_.data();
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

  const int64_t co_, k_, stride_, pad_, kdim_, pix_, chunk_;
  std::vector<S, Eigen::aligned_allocator<S>> col_;
};

Status OutShape(const LayerSpec& spec, Shape in, Shape* out) {
  const int64_t k = spec.Int(1), stride = spec.Int(2), pad = spec.Int(3);
  if (Status s = NeedImage(in); !s.ok()) return s;
  if (in.h + 2 * pad < k || in.w + 2 * pad < k) {
    return Status::Usage("input " + in.Text() + ", kernel " + std::to_string(k) +
                         " with padding " + std::to_string(pad) + " leaves no output");
  }
  *out = {spec.Int(0), (in.h + 2 * pad - k) / stride + 1, (in.w + 2 * pad - k) / stride + 1};
  return Status::Ok();
}

std::vector<ParamBlock> Params(const LayerSpec& spec, Shape in) {
  const int64_t k = spec.Int(1);
  return {{"weight", {spec.Int(0), in.c, k, k}}, {"bias", {spec.Int(0)}}};
}

void InitConv(const LayerSpec& spec, Shape in, Init init, Rng& rng, float* params) {
  const int64_t co = spec.Int(0), kk = spec.Int(1) * spec.Int(1);
  InitWeightsAndBias(init, in.c * kk, co * kk, co * kk * in.c, co, rng, params);
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
  std::copy(ours + co * k * k * c, ours + co * k * k * c + co, torch + co * k * k * c);
}

}  // namespace

extern const LayerType kConv2d = {
    .name = "conv2d",
    .torch = "Conv2d",
    .summary = "2-D convolution: out channels, a kernel x kernel window, zero padding",
    .args = {{"out", true, 0, 1, 65536, true},
             {"kernel", true, 0, 1, 1024, true},
             {"stride", false, 1, 1, 1024, true},
             {"padding", false, 0, 0, 1024, true}},
    .out_shape = OutShape,
    .params = Params,
    .init = InitConv,
    .to_torch = ToTorch,
    .make_float = MakeLayer<Conv2d, float>,
    .make_double = MakeLayer<Conv2d, double>,
};

}  // namespace shmtrain::nn
