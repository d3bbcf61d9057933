// nn/kernels/direct_conv.h's kernels on Eigen's SIMD packets of S (8 floats or 4 doubles with
// the build's AVX2 + FMA): the AVX2 path's direct convolution, and every path's in double (the
// gradient checks). Included by nn/layers/conv2d.cc alone.
//
// A tile keeps kTile outputs x kOb channels in registers (kTile x kOb / lanes accumulators: 12
// of AVX2's 16 registers with floats). The forward pass walks the output's pixels, row after
// row, in tiles that may span rows (an 8x8 map: tiles of 6 and 5 pixels, not 4 + 4 a row);
// the weight gradient walks each kernel row's run of k*c taps in tiles of taps. Tiles are of
// as equal a length as kTile allows, which changes no sum: each output adds its taps in (ky,
// kx, c) order, and each gradient element its pixels in row order, whatever tile holds it.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

#include "nn/kernels/direct_conv.h"

namespace shmtrain::nn::direct_packets {

constexpr int64_t kOb = 16, kTile = 6;

template <class S>
struct Kernels {
  using Packet = typename Eigen::internal::packet_traits<S>::type;
  static constexpr int kLanes = Eigen::internal::unpacket_traits<Packet>::size;
  static constexpr int kPackets = kOb / kLanes;
  static_assert(kOb % kLanes == 0);

  // Output pixels p0 .. p0+NP-1 (row after row, a tile may span rows), channels ob ..
  // ob+kOb-1: bias, then each kernel row's k*c taps in (ky, kx, c) order.
  template <int NP>
  static void ForwardTile(const DirectConv& s, const S* padded, const S* w, const S* bias,
                          int64_t ob, int64_t p0, S* y) {
    using namespace Eigen::internal;
    const int64_t run = s.k * s.c;
    const S* at[NP];  // each pixel's window in `padded`
    for (int p = 0; p < NP; ++p) {
      const int64_t oy = (p0 + p) / s.out_w, ox = (p0 + p) % s.out_w;
      at[p] = padded + (oy * s.stride * s.wp + ox * s.stride) * s.c;
    }
    Packet acc[NP][kPackets];
    for (int q = 0; q < kPackets; ++q) {
      const Packet b = ploadu<Packet>(bias + ob + q * kLanes);
      for (int p = 0; p < NP; ++p) acc[p][q] = b;
    }
    for (int64_t ky = 0; ky < s.k; ++ky) {
      const int64_t row = ky * s.wp * s.c;
      const S* wk = w + ky * run * s.co + ob;
      for (int64_t j = 0; j < run; ++j, wk += s.co) {
        Packet wv[kPackets];
        for (int q = 0; q < kPackets; ++q) wv[q] = ploadu<Packet>(wk + q * kLanes);
        for (int p = 0; p < NP; ++p) {
          const Packet v = pset1<Packet>(at[p][row + j]);
          for (int q = 0; q < kPackets; ++q) acc[p][q] = pmadd(v, wv[q], acc[p][q]);
        }
      }
    }
    S* dst = y + p0 * s.co + ob;
    for (int p = 0; p < NP; ++p) {
      for (int q = 0; q < kPackets; ++q) pstoreu(dst + p * s.co + q * kLanes, acc[p][q]);
    }
  }

  // Taps (ky, j .. j+NT-1) of kernel row ky (j counts (kx, c) pairs), channels ob ..
  // ob+kOb-1: their gradient plus the sum over output pixels of input tap x dy.
  template <int NT>
  static void WeightTile(const DirectConv& s, const S* padded, const S* dy, int64_t ob,
                         int64_t ky, int64_t j, S* g) {
    using namespace Eigen::internal;
    const int64_t run = s.k * s.c;
    S* gt = g + (ky * run + j) * s.co + ob;
    Packet acc[NT][kPackets];
    for (int t = 0; t < NT; ++t) {
      for (int q = 0; q < kPackets; ++q) acc[t][q] = ploadu<Packet>(gt + t * s.co + q * kLanes);
    }
    for (int64_t oy = 0; oy < s.out_h; ++oy) {
      const S* src = padded + ((oy * s.stride + ky) * s.wp) * s.c + j;
      const S* d = dy + oy * s.out_w * s.co + ob;
      for (int64_t ox = 0; ox < s.out_w; ++ox, src += s.stride * s.c, d += s.co) {
        Packet dv[kPackets];
        for (int q = 0; q < kPackets; ++q) dv[q] = ploadu<Packet>(d + q * kLanes);
        for (int t = 0; t < NT; ++t) {
          const Packet v = pset1<Packet>(src[t]);
          for (int q = 0; q < kPackets; ++q) acc[t][q] = pmadd(v, dv[q], acc[t][q]);
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      for (int q = 0; q < kPackets; ++q) pstoreu(gt + t * s.co + q * kLanes, acc[t][q]);
    }
  }
};

// nn/kernels/direct_conv.h's DirectConvForward and DirectConvWeightGrad in packets of S; co is
// a multiple of kOb.
template <class S>
void Forward(const DirectConv& s, const S* padded, const S* w, const S* bias, S* y) {
  for (int64_t ob = 0; ob < s.co; ob += kOb) {
    ForTiles<kTile>(s.out_h * s.out_w, [&](auto np, int64_t p0) {
      Kernels<S>::template ForwardTile<decltype(np)::value>(s, padded, w, bias, ob, p0, y);
    });
  }
}

template <class S>
void WeightGrad(const DirectConv& s, const S* padded, const S* dy, S* g) {
  for (int64_t ob = 0; ob < s.co; ob += kOb) {
    for (int64_t ky = 0; ky < s.k; ++ky) {
      ForTiles<kTile>(s.k * s.c, [&](auto nt, int64_t j) {
        Kernels<S>::template WeightTile<decltype(nt)::value>(s, padded, dy, ob, ky, j, g);
      });
    }
  }
}

}  // namespace shmtrain::nn::direct_packets
