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
// Neither transform goes through global memory.
#include <algorithm>

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

template <typename I>
struct GradTiles {
  I C, OC, H, W, OH, OW, ph, pw, TW, tiles, total_tiles, slice_tiles;
  Divider<I> by_tiles, by_tw;
};

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

  for (I chunk = first; chunk < last; chunk += kTiles) {
#pragma unroll 1
    for (int p = tid; p < kTiles * kChannels; p += kThreads) {
      const int j = p % kTiles, ch = p / kTiles;  // tile j of the chunk, channel ch
      const I index = chunk + j;
      float e[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
      float d[4][4];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int k = 0; k < 4; ++k) d[r][k] = 0.f;
      if (index < last) {
        const I n = t.by_tiles.div(index), tile = index - n * t.tiles;
        const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
        if (oc0 + ch < t.OC) {
          const float* plane = dy + (int64_t(n) * t.OC + oc0 + ch) * t.OH * t.OW;
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const I oy = 2 * ty + r;
            if (oy >= t.OH) break;
#pragma unroll
            for (int k = 0; k < 2; ++k) {
              const I ox = 2 * tx + k;
              if (ox < t.OW) e[r][k] = __ldg(plane + oy * t.OW + ox);
            }
          }
        }
        if (c0 + ch < t.C) {
          const float* plane = x + (int64_t(n) * t.C + c0 + ch) * t.H * t.W;
          const I y0 = 2 * ty - t.ph, x0 = 2 * tx - t.pw;
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
      }
      float* e_out = Es + j * kRow + ch;
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
        e_out[(r * 4 + 0) * kStride] = a[r][0];
        e_out[(r * 4 + 1) * kStride] = a[r][0] + a[r][1];
        e_out[(r * 4 + 2) * kStride] = a[r][0] - a[r][1];
        e_out[(r * 4 + 3) * kStride] = -a[r][1];
      }
      winograd_tile::store_input_transform(d, Vs + j * kRow + ch, kStride);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
      winograd_tile::add_outer_product(acc, Es + xi * kStride + j * kRow + ob * 8,
                                       Vs + xi * kStride + j * kRow + cb * 8);
    __syncthreads();
  }

  float* out = partial + (int64_t(slice) * 16 + xi) * t.OC * t.C;
#pragma unroll
  for (int a = 0; a < 8; ++a) {
    const I o = oc0 + ob * 8 + a;
    if (o >= t.OC) break;
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      const I c = c0 + cb * 8 + b;
      if (c < t.C) out[int64_t(o) * t.C + c] = acc[a][b];
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
