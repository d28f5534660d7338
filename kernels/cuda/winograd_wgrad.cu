// CUDA's fused Winograd weight gradient, F(3x3, 2x2) (winograd.h:
// launch_winograd_weight_gradient_fused): dw = G^T [sum over tiles (A e A^T) . (B^T d B)] G, e dy's
// 2x2 block of a tile, d x's 4x4 block. A block is 32 output channels x 32 input channels x a
// slice of the tiles, 256 threads:
//   per chunk of 16 tiles: the threads transform dy's blocks into Es[16][16 tiles][32 channels]
//   and x's into Vs[16][16][32] (channels the fastest, rows of 36 floats: the fill's stores
//   meet at most 2-way bank conflicts, the products' 16-byte loads none); then thread (xi, 8
//   output channels, 8 input channels) adds the chunk's 16 outer products of its coefficient xi
//   into 64 registers;
//   at the end each block writes its 16 x 32 x 32 sums to partial[slice][xi][OC][C], and
//   winograd_weight_gradient_kernel (winograd.cu) adds the slices in order and transforms back.
// Neither transform goes through global memory. A thread fills the same tile of every chunk in
// two channels, so that the tile's position and bounds are worked out once a chunk: ResNet's
// 28x28 x 32-channel layer 103 -> 78 us on an H200.
#include <algorithm>
#include <cstdint>

#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/winograd.h"
#include "trident/kernels/cuda/winograd_tile.cuh"

namespace trident::cuda {
namespace {

constexpr int kChannels = 32;  // output and input channels a block
constexpr int kTiles = 16;     // tiles a chunk
constexpr int kRow = kChannels + 4;
constexpr int kThreads = 256;
constexpr int kSharedFloats = 2 * 16 * kTiles * kRow;  // Es, Vs
static_assert(kThreads == 16 * (kChannels / 8) * (kChannels / 8), "one 8x8 product a thread");
static_assert(kChannels == WinogradSlices::kChannelsPerBlock, "winograd_plan.h's blocks");
static_assert(kTiles == 16, "winograd.h's winograd_slices");
static_assert(kTiles * kChannels % kThreads == 0, "whole (tile, channel) pairs a thread");
constexpr int kFillStep = kThreads / kTiles;  // channels between a thread's blocks

template <typename I>
struct GradTiles {
  I C, OC, H, W, OH, OW, ph, pw, TW, tiles, total_tiles, slice_tiles;
  Divider<I> by_tiles, by_tw;
};

// out[e * stride] = (A e A^T)[e / 4][e % 4] for dy's 2x2 block e (A = [1 0; 1 1; 1 -1; 0 -1]).
__device__ __forceinline__ void store_output_transform(const float (&e)[2][2], float* out,
                                                       int stride) {
  float a[4][2];  // A e: rows e0, e0 + e1, e0 - e1, -e1; then (A e) A^T
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    a[0][k] = e[0][k];
    a[1][k] = e[0][k] + e[1][k];
    a[2][k] = e[0][k] - e[1][k];
    a[3][k] = -e[1][k];
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    out[(r * 4 + 0) * stride] = a[r][0];
    out[(r * 4 + 1) * stride] = a[r][0] + a[r][1];
    out[(r * 4 + 2) * stride] = a[r][0] - a[r][1];
    out[(r * 4 + 3) * stride] = -a[r][1];
  }
}

template <typename I>
__global__ void __launch_bounds__(kThreads, 2)
    winograd_wgrad_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                          GradTiles<I> t, float* __restrict__ partial) {
  wait_for_prior_grids();
  extern __shared__ float4 shared4[];
  float* const Es = reinterpret_cast<float*>(shared4);  // [16][kTiles][kRow]
  float* const Vs = Es + 16 * kTiles * kRow;            // [16][kTiles][kRow]
  const int tid = threadIdx.x;
  const I slice = I(blockIdx.x);
  const I oc0 = I(blockIdx.y) * kChannels, c0 = I(blockIdx.z) * kChannels;
  const I first = slice * t.slice_tiles;
  const I last = min(first + t.slice_tiles, t.total_tiles);
  const int xi = tid / 16, ob = (tid / 4) % 4, cb = tid % 4;
  float acc[8][8];
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int b = 0; b < 8; ++b) acc[a][b] = 0.f;
  constexpr int kStride = kTiles * kRow;  // from one xi to the next

  // The fill: each thread takes tile j of every chunk in channels fill_channel + kFillStep *
  // pair, so that a tile's position and bounds are worked out once a chunk (ncu: index
  // arithmetic was most of the kernel's instructions besides the products).
  const int j = tid % kTiles, fill_channel = tid / kTiles;
  const I dy_plane = t.OH * t.OW, x_plane = t.H * t.W;
  for (I chunk = first; chunk < last; chunk += kTiles) {
    const I index = chunk + j;
    // dy's 2x2 block (bit r * 2 + k) and x's 4x4 block (bit r * 4 + k) inside their images.
    unsigned dy_inside = 0, x_inside = 0;
    I dy_origin = 0, x_origin = 0, n = 0;
    if (index < last) {
      n = t.by_tiles.div(index);
      const I tile = index - n * t.tiles;
      const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
      const I oy = 2 * ty, ox = 2 * tx, y0 = oy - t.ph, x0 = ox - t.pw;
      dy_origin = oy * t.OW + ox;
      x_origin = y0 * t.W + x0;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (oy + e / 2 < t.OH && ox + e % 2 < t.OW) dy_inside |= 1u << e;
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const I iy = y0 + e / 4, ix = x0 + e % 4;
        if (iy >= 0 && iy < t.H && ix >= 0 && ix < t.W) x_inside |= 1u << e;
      }
    }
    const float* dy_sample = dy + int64_t(n) * t.OC * dy_plane;
    const float* x_sample = x + int64_t(n) * t.C * x_plane;
#pragma unroll 1
    for (int pair = 0; pair < kTiles * kChannels / kThreads; ++pair) {
      const int ch = fill_channel + pair * kFillStep;
      const unsigned dy_valid = oc0 + ch < t.OC ? dy_inside : 0u;
      const unsigned x_valid = c0 + ch < t.C ? x_inside : 0u;
      const I dy_offset = (dy_valid ? oc0 + ch : 0) * dy_plane + dy_origin;
      const I x_offset = (x_valid ? c0 + ch : 0) * x_plane + x_origin;
      float e[2][2], d[4][4];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int k = 0; k < 2; ++k)
          e[r][k] = (dy_valid >> (r * 2 + k)) & 1u
                        ? __ldg(dy_sample + (dy_offset + r * t.OW + k))
                        : 0.f;
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int k = 0; k < 4; ++k)
          d[r][k] = (x_valid >> (r * 4 + k)) & 1u ? __ldg(x_sample + (x_offset + r * t.W + k))
                                                  : 0.f;
      store_output_transform(e, Es + j * kRow + ch, kStride);
      winograd_tile::store_input_transform(d, Vs + j * kRow + ch, kStride);
    }
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < kTiles; ++jj)
      winograd_tile::add_outer_product(acc, Es + xi * kStride + jj * kRow + ob * 8,
                                       Vs + xi * kStride + jj * kRow + cb * 8);
    __syncthreads();
  }

  // Rows of 8 sums: two 16-byte stores where partial is 16-byte aligned and C keeps the rows so
  // (c0 + cb * 8 is a multiple of 8).
  float* out = partial + (int64_t(slice) * 16 + xi) * t.OC * t.C;
  const I c = c0 + cb * 8;
  const bool by_16_bytes = t.C % 4 == 0 && c + 8 <= t.C &&
                           reinterpret_cast<uintptr_t>(partial) % sizeof(float4) == 0;
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const I o = oc0 + ob * 8 + a;
    if (o >= t.OC) break;
    float* row = out + int64_t(o) * t.C + c;
    if (by_16_bytes) {
      reinterpret_cast<float4*>(row)[0] = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
      reinterpret_cast<float4*>(row)[1] = make_float4(acc[a][4], acc[a][5], acc[a][6], acc[a][7]);
    } else {
#pragma unroll
      for (int b = 0; b < 8; ++b)
        if (c + b < t.C) row[b] = acc[a][b];
    }
  }
}

template <typename I>
void launch_wgrad(const KernelContext& ctx, const Conv2dShape& s, const WinogradSlices& slices,
                  const float* x, const float* dy, float* partial) {
  GradTiles<I> t;
  t.C = I(s.in_channels), t.OC = I(s.out_channels), t.H = I(s.height), t.W = I(s.width);
  t.OH = I(s.out_height()), t.OW = I(s.out_width()), t.ph = I(s.pad_h), t.pw = I(s.pad_w);
  const int64_t TH = (s.out_height() + 1) / 2, TW = (s.out_width() + 1) / 2;
  t.TW = I(TW), t.tiles = I(TH * TW), t.total_tiles = I(s.batch * TH * TW);
  t.slice_tiles = I(slices.tiles_per_slice);
  t.by_tiles = Divider<I>(TH * TW), t.by_tw = Divider<I>(TW);
  constexpr auto kernel = winograd_wgrad_kernel<I>;
  constexpr int bytes = kSharedFloats * int(sizeof(float));
  allow_dynamic_shared_memory<kernel>(bytes);
  const dim3 grid(unsigned(slices.count), unsigned((s.out_channels + kChannels - 1) / kChannels),
                  unsigned((s.in_channels + kChannels - 1) / kChannels));
  launch(ctx, kernel, grid, kThreads, bytes, x, dy, t, partial);
}

}  // namespace

void launch_winograd_weight_gradient_fused(const KernelContext& ctx, const Conv2dShape& s,
                                           const float* x, const float* dy, float* partial,
                                           float* dw) {
  const WinogradSlices slices = winograd_slices(s);
  if (s.batch == 0) return;
  const int64_t tiles = s.batch * ((s.out_height() + 1) / 2) * ((s.out_width() + 1) / 2);
  if (fits_int32(std::max({s.input_numel(), s.output_numel(), tiles + slices.tiles_per_slice})))
    launch_wgrad<int32_t>(ctx, s, slices, x, dy, partial);
  else
    launch_wgrad<int64_t>(ctx, s, slices, x, dy, partial);
  launch_winograd_slices_to_weights(ctx, s.out_channels, s.in_channels, slices.count, partial,
                                    dw);
}

}  // namespace trident::cuda
