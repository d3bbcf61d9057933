// maxpool2d(kernel, stride=kernel) and avgpool2d(kernel, stride=kernel): PyTorch's
// nn.MaxPool2d and nn.AvgPool2d with square windows and no padding (stride=0 in the model
// text means the kernel, PyTorch's stride=None). No parameters.
//
// Channels-last: a window's pixels are runs of c contiguous values, so each output pixel is
// an elementwise max (or sum) of k*k vectors of c values. Max pooling keeps the first
// maximum in window order (rows, then columns), as PyTorch's CPU kernel does; backward finds
// it again from x and y rather than keeping indices from Forward, one window position at a
// time over all channels (vectorised).
#include <algorithm>
#include <vector>

#include "nn/layer.h"

namespace shmtrain::nn {
namespace {

enum class Pool { kMax, kAvg };

int64_t StrideOf(const LayerSpec& spec) { return spec.Int(1) == 0 ? spec.Int(0) : spec.Int(1); }

// Backward's flags (Layer::taken_): one per channel. Forward holds none.
int64_t Scratch(const LayerSpec&, Shape in, Shape, int64_t, bool backward) {
  return backward ? in.c : 0;
}

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
      const auto taken = static_cast<size_t>(Scratch({}, in, out, n, /*backward=*/true));
      if (taken_.size() < taken) taken_.resize(taken);
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
      const S scale = S(1) / static_cast<S>(k_ * k_);
      for (int64_t s = 0; s < n; ++s) {
        for (int64_t oy = 0; oy < out.h; ++oy) {
          for (int64_t ox = 0; ox < out.w; ++ox) {
            const int64_t at = s * out.Size() + (oy * out.w + ox) * c;
            const int64_t base = s * in.Size() + (oy * stride_ * in.w + ox * stride_) * c;
            const S* yo = y + at;
            const S* d = dy + at;
            // Max: taken_[e] says whether channel e's first maximum is behind us, so that
            // each window position is one pass over the c channels, with no branch.
            std::fill(taken_.begin(), taken_.begin() + c, S(0));
            S* taken = taken_.data();
            for (int64_t ky = 0; ky < k_; ++ky) {
              for (int64_t kx = 0; kx < k_; ++kx) {
                const S* xi = x + base + (ky * in.w + kx) * c;
                S* g = dx + base + (ky * in.w + kx) * c;
                for (int64_t e = 0; e < c; ++e) {
                  S v;
                  if constexpr (P == Pool::kMax) {
                    const S max = xi[e] == yo[e] ? S(1) : S(0);
                    const S hit = max > taken[e] ? S(1) : S(0);  // the first maximum
                    v = hit > S(0) ? d[e] : S(0);
                    taken[e] += hit;
                  } else {
                    v = d[e] * scale;
                  }
                  if constexpr (kTiling) {
                    g[e] = v;
                  } else {
                    g[e] += v;
                  }
                }
              }
            }
          }
        }
      }
    }

    const int64_t k_, stride_;
    std::vector<S> taken_;  // Backward's per-channel flags, for one window
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

template <Pool P>
LayerType Type(const char* name, const char* torch, const char* summary) {
  return {.name = name,
          .torch = torch,
          .summary = summary,
          .args = {{"kernel", true, 0, 1, 1024, true}, {"stride", false, 0, 0, 1024, true}},
          .spatial = Spatial::kWindows,
          .out_shape = OutShape,
          .params = nullptr,
          .init = nullptr,
          .to_torch = nullptr,
          .scratch = Scratch,
          .make_float = MakeLayer<Pooling<P>::template Layer, float>,
          .make_double = MakeLayer<Pooling<P>::template Layer, double>};
}

}  // namespace

extern const LayerType kMaxPool2d = Type<Pool::kMax>(
    "maxpool2d", "MaxPool2d", "the maximum of each kernel x kernel window (stride 0: the kernel)");
extern const LayerType kAvgPool2d = Type<Pool::kAvg>(
    "avgpool2d", "AvgPool2d", "the mean of each kernel x kernel window (stride 0: the kernel)");

}  // namespace shmtrain::nn
