// CUDA's fused Winograd F(2x2, 3x3) convolution (winograd.h: launch_winograd_conv). A block is
// 32 tiles (2x2 output blocks, possibly of several samples) x 32 output channels, 256 threads:
//   per chunk of 16 input channels: each thread transforms two (tile, channel)s' 4x4 input
//   blocks into Vs[16][16][32] (B^T d B), the block copies U's [16][16][32] slice into Us; then
//   thread (xi, 8 output channels, 8 tiles) adds the 8x8 outer products of its coefficient xi
//   over the chunk into 64 registers;
//   at the end the 16 x 32 x 32 sums go to shared memory (over Vs and Us), and each thread
//   turns 4 (channel, tile) columns of 16 into their 2x2 outputs (A^T m A + bias).
// No Winograd-domain array goes through global memory: the layer reads x and U and writes y.
// ResNet fp32 on an H200, the 28x28 x 32-channel layer's forward: 92 us, against 174 with the
// transforms and a cuBLAS product in between (the Winograd domain through global memory), and
// about 180 as im2col + cuBLAS; ncu: 56% of issue slots busy at 25% occupancy (two blocks an SM).
#include <algorithm>

#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/winograd.h"
#include "trident/kernels/cuda/winograd_tile.cuh"

namespace trident::cuda {
namespace {

constexpr int kTiles = 32;        // tiles a block
constexpr int kOutChannels = 32;  // output channels a block
constexpr int kThreads = 256;     // 128 registers a thread at most: two blocks an SM
// Input channels a pass. ResNet fp32 step on an H200: 2.590 ms with 8, 2.500-2.515 with 16, and
// 2.653 with 32 (one block an SM: 165 registers, no spills).
constexpr int kChunk = 16;
constexpr int kSharedFloats = 16 * kOutChannels * kTiles;  // Ms; Vs and Us take as much
static_assert(16 * kChunk * (kTiles + kOutChannels) <= kSharedFloats, "Vs and Us fit under Ms");
static_assert(kChunk * kTiles % kThreads == 0, "whole (tile, channel) pairs a thread");
static_assert(kThreads == 16 * (kOutChannels / 8) * (kTiles / 8), "one 8x8 product a thread");

template <typename I>
struct ConvTiles {
  I C, OC, H, W, OH, OW, ph, pw, TW, tiles, total_tiles;
  Divider<I> by_tiles, by_tw;
};

template <typename I>
__global__ void __launch_bounds__(kThreads, 2)
    winograd_conv_kernel(const float* __restrict__ x, const float* __restrict__ U,
                         const float* __restrict__ bias, ConvTiles<I> t, float* __restrict__ y) {
  wait_for_prior_grids();
  extern __shared__ float4 shared4[];
  float* const Vs = reinterpret_cast<float*>(shared4);  // [16][kChunk][kTiles]
  float* const Us = Vs + 16 * kChunk * kTiles;          // [16][kChunk][kOutChannels]
  float* const Ms = Vs;                                 // [16][kOutChannels][kTiles], at the end
  const int tid = threadIdx.x;
  const I tile0 = I(blockIdx.x) * kTiles, oc0 = I(blockIdx.y) * kOutChannels;

  // The fill's (tile, channel): tile the fastest, so that Vs's stores are conflict-free.
  const int fill_tile = tid % kTiles;
  const I fill_index = tile0 + fill_tile;
  const bool fill_valid = fill_index < t.total_tiles;
  const float* x_sample = x;
  I y0 = 0, x0 = 0;
  if (fill_valid) {
    const I n = t.by_tiles.div(fill_index), tile = fill_index - n * t.tiles;
    const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
    y0 = 2 * ty - t.ph, x0 = 2 * tx - t.pw;
    x_sample = x + int64_t(n) * t.C * t.H * t.W;
  }
  // The product's share: coefficient xi, output channels ob * 8 .., tiles tb * 8 ..
  const int xi = tid / 16, ob = (tid / 4) % 4, tb = tid % 4;
  float acc[8][8];
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int b = 0; b < 8; ++b) acc[a][b] = 0.f;

  for (I c0 = 0; c0 < t.C; c0 += kChunk) {
#pragma unroll 1
    for (int pair = 0; pair < kChunk * kTiles / kThreads; ++pair) {
      const int fill_channel = tid / kTiles + pair * (kThreads / kTiles);
      float d[4][4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int k = 0; k < 4; ++k) d[r][k] = 0.f;
      const I c = c0 + fill_channel;
      if (fill_valid && c < t.C) {
        const float* plane = x_sample + int64_t(c) * t.H * t.W;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const I iy = y0 + r;
          if (iy < 0 || iy >= t.H) continue;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const I ix = x0 + k;
            if (ix >= 0 && ix < t.W) d[r][k] = __ldg(plane + iy * t.W + ix);
          }
        }
      }
      winograd_tile::store_input_transform(d, Vs + fill_channel * kTiles + fill_tile,
                                           kChunk * kTiles);
    }
    if (t.OC % 4 == 0) {  // U's rows in 16-byte pieces (oc0 is a multiple of 32)
      for (int k = tid; k < 16 * kChunk * kOutChannels / 4; k += kThreads) {
        const int o = k % (kOutChannels / 4) * 4, cc = k / (kOutChannels / 4) % kChunk;
        const int e = k / (kOutChannels / 4 * kChunk);
        const I c = c0 + cc, oc = oc0 + o;
        reinterpret_cast<float4*>(Us)[k] = c < t.C && oc < t.OC
                                               ? __ldg(reinterpret_cast<const float4*>(
                                                     U + (int64_t(e) * t.C + c) * t.OC + oc))
                                               : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    } else {
      for (int k = tid; k < 16 * kChunk * kOutChannels; k += kThreads) {
        const int o = k % kOutChannels, cc = (k / kOutChannels) % kChunk;
        const int e = k / (kOutChannels * kChunk);
        const I c = c0 + cc, oc = oc0 + o;
        Us[k] = c < t.C && oc < t.OC ? __ldg(U + (int64_t(e) * t.C + c) * t.OC + oc) : 0.f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int cc = 0; cc < kChunk; ++cc)
      winograd_tile::add_outer_product(acc, Us + (xi * kChunk + cc) * kOutChannels + ob * 8,
                                       Vs + (xi * kChunk + cc) * kTiles + tb * 8);
    __syncthreads();
  }

#pragma unroll
  for (int a = 0; a < 8; ++a) {
    float4* row = reinterpret_cast<float4*>(Ms + (xi * kOutChannels + ob * 8 + a) * kTiles +
                                            tb * 8);
    row[0] = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
    row[1] = make_float4(acc[a][4], acc[a][5], acc[a][6], acc[a][7]);
  }
  __syncthreads();

  for (int k = tid; k < kOutChannels * kTiles; k += kThreads) {
    const int j = k % kTiles, o = k / kTiles;
    const I index = tile0 + j, oc = oc0 + o;
    if (index >= t.total_tiles || oc >= t.OC) continue;
    float m[4][4];
#pragma unroll
    for (int e = 0; e < 16; ++e) m[e / 4][e % 4] = Ms[(e * kOutChannels + o) * kTiles + j];
    float a[2][4];  // A^T m: rows m0 + m1 + m2, m1 - m2 - m3
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      a[0][q] = m[0][q] + m[1][q] + m[2][q];
      a[1][q] = m[1][q] - m[2][q] - m[3][q];
    }
    const float b = bias ? __ldg(bias + oc) : 0.f;
    const I n = t.by_tiles.div(index), tile = index - n * t.tiles;
    const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
    float* plane = y + (int64_t(n) * t.OC + oc) * t.OH * t.OW;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const I oy = 2 * ty + r, ox = 2 * tx;
      if (oy >= t.OH) break;
      float* out = plane + oy * t.OW + ox;
      out[0] = a[r][0] + a[r][1] + a[r][2] + b;
      if (ox + 1 < t.OW) out[1] = a[r][1] - a[r][2] - a[r][3] + b;
    }
  }
}

template <typename I>
void launch_conv(const KernelContext& ctx, const Conv2dShape& s, const float* x, const float* U,
                 const float* bias, float* y) {
  ConvTiles<I> t;
  t.C = I(s.in_channels), t.OC = I(s.out_channels), t.H = I(s.height), t.W = I(s.width);
  t.OH = I(s.out_height()), t.OW = I(s.out_width()), t.ph = I(s.pad_h), t.pw = I(s.pad_w);
  const int64_t TH = (s.out_height() + 1) / 2, TW = (s.out_width() + 1) / 2;
  t.TW = I(TW), t.tiles = I(TH * TW), t.total_tiles = I(s.batch * TH * TW);
  t.by_tiles = Divider<I>(TH * TW), t.by_tw = Divider<I>(TW);
  constexpr auto kernel = winograd_conv_kernel<I>;
  constexpr int bytes = kSharedFloats * int(sizeof(float));
  allow_dynamic_shared_memory<kernel>(bytes);
  const dim3 grid(unsigned((s.batch * TH * TW + kTiles - 1) / kTiles),
                  unsigned((s.out_channels + kOutChannels - 1) / kOutChannels));
  launch(ctx, kernel, grid, kThreads, bytes, x, U, bias, t, y);
}

}  // namespace

void launch_winograd_conv(const KernelContext& ctx, const Conv2dShape& s, const float* x,
                          const float* U, const float* bias, float* y) {
  if (s.batch == 0) return;
  const int64_t tiles = s.batch * ((s.out_height() + 1) / 2) * ((s.out_width() + 1) / 2);
  if (fits_int32(std::max({s.input_numel(), s.output_numel(), tiles + kTiles})))
    launch_conv<int32_t>(ctx, s, x, U, bias, y);
  else
    launch_conv<int64_t>(ctx, s, x, U, bias, y);
}

}  // namespace trident::cuda
