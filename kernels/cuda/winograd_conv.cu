// CUDA's fused Winograd F(2x2, 3x3) convolution (winograd.h: launch_winograd_conv). A block is
// 32 tiles (2x2 output blocks, possibly of several samples) x 32 output channels, 256 threads:
//   per chunk of 16 input channels: each thread transforms two (tile, channel)s' 4x4 input
//   blocks into Vs[16][16][32] (B^T d B), the block copies U's [16][16][32] slice into Us; then
//   thread (xi, 8 output channels, 8 tiles) adds the 8x8 outer products of its coefficient xi
//   over the chunk into 64 registers;
//   at the end the 16 x 32 x 32 sums go to shared memory (over Vs and Us), and each thread
//   turns 4 (channel, tile) columns of 16 into their 2x2 outputs (A^T m A + bias).
// No Winograd-domain array goes through global memory: the layer reads x and U and writes y.
// ResNet fp32 on an H200, the 28x28 x 32-channel layer's forward: 76 us, against 174 with the
// transforms and a cuBLAS product in between (the Winograd domain through global memory), and
// about 180 as im2col + cuBLAS. Each thread's fill addresses and bounds are worked out once
// (91 us before: ncu counted as many index instructions as products at C = 32). Tried and left
// out: the fills by cp.async a chunk ahead (8 or 16 channels a chunk: no faster; latency was
// not what held the kernel).
#include <algorithm>
#include <cstdint>

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
constexpr int kFillStep = kThreads / kTiles;  // channels between a thread's x blocks
constexpr int kQuads = kOutChannels / 4;       // float4s in a row of U's slice
constexpr int kCoefficientStep = kThreads / (kQuads * kChunk);  // between a thread's U copies
static_assert(kThreads % (kQuads * kChunk) == 0 && 16 % kCoefficientStep == 0,
              "a thread copies U's slice at one (channel, quad) for every kCoefficientStep-th xi");
static_assert(kOutChannels % kFillStep == 0, "whole output channels a thread at the end");

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

  // Each thread's share of the fills is the same in every chunk, so that its addresses and
  // bounds are worked out once here (ncu: index arithmetic was half the instructions).
  // x: the 4x4 blocks of tile fill_tile (the fastest across threads: Vs's stores are
  // conflict-free) in channels fill_channel + kFillStep * pair of the chunk; `inside` has bit
  // r * 4 + k set where the block's element (r, k) lies in the image.
  const int fill_tile = tid % kTiles, fill_channel = tid / kTiles;
  const I fill_index = tile0 + fill_tile;
  const float* x_sample = x;
  I origin = 0;  // the block's top-left element in a channel's plane (may lie outside it)
  unsigned inside = 0;
  if (fill_index < t.total_tiles) {
    const I n = t.by_tiles.div(fill_index), tile = fill_index - n * t.tiles;
    const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
    const I y0 = 2 * ty - t.ph, x0 = 2 * tx - t.pw;
    origin = y0 * t.W + x0;
    x_sample = x + int64_t(n) * t.C * t.H * t.W;
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const I iy = y0 + e / 4, ix = x0 + e % 4;
      if (iy >= 0 && iy < t.H && ix >= 0 && ix < t.W) inside |= 1u << e;
    }
  }
  const I plane = t.H * t.W;
  // U: 16 bytes at output channels u_quad * 4 .., channel u_channel of the chunk, coefficients
  // u_coefficient + kCoefficientStep * i (the k-th float4 of Us with k = tid + kThreads * i).
  const int u_quad = tid % kQuads, u_channel = tid / kQuads % kChunk;
  const int u_coefficient = tid / (kQuads * kChunk);
  const bool u_by_16_bytes =  // oc0 is a multiple of 32
      t.OC % 4 == 0 && reinterpret_cast<uintptr_t>(U) % sizeof(float4) == 0;

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
      const int channel = fill_channel + pair * kFillStep;
      const I c = c0 + channel;
      const unsigned valid = c < t.C ? inside : 0u;
      const I offset = (valid ? c : 0) * plane + origin;
      float d[4][4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int k = 0; k < 4; ++k)
          d[r][k] = (valid >> (r * 4 + k)) & 1u ? __ldg(x_sample + (offset + r * t.W + k)) : 0.f;
      winograd_tile::store_input_transform(d, Vs + channel * kTiles + fill_tile,
                                           kChunk * kTiles);
    }
    if (u_by_16_bytes) {
      const I c = c0 + u_channel, oc = oc0 + u_quad * 4;
      const bool ok = c < t.C && oc < t.OC;
      const float4* src = reinterpret_cast<const float4*>(
          U + (int64_t(u_coefficient) * t.C + (ok ? c : 0)) * t.OC + (ok ? oc : 0));
      const int64_t step = int64_t(kCoefficientStep) * t.C * t.OC / 4;  // in float4s
      float4* dst = reinterpret_cast<float4*>(Us) + tid;
#pragma unroll
      for (int i = 0; i < 16 / kCoefficientStep; ++i)
        dst[i * kThreads] = ok ? __ldg(src + i * step) : make_float4(0.f, 0.f, 0.f, 0.f);
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

  // Each thread turns tile j's sums into outputs for output channels o0, o0 + kFillStep, ..
  const int j = tid % kTiles, o0 = tid / kTiles;
  const I index = tile0 + j;
  if (index >= t.total_tiles) return;
  const I n = t.by_tiles.div(index), tile = index - n * t.tiles;
  const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
  const I oy = 2 * ty, ox = 2 * tx;
  const bool second_row = oy + 1 < t.OH, second_column = ox + 1 < t.OW;
  // Both outputs of a row in one 8-byte store where they are 8-byte aligned: ox is even, so
  // when y is and OW (and so every plane and row) is even.
  const bool paired =
      second_column && t.OW % 2 == 0 && reinterpret_cast<uintptr_t>(y) % sizeof(float2) == 0;
  float* const y_tile = y + int64_t(n) * t.OC * t.OH * t.OW + oy * t.OW + ox;
#pragma unroll 1
  for (int o = o0; o < kOutChannels; o += kFillStep) {
    const I oc = oc0 + o;
    if (oc >= t.OC) break;
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
    float* out = y_tile + int64_t(oc) * t.OH * t.OW;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (r == 1 && !second_row) break;
      const float left = a[r][0] + a[r][1] + a[r][2] + b;
      const float right = a[r][1] - a[r][2] - a[r][3] + b;
      if (paired) {
        *reinterpret_cast<float2*>(out) = make_float2(left, right);
      } else {
        out[0] = left;
        if (second_column) out[1] = right;
      }
      out += t.OW;
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
