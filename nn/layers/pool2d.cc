// maxpool2d(kernel, stride=kernel) and avgpool2d(kernel, stride=kernel): PyTorch's
// nn.MaxPool2d and nn.AvgPool2d with square windows and no padding (stride=0 in the model
// text means the kernel, PyTorch's stride=None). No parameters.
//
// Channels-last: a window's pixels are runs of c contiguous values, so each output pixel is
// an elementwise max (or sum) of k*k vectors of c values. Max pooling keeps the first
// maximum in window order (rows, then columns), as PyTorch's CPU kernel does; backward finds
// it again from x and y rather than keeping indices from Forward.
#include <algorithm>

#include "nn/layer.h"

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
      const int64_t c = in.c;
      const S scale = S(1) / static_cast<S>(k_ * k_);
      std::fill(dx, dx + n * in.Size(), S(0));
      for (int64_t s = 0; s < n; ++s) {
        for (int64_t oy = 0; oy < out.h; ++oy) {
          for (int64_t ox = 0; ox < out.w; ++ox) {
            const int64_t at = s * out.Size() + (oy * out.w + ox) * c;
            const int64_t base = s * in.Size() + (oy * stride_ * in.w + ox * stride_) * c;
            for (int64_t e = 0; e < c; ++e) {
              for (int64_t ky = 0; ky < k_; ++ky) {
                for (int64_t kx = 0; kx < k_; ++kx) {
                  const int64_t i = base + (ky * in.w + kx) * c + e;
                  if constexpr (P == Pool::kMax) {
                    if (x[i] == y[at + e]) {
                      dx[i] += dy[at + e];
                      ky = k_;  // the first maximum only
                      break;
                    }
                  } else {
                    dx[i] += dy[at + e] * scale;
                  }
                }
              }
            }
          }
        }
      }
    }

   private:
    const int64_t k_, stride_;
  };
};

Status OutShape(const LayerSpec& spec, Shape in, Shape* out) {
  const int64_t k = spec.Int(0), stride = StrideOf(spec);
  if (Status s = NeedImage(in); !s.ok()) return s;
  if (in.h < k || in.w < k) {
    return Status::Usage("input " + in.Text() + ", kernel " + std::to_string(k) +
                         " leaves no output");
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
          .out_shape = OutShape,
          .params = nullptr,
          .init = nullptr,
          .to_torch = nullptr,
          .make_float = MakeLayer<Pooling<P>::template Layer, float>,
          .make_double = MakeLayer<Pooling<P>::template Layer, double>};
}

}  // namespace

extern const LayerType kMaxPool2d = Type<Pool::kMax>(
    "maxpool2d", "MaxPool2d", "the maximum of each kernel x kernel window (stride 0: the kernel)");
extern const LayerType kAvgPool2d = Type<Pool::kAvg>(
    "avgpool2d", "AvgPool2d", "the mean of each kernel x kernel window (stride 0: the kernel)");

}  // namespace shmtrain::nn
