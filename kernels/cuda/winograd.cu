// The transforms of CUDA's Winograd convolution (see winograd.h): one thread a tile and channel,
// consecutive threads on consecutive tiles, so that the 16 planes of the Winograd domain are
// written (and read) coalesced; x and dy are read at a stride of 2 columns, through L1.
#include "trident/kernels/cuda/winograd.h"

#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

// What the tile kernels index by, in I (int32_t where every index fits: cheaper division).
template <typename I>
struct Tiles {
  I batch, C, OC, H, W, OH, OW, ph, pw, TW, tiles, group, columns;
  Divider<I> by_columns, by_tiles, by_tw, by_group;
  explicit Tiles(const WinogradTiles& t)
      : batch(I(t.batch)), C(I(t.C)), OC(I(t.OC)), H(I(t.H)), W(I(t.W)), OH(I(t.OH)),
        OW(I(t.OW)), ph(I(t.ph)), pw(I(t.pw)), TW(I(t.TW)), tiles(I(t.tiles)), group(I(t.group)),
        columns(I(t.columns)), by_columns(t.columns), by_tiles(t.tiles), by_tw(t.TW),
        by_group(t.group) {}
};

// V[g][xi][c][col]: thread (g, c, col), col the fastest.
template <typename I>
__global__ void winograd_input_kernel(const float* __restrict__ x, Tiles<I> t, I total,
                                      Divider<I> by_channels, float* __restrict__ V) {
  wait_for_prior_grids();
  const I plane_stride = t.C * t.columns;  // from one xi to the next
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I q = t.by_columns.div(i), col = i - q * t.columns;
    const I g = by_channels.div(q), c = q - g * t.C;
    const I s = t.by_tiles.div(col), tile = col - s * t.tiles;  // sample s of the group
    const I n = g * t.group + s;
    float d[4][4] = {};
    if (s < t.group && n < t.batch) {
      const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
      const I y0 = 2 * ty - t.ph, x0 = 2 * tx - t.pw;
      const float* plane = x + (int64_t(n) * t.C + c) * t.H * t.W;
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
    float b[4][4];  // B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      b[0][k] = d[0][k] - d[2][k];
      b[1][k] = d[1][k] + d[2][k];
      b[2][k] = d[2][k] - d[1][k];
      b[3][k] = d[1][k] - d[3][k];
    }
    float* out = V + (int64_t(g) * 16 * t.C + c) * t.columns + col;
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // (B^T d) B: the same combinations of the columns
      out[(r * 4 + 0) * int64_t(plane_stride)] = b[r][0] - b[r][2];
      out[(r * 4 + 1) * int64_t(plane_stride)] = b[r][1] + b[r][2];
      out[(r * 4 + 2) * int64_t(plane_stride)] = b[r][2] - b[r][1];
      out[(r * 4 + 3) * int64_t(plane_stride)] = b[r][1] - b[r][3];
    }
  }
}

// E[g][xi][o][col] = A e A^T of dy's 2x2 block: thread (g, o, col), col the fastest.
template <typename I>
__global__ void winograd_gradient_kernel(const float* __restrict__ dy, Tiles<I> t, I total,
                                         Divider<I> by_out_channels, float* __restrict__ E) {
  wait_for_prior_grids();
  const I plane_stride = t.OC * t.columns;
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I q = t.by_columns.div(i), col = i - q * t.columns;
    const I g = by_out_channels.div(q), o = q - g * t.OC;
    const I s = t.by_tiles.div(col), tile = col - s * t.tiles;
    const I n = g * t.group + s;
    float e[2][2] = {};
    if (s < t.group && n < t.batch) {
      const I ty = t.by_tw.div(tile), tx = tile - ty * t.TW;
      const float* plane = dy + (int64_t(n) * t.OC + o) * t.OH * t.OW;
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
    float a[4][2];  // A e: rows e0, e0 + e1, e0 - e1, -e1
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      a[0][k] = e[0][k];
      a[1][k] = e[0][k] + e[1][k];
      a[2][k] = e[0][k] - e[1][k];
      a[3][k] = -e[1][k];
    }
    float* out = E + (int64_t(g) * 16 * t.OC + o) * t.columns + col;
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // (A e) A^T
      out[(r * 4 + 0) * int64_t(plane_stride)] = a[r][0];
      out[(r * 4 + 1) * int64_t(plane_stride)] = a[r][0] + a[r][1];
      out[(r * 4 + 2) * int64_t(plane_stride)] = a[r][0] - a[r][1];
      out[(r * 4 + 3) * int64_t(plane_stride)] = -a[r][1];
    }
  }
}

// U[xi][c][o]: thread (c, o), o the fastest.
__global__ void winograd_kernel_transform(const float* __restrict__ w, int64_t C, int64_t OC,
                                          bool flipped, float* __restrict__ U) {
  wait_for_prior_grids();
  const int64_t total = OC * C;
  for (int64_t i = first_index<int64_t>(); i < total; i += grid_step<int64_t>()) {
    const int64_t c = i / OC, o = i - c * OC;
    float k[9];
    // flipped: the forward's kernel [c, o] (its output channel c, input channel o; its OC is
    // this C), turned by 180 degrees
    const float* src = flipped ? w + (c * OC + o) * 9 : w + (o * C + c) * 9;
#pragma unroll
    for (int e = 0; e < 9; ++e) k[e] = __ldg(src + (flipped ? 8 - e : e));
    float q[4][3];  // G k: rows k0, (k0 + k1 + k2) / 2, (k0 - k1 + k2) / 2, k2
#pragma unroll
    for (int b = 0; b < 3; ++b) {
      q[0][b] = k[b];
      q[1][b] = 0.5f * (k[b] + k[3 + b] + k[6 + b]);
      q[2][b] = 0.5f * (k[b] - k[3 + b] + k[6 + b]);
      q[3][b] = k[6 + b];
    }
    float* out = U + i;  // + xi * total
#pragma unroll
    for (int a = 0; a < 4; ++a) {  // (G k) G^T
      out[(a * 4 + 0) * total] = q[a][0];
      out[(a * 4 + 1) * total] = 0.5f * (q[a][0] + q[a][1] + q[a][2]);
      out[(a * 4 + 2) * total] = 0.5f * (q[a][0] - q[a][1] + q[a][2]);
      out[(a * 4 + 3) * total] = q[a][2];
    }
  }
}

// dw from Mw: a block is 16 elements (o, i) x the 16 xi; each thread sums one (xi, element)
// over the groups in order, then 16 threads turn an element's 16 sums into its 3x3 gradient.
constexpr int kElementsPerBlock = 16;

__global__ void __launch_bounds__(16 * kElementsPerBlock)
    winograd_weight_gradient_kernel(const float* __restrict__ Mw, int64_t elements,
                                    int64_t groups, float* __restrict__ dw) {
  wait_for_prior_grids();
  __shared__ float sums[16][kElementsPerBlock + 1];
  const int lane = threadIdx.x % kElementsPerBlock, xi = threadIdx.x / kElementsPerBlock;
  const int64_t element = int64_t(blockIdx.x) * kElementsPerBlock + lane;
  float sum = 0.f;
  if (element < elements)
    for (int64_t g = 0; g < groups; ++g) sum += Mw[(g * 16 + xi) * elements + element];
  sums[xi][lane] = sum;
  __syncthreads();
  if (xi != 0 || element >= elements) return;
  float m[4][4];
#pragma unroll
  for (int k = 0; k < 16; ++k) m[k / 4][k % 4] = sums[k][lane];
  float q[3][4];  // G^T m
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    q[0][b] = m[0][b] + 0.5f * (m[1][b] + m[2][b]);
    q[1][b] = 0.5f * (m[1][b] - m[2][b]);
    q[2][b] = 0.5f * (m[1][b] + m[2][b]) + m[3][b];
  }
  float* out = dw + element * 9;
#pragma unroll
  for (int a = 0; a < 3; ++a) {  // (G^T m) G
    out[a * 3 + 0] = q[a][0] + 0.5f * (q[a][1] + q[a][2]);
    out[a * 3 + 1] = 0.5f * (q[a][1] - q[a][2]);
    out[a * 3 + 2] = 0.5f * (q[a][1] + q[a][2]) + q[a][3];
  }
}

// Whether every index of t's tensors fits int32.
bool tiles_fit_int32(const WinogradTiles& t) {
  const int64_t channels = std::max(t.C, t.OC);
  return fits_int32(t.domain_elements(channels)) &&
         fits_int32(t.groups * t.group * channels * std::max(t.H * t.W, t.OH * t.OW));
}

}  // namespace

void launch_winograd_input(const KernelContext& ctx, const WinogradTiles& t, const float* x,
                           float* V) {
  const int64_t total = t.groups * t.C * t.columns;
  if (total <= 0) return;
  if (tiles_fit_int32(t))
    launch(ctx, winograd_input_kernel<int32_t>, grid_for(total), kBlockThreads, 0, x,
           Tiles<int32_t>(t), int32_t(total), Divider<int32_t>(t.C), V);
  else
    launch(ctx, winograd_input_kernel<int64_t>, grid_for(total), kBlockThreads, 0, x,
           Tiles<int64_t>(t), total, Divider<int64_t>(t.C), V);
}

void launch_winograd_gradient(const KernelContext& ctx, const WinogradTiles& t, const float* dy,
                              float* E) {
  const int64_t total = t.groups * t.OC * t.columns;
  if (total <= 0) return;
  if (tiles_fit_int32(t))
    launch(ctx, winograd_gradient_kernel<int32_t>, grid_for(total), kBlockThreads, 0, dy,
           Tiles<int32_t>(t), int32_t(total), Divider<int32_t>(t.OC), E);
  else
    launch(ctx, winograd_gradient_kernel<int64_t>, grid_for(total), kBlockThreads, 0, dy,
           Tiles<int64_t>(t), total, Divider<int64_t>(t.OC), E);
}

void launch_winograd_kernel(const KernelContext& ctx, int64_t channels, int64_t out_channels,
                            const float* w, bool flipped, float* U) {
  const int64_t total = channels * out_channels;
  if (total <= 0) return;
  launch(ctx, winograd_kernel_transform, grid_for(total), kBlockThreads, 0, w, channels,
         out_channels, flipped, U);
}

void launch_winograd_weight_gradient(const KernelContext& ctx, const WinogradTiles& t,
                                     const float* Mw, float* dw) {
  const int64_t elements = t.OC * t.C;
  if (elements <= 0) return;
  const unsigned blocks = unsigned((elements + kElementsPerBlock - 1) / kElementsPerBlock);
  launch(ctx, winograd_weight_gradient_kernel, blocks, 16 * kElementsPerBlock, 0, Mw, elements,
         t.groups, dw);
}

}  // namespace trident::cuda
