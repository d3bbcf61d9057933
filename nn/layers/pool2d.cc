// maxpool2d(kernel, stride=kernel) and avgpool2d(kernel, stride=kernel): PyTorch's
// nn.MaxPool2d and nn.AvgPool2d with square windows and no padding (stride=0 in the model
// text means the kernel, PyTorch's stride=None). No parameters.
//
// Channels-last: a window's pixels are runs of c contiguous values, so each output pixel is
// an elementwise max (or sum) of k*k vectors of c values. Max pooling keeps the first
// maximum in window order (rows, then columns), as PyTorch's CPU kernel does; backward finds
// it again from x and y rather than keeping indices from Forward, one window position at a
// time over all channels (SIMD packets of channels, their flags in registers).
#include <Eigen/Core>
#include <algorithm>

#include "nn/layer.h"
#include "nn/layers/type_of.h"

namespace shmtrain::nn {
namespace {

enum class Pool { kMax, kAvg };

int64_t StrideOf(const LayerSpec& spec) { return spec.Int(1) == 0 ? spec.Int(0) : spec.Int(1); }

template <Pool P>
struct Pooling {
  template <class S>
  class Layer final : public nn::Layer<S> {
   public:
    Layer(const LayerSpec& spec, Shape in, Shape out)
        : nn::Layer<S>(in, out), k_(spec.Int(0)), stride_(StrideOf(spec)) {}

    void Forward(const S*, const S* x, int64_t n, const PassInfo&, S* y) override {
      const Shape in = this->in(), out = this->out();
      const int64_t c = in.c;
      const S scale = S(1) / static_cast<S>(k_ * k_);
      for (int64_t s = 0; s < n; ++s) {
        const S* img = x + s * in.Size();
        for (int64_t oy = 0; oy < out.h; ++oy) {
          for (int64_t ox = 0; ox < out.w; ++ox) {
            S* o = y + s * out.Size() + (oy * out.w + ox) * c;
            const S* first = img + (oy * stride_ * in.w + ox * stride_) * c;
            std::copy(first, first + c, o);
            for (int64_t ky = 0; ky < k_; ++ky) {
              for (int64_t kx = ky == 0 ? 1 : 0; kx < k_; ++kx) {
                const S* v = first + (ky * in.w + kx) * c;
                for (int64_t e = 0; e < c; ++e) {
                  if constexpr (P == Pool::kMax) {
                    o[e] = v[e] > o[e] ? v[e] : o[e];
                  } else {
                    o[e] += v[e];
                  }
                }
              }
            }
            if constexpr (P == Pool::kAvg) {
              for (int64_t e = 0; e < c; ++e) o[e] *= scale;
            }
          }
        }
      }
    }

    void Backward(const S*, const S* x, const S* y, const S* dy, int64_t n, const PassInfo&,
                  S* dx, S*) override {
      if (dx == nullptr) return;
      const Shape in = this->in(), out = this->out();
      // Windows that tile the input exactly (the usual stride = kernel on a multiple of it)
      // write each element of dx once; others leave gaps or overlap, so dx is zeroed and added.
      if (stride_ == k_ && in.h == out.h * k_ && in.w == out.w * k_) {
        BackwardWindows<true>(x, y, dy, n, dx);
      } else {
        std::fill(dx, dx + n * in.Size(), S(0));
        BackwardWindows<false>(x, y, dy, n, dx);
      }
    }

   private:
    template <bool kTiling>
    void BackwardWindows(const S* x, const S* y, const S* dy, int64_t n, S* dx) {
      const Shape in = this->in(), out = this->out();
      const int64_t c = in.c;
      for (int64_t s = 0; s < n; ++s) {
        for (int64_t oy = 0; oy < out.h; ++oy) {
          for (int64_t ox = 0; ox < out.w; ++ox) {
            const int64_t at = s * out.Size() + (oy * out.w + ox) * c;
            const int64_t base = s * in.Size() + (oy * stride_ * in.w + ox * stride_) * c;
            int64_t e = 0;
            for (; e + kLanes <= c; e += kLanes) {
              Window<kTiling, Packet>(x + base + e, y + at + e, dy + at + e, dx + base + e);
            }
            for (; e < c; ++e) {
              Window<kTiling, S>(x + base + e, y + at + e, dy + at + e, dx + base + e);
            }
          }
        }
      }
    }

    // One window's gradient for the channels of one V (a SIMD packet of channels, or S: one)
    // at x, y, dy and dx (each offset to the first of them). Max: `taken` says whether the
    // first maximum is behind us, so that each window position is one pass with no branch;
    // dx is dy where the first maximum is (dy's bits) and +0 elsewhere.
    template <bool kTiling, class V>
    void Window(const S* x, const S* yo, const S* d, S* dx) const {
      using namespace Eigen::internal;
      const Shape in = this->in();
      const V y = ploadu<V>(yo), dv = ploadu<V>(d);
      const V scaled = pmul(dv, pset1<V>(S(1) / static_cast<S>(k_ * k_)));
      V taken = pzero(y);
      for (int64_t ky = 0; ky < k_; ++ky) {
        for (int64_t kx = 0; kx < k_; ++kx) {
          const int64_t off = (ky * in.w + kx) * in.c;
          V v = scaled;
          if constexpr (P == Pool::kMax) {
            const V hit = pandnot(pcmp_eq(ploadu<V>(x + off), y), taken);  // the first maximum
            taken = por(taken, hit);
            v = pand(hit, dv);
          }
          if constexpr (kTiling) {
            pstoreu(dx + off, v);
          } else {
            pstoreu(dx + off, padd(ploadu<V>(dx + off), v));
          }
        }
      }
    }

    using Packet = typename Eigen::internal::packet_traits<S>::type;
    static constexpr int64_t kLanes = Eigen::internal::unpacket_traits<Packet>::size;
    const int64_t k_, stride_;
  };
};

Status OutShape(const LayerSpec& spec, Shape in, Shape* out) {
  const int64_t k = spec.Int(0), stride = StrideOf(spec);
  if (in.h < k || in.w < k) {
    const std::string kk = std::to_string(k);
    return Status::Usage("input " + ImageText(in) + ": the window of kernel " + kk + " (" + kk +
                         "x" + kk + ") does not fit in " + std::to_string(in.h) + "x" +
                         std::to_string(in.w));
  }
  *out = {in.c, (in.h - k) / stride + 1, (in.w - k) / stride + 1};
  return Status::Ok();
}

// MaxPool or AveragePool, without padding (count_include_pad then means nothing).
template <Pool P>
std::string ToOnnx(const LayerSpec& spec, Shape, Shape, const std::string& module,
                   const std::string& x, OnnxGraph& g) {
  const int64_t k = spec.Int(0), s = StrideOf(spec);
  return g.Node(P == Pool::kMax ? "MaxPool" : "AveragePool", {x}, module,
                {OnnxAttr::Ints("kernel_shape", {k, k}), OnnxAttr::Ints("strides", {s, s})});
}

template <Pool P>
LayerType Type(const char* name, const char* torch, const char* summary) {
  return TypeOf<Pooling<P>::template Layer>(
      {.name = name,
       .torch = torch,
       .summary = summary,
       .args = {{"kernel", true, 0, 1, 1024, true}, {"stride", false, 0, 0, 1024, true}},
       .spatial = Spatial::kWindows,
       .out_shape = OutShape,
       .to_onnx = ToOnnx<P>});
}

}  // namespace

extern const LayerType kMaxPool2d = Type<Pool::kMax>(
    "maxpool2d", "MaxPool2d", "the maximum of each kernel x kernel window (stride 0: the kernel)");
extern const LayerType kAvgPool2d = Type<Pool::kAvg>(
    "avgpool2d", "AvgPool2d", "the mean of each kernel x kernel window (stride 0: the kernel)");

}  // namespace shmtrain::nn
