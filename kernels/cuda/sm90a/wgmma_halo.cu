// The stride-1 gathered product (implicit_conv.cu's gather: a forward, or a stride-1 data
// gradient) on Hopper's warpgroup multiply over halo windows, for up to 64 output channels and
// 32 or 64 16-bit input channels. Built for sm_90a only; kernels/cuda/wgmma_conv.h says when it
// is used.
//
// wgmma_conv.cu's gather copies each tap's shifted positions from the L2: nine times the input
// for a 3x3 kernel, which held the ResNet's 28x28 32-channel layers at 30 us (4.7 TB/s of L2
// traffic). Here a tile is `rows` output rows of one image, computed over the padded width WP =
// YW + KW - 1: position q = oy WP + ox of the tile (ox >= YW is computed but not stored). Its
// window (input rows oy0 - PH ... oy0 - PH + rows + KH - 2, columns -PW ... WP - PW - 1, zeros
// outside the image) is copied once into shared memory, a 128-byte row a position holding its
// XC channels, in wgmma's 128-byte swizzle. Position q reads window row q + r WP + s at tap
// (r, s), so a tap's operand is the window itself, started r WP + s rows further (the hardware
// takes the swizzle from the address: wgmma_ops.cuh). The products' rows (the instruction's M)
// are positions, 64 an instruction, at most four a tile (two a warpgroup); their columns the N =
// 32 or 64 output channels, whose kernel rows [tap][N][128 bytes] a block copies once. Blocks
// are persistent, one an SM: each walks tiles blockIdx.x, + gridDim.x, ..., copying the next
// tile's window while it multiplies this one. Results go through shared memory to NCHW, two
// positions a store where the row allows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/implicit_conv_mma.cuh"
#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/sm90a/wgmma_ops.cuh"
#include "trident/kernels/cuda/wgmma_conv.h"

namespace trident::cuda {
namespace {

using tile_mma::copy_async16;
using tile_mma::copy_async_commit;
using tile_mma::copy_async_wait;

constexpr int kThreads = 256;          // two warpgroups
constexpr int kRowBytes = 128;         // a window position, a kernel row: up to 64 channels
constexpr int kTilePositions = 256;    // four products of 64 rows
constexpr int kLdc = kTilePositions + 4;  // C as float [N][kLdc]: store_accumulators_transposed
constexpr int kMaxSmemBytes = 227 * 1024;

int round_up(int v, int m) { return (v + m - 1) / m * m; }

// A launch's geometry, the same on host and device.
struct HaloTiles {
  int rows;          // output rows a tile
  int groups;        // tiles an image
  int tiles;         // batch * groups
  int wp;            // padded width, YW + KW - 1: positions a tile row
  int products;      // 64-row products a tile: rows * wp / 64, rounded up (at most 4)
  int window_rows;   // window positions held: as far as the products read, rounded to 8
  int window_bytes;  // a window's bytes, on 1024 (the swizzle's period)
  int kernel_bytes;  // taps * N * 128
  Divider<int32_t> by_wp;
};

int smem_bytes(const HaloTiles& t, int n) {
  return 1024 + t.kernel_bytes + 2 * t.window_bytes + n * kLdc * int(sizeof(float));
}

// The tiles of g with n output channels (32 or 64); false where the kernel does not take g.
bool plan(const ConvGather& g, int64_t batch, int n, HaloTiles& t) {
  if (!g.unit_stride() || g.kh != 3 || g.kw != 3 || (g.xc != 32 && g.xc != 64) || g.yh <= 0 ||
      g.yw <= 0 || batch <= 0)
    return false;
  t.wp = g.yw + g.kw - 1;
  if (t.wp > kTilePositions) return false;
  const int most_rows = kTilePositions / t.wp;
  t.groups = (g.yh + most_rows - 1) / most_rows;
  t.rows = (g.yh + t.groups - 1) / t.groups;  // the rows spread evenly over the tiles
  if (batch * t.groups >= (int64_t(1) << 31)) return false;
  t.tiles = int(batch * t.groups);
  t.products = (t.rows * t.wp + 63) / 64;
  // The last product's last row at the last tap reads window position 4 * 64 - 1 + (KH - 1) WP
  // + KW - 1 (all four products run, whatever t.products).
  t.window_rows = round_up(kTilePositions + (g.kh - 1) * t.wp + g.kw - 1, 8);
  t.window_bytes = round_up(t.window_rows * kRowBytes, 1024);
  t.kernel_bytes = g.kh * g.kw * n * kRowBytes;
  t.by_wp = Divider<int32_t>(t.wp);
  return smem_bytes(t, n) <= kMaxSmemBytes;
}

// d (+)= A B: scale_d 0 ignores d's old values.
template <typename S, int N>
__device__ __forceinline__ void multiply(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                         int scale_d) {
  if constexpr (N == 32)
    wgmma::mma_m64n32k16(wgmma::Tag<S>{}, d, desc_a, desc_b, scale_d);
  else
    wgmma::mma_m64n64k16(wgmma::Tag<S>{}, d, desc_a, desc_b, scale_d);
}

// A 3x3 kernel; kXc: the input channels, 32 or 64. All compile-time: the products between the
// fence and the commit are then one unrolled run (in a loop over the taps the compiler moved
// accumulators between them, which serialised the multiplies).
template <typename S, int N, int kXc>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_halo_kernel(const S* __restrict__ in_t, const S* __restrict__ w_t,
                      const float* __restrict__ bias, S* __restrict__ out, ConvGather g,
                      HaloTiles t, int m_total) {
  wait_for_prior_grids();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem_raw[];
  // The swizzle works on address bits: the kernel's taps and the windows on 1024 bytes.
  char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  const uint32_t smem_base = uint32_t(__cvta_generic_to_shared(smem));
  char* const windows = smem + t.kernel_bytes;
  float* const c = reinterpret_cast<float*>(windows + 2 * t.window_bytes);
  const int tid = threadIdx.x, warpgroup = tid / 128;
  constexpr int taps = 9, k_total = taps * kXc;
  constexpr int vecs = kXc / 8;  // 16-byte copies a row: 4 or 8
  // The kernel, once: row n of tap `tap` holds w_t[n, tap, 0 .. XC) (zeros from m_total on),
  // chunk v at v ^ (n % 8). Chunks past XC (32 channels) are never read and not copied.
  for (int i = tid; i < taps * N * vecs; i += kThreads) {
    const int v = i % vecs, row = i / vecs;  // row = tap * N + n
    const int tap = row / N, n = row % N;
    const bool ok = n < m_total;
    copy_async16(smem + row * kRowBytes + ((v ^ (n % 8)) * 16),
                 ok ? w_t + n * k_total + tap * kXc + v * 8 : w_t, ok);
  }
  // Tile `tile`'s window into buffer `buffer`: position p (window row p / WP, column p % WP)
  // at row p, chunk v at v ^ (p % 8).
  auto copy_window = [&](int tile, int buffer) {
    char* window = windows + buffer * t.window_bytes;
    const int n = tile / t.groups, oy0 = (tile - n * t.groups) * t.rows;
    const int held = (t.rows + g.kh - 1) * t.wp;  // positions of the window proper
    const S* in_n = in_t + n * g.xh * g.xw * kXc;
    for (int i = tid; i < t.window_rows * vecs; i += kThreads) {
      const int v = i % vecs, p = i / vecs;
      const int wy = t.by_wp.div(p), wx = p - wy * t.wp;
      const int iy = oy0 - g.ph + wy, ix = wx - g.pw;
      const bool ok =
          p < held && unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(window + p * kRowBytes + ((v ^ (p % 8)) * 16),
                   ok ? in_n + (iy * g.xw + ix) * kXc + v * 8 : in_t, ok);
    }
  };
  const int plane = g.yh * g.yw;
  // Two positions a store: q even is then ox even, and ox + 1 a position of the same row.
  const bool pairs = g.yw % 2 == 0 && t.wp % 2 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % (2 * sizeof(S)) == 0;
  // The accumulators, carried from tile to tile: each tile's first multiply ignores their old
  // values (zeroing them in the loop, the compiler moved the zeros in among the multiplies).
  float d[2][N / 2];
#pragma unroll
  for (int e = 0; e < 2; ++e)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[e][i] = 0.0f;
  int tile = int(blockIdx.x);
  if (tile < t.tiles) copy_window(tile, 0);
  copy_async_commit();  // the kernel and the first window
  for (int it = 0; tile < t.tiles; tile += int(gridDim.x), ++it) {
    const int buffer = it & 1;
    // The other buffer's products (the tile before) completed before its results were stored.
    if (tile + int(gridDim.x) < t.tiles) copy_window(tile + int(gridDim.x), buffer ^ 1);
    copy_async_commit();
    copy_async_wait<1>();  // this thread's copies of this tile's window (and the kernel) landed
    wgmma::fence_shared_for_async();
    // Everyone's have; everyone is done reading C for the tile before.
    __syncthreads();
    const uint32_t window = smem_base + uint32_t(t.kernel_bytes + buffer * t.window_bytes);
    wgmma::fence();
#pragma unroll
    for (int tap = 0; tap < 9; ++tap) {
      const int r = tap / 3, s = tap % 3;
      const uint32_t shift = uint32_t((r * t.wp + s) * kRowBytes);
      const uint64_t desc_b = wgmma::descriptor(smem_base + uint32_t(tap * N * kRowBytes));
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        // Every warpgroup multiplies both its products, past t.products too (rows no result
        // is stored from, in the window's memory): a branch around them serialised the
        // multiplies.
        const int product = 2 * warpgroup + e;
        const uint64_t desc_a =
            wgmma::descriptor(window + uint32_t(product * 64 * kRowBytes) + shift);
#pragma unroll
        for (int k = 0; k < kXc / 16; ++k)  // 16 channels, 32 bytes: +2 in a descriptor
          multiply<S, N>(d[e], desc_a + 2 * k, desc_b + 2 * k, tap > 0 || k > 0);
      }
    }
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (2 * warpgroup + e < t.products)
        wgmma::store_accumulators_transposed(d[e], c + (2 * warpgroup + e) * 64, kLdc);
    __syncthreads();
    // C[m][q] + bias[m] to out[n, m, oy0 + q / WP, q % WP] where q % WP < YW and the row is
    // the image's.
    const int n = tile / t.groups, oy0 = (tile - n * t.groups) * t.rows;
    const int positions = min(t.rows, g.yh - oy0) * t.wp;
    S* out_tile = out + int64_t(n) * m_total * plane + oy0 * g.yw;
    if (pairs) {
      for (int i = tid; i < kTilePositions / 2 * m_total; i += kThreads) {
        const int m = i / (kTilePositions / 2), q = 2 * (i % (kTilePositions / 2));
        if (q >= positions) continue;
        const int oy = t.by_wp.div(q), ox = q - oy * t.wp;
        if (ox >= g.yw) continue;
        const float b = bias ? bias[m] : 0.0f;
        const float2 v = *reinterpret_cast<const float2*>(c + m * kLdc + q);
        const float pair[2] = {v.x + b, v.y + b};
        store_pack<2>(out_tile, int64_t(m) * plane + oy * g.yw + ox, pair);
      }
    } else {
      for (int i = tid; i < kTilePositions * m_total; i += kThreads) {
        const int m = i / kTilePositions, q = i % kTilePositions;
        if (q >= positions) continue;
        const int oy = t.by_wp.div(q), ox = q - oy * t.wp;
        if (ox >= g.yw) continue;
        out_tile[int64_t(m) * plane + oy * g.yw + ox] =
            from_float<S>(c[m * kLdc + q] + (bias ? bias[m] : 0.0f));
      }
    }
  }
  copy_async_wait<0>();  // nothing left in flight at exit
#endif
}

template <typename S, int N, int kXc>
void launch_type(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
                 void* out, const ConvGather& g, const HaloTiles& t, int64_t m_total) {
  constexpr auto kKernel = wgmma_halo_kernel<S, N, kXc>;
  const int bytes = smem_bytes(t, N);
  allow_dynamic_shared_memory<kKernel>(bytes);
  launch(ctx, kKernel, dim3(unsigned(std::min(t.tiles, ctx.sms))), kThreads, size_t(bytes),
         static_cast<const S*>(in_t), static_cast<const S*>(w_t), bias, static_cast<S*>(out), g,
         t, int(m_total));
}

}  // namespace

bool launch_wgmma_halo(const KernelContext& ctx, DType dtype, const void* in_t, const void* w_t,
                       const float* bias, void* out, const ConvGather& g, int64_t batch,
                       int64_t m_total) {
  if ((dtype != DType::bf16 && dtype != DType::f16) || m_total <= 0 || m_total > 64) return false;
  const int n = m_total <= 32 ? 32 : 64;
  HaloTiles t;
  if (!plan(g, batch, n, t)) return false;
  auto with_type = [&](auto storage) {
    using S = decltype(storage);
    if (n == 32 && g.xc == 32)
      launch_type<S, 32, 32>(ctx, in_t, w_t, bias, out, g, t, m_total);
    else if (n == 32)
      launch_type<S, 32, 64>(ctx, in_t, w_t, bias, out, g, t, m_total);
    else if (g.xc == 32)
      launch_type<S, 64, 32>(ctx, in_t, w_t, bias, out, g, t, m_total);
    else
      launch_type<S, 64, 64>(ctx, in_t, w_t, bias, out, g, t, m_total);
  };
  if (dtype == DType::bf16)
    with_type(Bf16{});
  else
    with_type(F16{});
  return true;
}

}  // namespace trident::cuda
