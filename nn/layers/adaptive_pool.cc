// adaptiveavgpool2d(output_size): PyTorch's nn.AdaptiveAvgPool2d with a square output.
// adaptiveavgpool2d(1) is global average pooling, C x H x W to C x 1 x 1 (an image, as any
// 1x1 map: flatten and linear read it). No parameters.
//
// PyTorch's bins: output row i of o averages the input rows [floor(i*H/o), ceil((i+1)*H/o)),
// columns alike, so bins cover the input, differ in size by at most one and overlap where o
// does not divide H; an output larger than the input repeats rows. Each output is the sum of
// its bin's values in row order, then divided by their count, as PyTorch's CPU kernel does.
// Channels-last: a bin's pixels are runs of c contiguous values.
#include <algorithm>

#include "nn/layer.h"
#include "nn/layers/type_of.h"

namespace shmtrain::nn {
namespace {

// Bin i of o over n: [Start, End).
int64_t Start(int64_t i, int64_t o, int64_t n) { return i * n / o; }
int64_t End(int64_t i, int64_t o, int64_t n) { return ((i + 1) * n + o - 1) / o; }

template <class S>
class AdaptiveAvgPool2d final : public Layer<S> {
 public:
  AdaptiveAvgPool2d(const LayerSpec&, Shape in, Shape out) : Layer<S>(in, out) {}

  void Forward(const S*, const S* x, int64_t n, const PassInfo&, S* y) override {
    const Shape in = this->in(), out = this->out();
    const int64_t c = in.c;
    for (int64_t s = 0; s < n; ++s) {
      const S* img = x + s * in.Size();
      for (int64_t oy = 0; oy < out.h; ++oy) {
        const int64_t y0 = Start(oy, out.h, in.h), y1 = End(oy, out.h, in.h);
        for (int64_t ox = 0; ox < out.w; ++ox) {
          const int64_t x0 = Start(ox, out.w, in.w), x1 = End(ox, out.w, in.w);
          S* o = y + s * out.Size() + (oy * out.w + ox) * c;
          std::fill(o, o + c, S(0));
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) {
              const S* v = img + (iy * in.w + ix) * c;
              for (int64_t e = 0; e < c; ++e) o[e] += v[e];
            }
          }
          const S count = static_cast<S>((y1 - y0) * (x1 - x0));
          for (int64_t e = 0; e < c; ++e) o[e] /= count;
        }
      }
    }
  }

  // Each input value gets dy / count from every bin that holds it.
  void Backward(const S*, const S*, const S*, const S* dy, int64_t n, const PassInfo&, S* dx,
                S*) override {
    if (dx == nullptr) return;
    const Shape in = this->in(), out = this->out();
    const int64_t c = in.c;
    std::fill(dx, dx + n * in.Size(), S(0));
    for (int64_t s = 0; s < n; ++s) {
      S* img = dx + s * in.Size();
      for (int64_t oy = 0; oy < out.h; ++oy) {
        const int64_t y0 = Start(oy, out.h, in.h), y1 = End(oy, out.h, in.h);
        for (int64_t ox = 0; ox < out.w; ++ox) {
          const int64_t x0 = Start(ox, out.w, in.w), x1 = End(ox, out.w, in.w);
          const S* d = dy + s * out.Size() + (oy * out.w + ox) * c;
          const S count = static_cast<S>((y1 - y0) * (x1 - x0));
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) {
              S* v = img + (iy * in.w + ix) * c;
              for (int64_t e = 0; e < c; ++e) v[e] += d[e] / count;
            }
          }
        }
      }
    }
  }
};

Status OutShape(const LayerSpec& spec, Shape in, Shape* out) {
  *out = {in.c, spec.Int(0), spec.Int(0)};
  return Status::Ok();
}

// ONNX has no adaptive pooling. Bins of one size (the input a multiple of the output) are
// GlobalAveragePool or AveragePool; otherwise each channel's pixels times a matrix whose column
// for a bin holds 1/count on its pixels: [N, C, H*W] x [H*W, o*o], reshaped back.
std::string ToOnnx(const LayerSpec&, Shape in, Shape out, const std::string& module,
                   const std::string& x, OnnxGraph& g) {
  const int64_t o = out.h;
  if (o == 1) return g.Node("GlobalAveragePool", {x}, module);
  if (in.h % o == 0 && in.w % o == 0) {
    return g.Node("AveragePool", {x}, module,
                  {OnnxAttr::Ints("kernel_shape", {in.h / o, in.w / o}),
                   OnnxAttr::Ints("strides", {in.h / o, in.w / o})});
  }
  std::vector<float> bins(static_cast<size_t>(in.h * in.w * o * o), 0.0f);
  for (int64_t oy = 0; oy < o; ++oy) {
    for (int64_t ox = 0; ox < o; ++ox) {
      const int64_t y0 = Start(oy, o, in.h), y1 = End(oy, o, in.h);
      const int64_t x0 = Start(ox, o, in.w), x1 = End(ox, o, in.w);
      const float share = 1.0f / static_cast<float>((y1 - y0) * (x1 - x0));
      for (int64_t iy = y0; iy < y1; ++iy) {
        for (int64_t ix = x0; ix < x1; ++ix) bins[(iy * in.w + ix) * o * o + oy * o + ox] = share;
      }
    }
  }
  const std::string rows =
      g.Node("Reshape", {x, g.Ints(module + ".pixels", {0, in.c, in.h * in.w})}, module + ".pixels",
             {}, 3);
  const std::string pooled = g.Node(
      "MatMul", {rows, g.Floats(module + ".bins", {in.h * in.w, o * o}, bins)}, module + ".bins");
  return g.Node("Reshape", {pooled, g.Ints(module + ".shape", {0, in.c, o, o})}, module, {}, 4);
}

}  // namespace

extern const LayerType kAdaptiveAvgPool2d = TypeOf<AdaptiveAvgPool2d>({
    .name = "adaptiveavgpool2d",
    .torch = "AdaptiveAvgPool2d",
    .summary = "the mean of each of output_size x output_size bins (1: global average pooling)",
    .args = {{"output_size", true, 0, 1, 1024, true}},
    .spatial = Spatial::kWindows,
    .out_shape = OutShape,
    .to_onnx = ToOnnx,
});

}  // namespace shmtrain::nn
