// The direct convolution of nn/layers/conv2d.cc (layers of a multiple of 16 output channels:
// forward, weight gradient, and, through the forward kernel, the input gradient). Its AVX2
// kernels are nn/kernels/direct_conv_packets.h's; these are the AVX-512 path's: the same tiles
// with 16 lanes a register, up to 12 pixels (or kernel taps) x 32 channels in 24 ZMM
// registers. Each output (or gradient element) is summed in the same order by the same FMAs:
// both paths give the same bits.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace shmtrain::nn {

// f(integral_constant<N>, i) for tiles [i, i+N) covering [0, n), of lengths that differ by one
// at most, none over Max (8 pixels with Max 6: 4 + 4, not 6 + 2); N is a constant so that a
// tile's loops unroll into registers. No sum depends on the tiles. Both paths' kernels cut
// their tiles by it; each instantiates it only with its own lambdas, so no instantiation is
// shared between the files compiled for different instruction sets.
template <int Max, class F>
void ForTiles(int64_t n, F&& f) {
  const int64_t tiles = (n + Max - 1) / Max;
  int64_t i = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t len = n / tiles + (t < n % tiles ? 1 : 0);
    [&]<int... N>(std::integer_sequence<int, N...>) {
      ((len == N + 1 ? (f(std::integral_constant<int, N + 1>{}, i), 0) : 0), ...);
    }(std::make_integer_sequence<int, Max>{});
    i += len;
  }
}

struct DirectConv {
  int64_t c, k, stride;  // input channels, kernel size, stride
  int64_t co;            // output channels: a multiple of 16
  int64_t out_h, out_w;  // the output's size
  int64_t wp;            // the padded input's width
};

// One sample: y (out_h x out_w x co, channels-last) = bias + the convolution of `padded` (the
// zero-padded sample, channels-last) with W (co x k*k*c, column-major, taps in (ky, kx, c)
// order). Only where UsedCpu().avx512 holds (nn/cpu.h).
void DirectConvForwardAvx512(const DirectConv& s, const float* padded, const float* w,
                             const float* bias, float* y);
// One sample's weight gradient added to g (co x k*k*c, column-major): for each tap, the sum
// over the output pixels of the tap's input times dy, pixel after pixel in row order. Only
// where UsedCpu().avx512 holds.
void DirectConvWeightGradAvx512(const DirectConv& s, const float* padded, const float* dy,
                                float* g);

// --precision bf16's forward kernel: the same tiles, with the taps of each kernel row taken in
// pairs (k*c even) by vdpbf16ps, whose products of bf16 values are summed into float. `padded`
// is the padded sample rounded to bf16 (RoundToBf16Avx512, nn/gemm.h); `pairs` is W rounded
// to bf16, each pair of taps side by side (PackDirectBf16Weights). Only where
// UsedCpu().avx512_bf16 holds.
void DirectConvForwardBf16(const DirectConv& s, const uint16_t* padded, const uint32_t* pairs,
                           const float* bias, float* y);
// W (co x k*k*c, column-major, k*c even) as DirectConvForwardBf16 reads it: for tap pair t
// (taps 2t and 2t+1) and channel o, pairs[t * co + o] holds W(o, 2t) in its low half and
// W(o, 2t + 1) in its high half, rounded to bf16 as vcvtne2ps2bf16 rounds. k*k*c*co/2 values.
void PackDirectBf16Weights(const DirectConv& s, const float* w, uint32_t* pairs);

}  // namespace shmtrain::nn
