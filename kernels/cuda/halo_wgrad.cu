// The weight gradient of a 16-bit stride-1 3x3 implicit convolution on halo windows
// (kernels/cuda/halo_conv.h), on ldmatrix + mma.sync.
//
// dw[m, c, r, s] = sum over (n, oy, ox) of dy[n, m, oy, ox] x[n, c, oy - PH + r, ox - PW + s]:
// M = output channels, N = (c, r, s), K = positions. implicit_conv.cu's weight-gradient kernel
// gathers a [positions x 128 columns] tile of the patch matrix from L2 every step (each input
// value read nine times) and pads 288 columns to three 128-column tiles. Here a block owns one
// 32-channel chunk of x (blockIdx.y) and 32 output channels (blockIdx.z), and each of its nine
// warps one tap: a warp's C is 32 x 32 channels. A block walks tiles (`rows` output rows of one
// image) blockIdx.x, + gridDim.x, ..., and copies each tile's input window ((rows + 2) x (YW +
// 2) positions x 32 channels, [position][32 + 8]) and dy rows ([position][32 + 8]) into shared
// memory once, the next tile's while it multiplies this one where two fit. K runs over the
// tile's positions 16 at a time: A from dy's rows and B from the window at the warp's tap shift,
// both through ldmatrix.trans (one row address per lane: for B, the window row of the lane's
// position plus the tap's shift). Positions past the tile's last (K rounded up to 16) have zero
// dy. A block's sums over all its tiles are one float32 partial [OC, C*9] in (c, r, s)
// order, slice blockIdx.x; launch_conv_grad_reduce sums the slices in a fixed order.
#include <algorithm>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/halo_conv.h"
#include "trident/kernels/cuda/implicit_conv_mma.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

using tile_mma::copy_async16;
using tile_mma::copy_async_commit;
using tile_mma::copy_async_wait;
using tile_mma::load_matrices;

constexpr int kTaps = 9;  // 3x3 kernels only: a warp a tap
constexpr int kThreads = kTaps * 32;
constexpr int kChunk = 32;        // input channels per block
constexpr int kLdw = kChunk + 8;  // a window row: 80 bytes (an odd number of 16-byte units)
constexpr int kMaxPositions = 256;  // output positions per tile
// Shared memory for one tile (window and dy rows) at most, so that the kernel takes the same
// shapes on every sm_80+ GPU (the choice changes the sums' order).
constexpr int kMaxTileBytes = 96 * 1024;
constexpr int kBlocksPerSm = 2;  // the launch's target: gridDim.x * y * z ~ kBlocksPerSm * SMs
// Output channels per block: 32 (with 64, the accumulators spilled at the two blocks an SM's
// 96 registers).
constexpr int BM = 32;

// A launch's geometry, the same on host and device.
struct WgradPlan {
  int rows;         // output rows per tile
  int groups;       // tiles per image
  int tiles;        // batch * groups
  int hc;           // window columns: YW + 2
  int window_rows;  // rows + 2, and more where K's rounding to 16 reaches past the rows
  int k_steps;      // a full tile's positions (rows * YW) over 16, rounded up
  int ldd;          // a dy row: BM + 8 elements
  Divider<int32_t> by_hc;
  int w_bytes, d_bytes;  // one window, one tile's dy rows (multiples of 128 bytes)
  int stage_bytes;       // the partial's staging at the end: BM x (288 + 4) floats
  int buffers;      // 2: the next tile's window and dy rows are copied during this multiply
};

template <typename S>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    halo_wgrad_kernel(const S* __restrict__ x_t, const S* __restrict__ dy_t,
                      float* __restrict__ partials, ConvGather g, WgradPlan p, int m_total) {
  wait_for_prior_grids();
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int kAVecs = BM / 8;  // 16-byte copies per dy row
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int chunk = blockIdx.y, m0 = blockIdx.z * BM;
  const int plane = g.yh * g.yw, k_rows = p.k_steps * 16;
  auto window_at = [&](int buffer) {
    return reinterpret_cast<S*>(smem + buffer * (p.w_bytes + p.d_bytes));
  };
  auto dy_at = [&](int buffer) {
    return reinterpret_cast<S*>(smem + buffer * (p.w_bytes + p.d_bytes) + p.w_bytes);
  };
  auto copy_tile = [&](int tile, int buffer) {
    const int n = tile / p.groups, oy0 = (tile - n * p.groups) * p.rows;
    // The window: 32 channels (4 copies) a position, zeros outside the image.
    S* h = window_at(buffer);
    const S* image = x_t + int64_t(n) * g.xh * g.xw * g.xc + chunk * kChunk;
    const int window_vecs = p.window_rows * p.hc * 4;
    for (int v = tid; v < window_vecs; v += kThreads) {
      const int hp = v / 4, part = v % 4;
      const int hy = p.by_hc.div(hp), hx = hp - hy * p.hc;
      const int iy = oy0 - g.ph + hy, ix = hx - g.pw;
      const bool ok = unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(h + hp * kLdw + part * 8, image + (ok ? (iy * g.xw + ix) * g.xc + part * 8 : 0),
                   ok);
    }
    // dy rows [position][BM]: zeros past the tile's positions.
    S* d = dy_at(buffer);
    const int positions = min(p.rows, g.yh - oy0) * g.yw;
    const S* rows = dy_t + (int64_t(n) * plane + oy0 * g.yw) * m_total + m0;
    for (int v = tid; v < k_rows * kAVecs; v += kThreads) {
      const int k = v / kAVecs, part = v % kAVecs;
      const bool ok = k < positions;
      copy_async16(d + k * p.ldd + part * 8, rows + (ok ? k * m_total + part * 8 : 0), ok);
    }
  };
  copy_tile(blockIdx.x, 0);
  copy_async_commit();
  // ldmatrix.trans, lane l giving a row of matrix l / 8 (tile_mma::load_matrices): A's matrices
  // are (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15), stored as rows k of
  // dy; B's (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15), rows k of the
  // window, so that b[0], b[1] feed the first 16x8 tile and b[2], b[3] the second.
  const int matrix = lane / 8, r8 = lane % 8;
  const int a_lane = ((matrix / 2) * 8 + r8) * p.ldd + (matrix % 2) * 8;
  const int b_k = (matrix % 2) * 8 + r8;  // this lane's B position, + 16 a step
  const int tap_r = warp / 3, tap_s = warp % 3;
  const int b_lane = (tap_r * p.hc + tap_s) * kLdw + (matrix / 2) * 8;
  float acc[BM / 16][4][4] = {};
  int buffer = 0;
  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const int next = tile + gridDim.x;
    if (p.buffers == 2) {
      if (next < p.tiles) copy_tile(next, buffer ^ 1);
      copy_async_commit();
      copy_async_wait<1>();  // this thread's copies of this tile have landed
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();  // everyone's have
    const S* d = dy_at(buffer) + a_lane;
    const S* h = window_at(buffer) + b_lane;
    int oy = b_k / g.yw, ox = b_k - oy * g.yw;  // the lane's B position, output row and column
#pragma unroll 2
    for (int step = 0; step < p.k_steps; ++step) {
      unsigned a[BM / 16][4];
#pragma unroll
      for (int i = 0; i < BM / 16; ++i) load_matrices(a[i], d + step * 16 * p.ldd + i * 16, true);
      const S* b_row = h + (oy * p.hc + ox) * kLdw;
      for (ox += 16; ox >= g.yw; ox -= g.yw) ++oy;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        unsigned b[4];
        load_matrices(b, b_row + j * 16, true);
#pragma unroll
        for (int i = 0; i < BM / 16; ++i) {
          tile_mma::mma_16x8x16<S>(acc[i][2 * j], a[i], b[0], b[1]);
          tile_mma::mma_16x8x16<S>(acc[i][2 * j + 1], a[i], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // these buffers are free for the tile after next
    if (p.buffers == 2) {
      buffer ^= 1;
    } else if (next < p.tiles) {
      copy_tile(next, 0);
      copy_async_commit();
    }
  }
  // The partial [OC, C * 9], (c, r, s) columns: the block's BM x 288 values are one run of each
  // of its rows. Through shared memory ([BM][288 + 4] floats), so that they leave in 16-byte
  // stores (from the accumulators, each a 4-byte store to its own sector: 78 MB of L2 writes at
  // 28x28 32->32). Lane l holds rows l / 4 and l / 4 + 8 of each 16-row tile, columns
  // 2 (l % 4) and 2 (l % 4) + 1 of each 8-column tile.
  constexpr int kRun = kChunk * kTaps, kLdr = kRun + 4;
  float* stage = reinterpret_cast<float*>(smem);  // the buffers are free: no copies in flight
#pragma unroll
  for (int i = 0; i < BM / 16; ++i)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = i * 16 + lane / 4 + (e / 2) * 8, c = t * 8 + (lane % 4) * 2 + e % 2;
        stage[m * kLdr + c * kTaps + warp] = acc[i][t][e];
      }
  __syncthreads();
  const int n_total = g.xc * kTaps;
  float* out = partials + (int64_t(blockIdx.x) * m_total + m0) * n_total + chunk * kRun;
  for (int v = tid; v < BM * kRun / 4; v += kThreads) {
    const int m = v / (kRun / 4), q = v - m * (kRun / 4);
    *reinterpret_cast<float4*>(out + int64_t(m) * n_total + q * 4) =
        *reinterpret_cast<const float4*>(stage + m * kLdr + q * 4);
  }
#endif
}

// The plan, or false where the shape does not fit this kernel.
bool make_plan(const ConvGather& g, int64_t batch, int64_t m_total, WgradPlan& p) {
  RowTiles t;
  if (g.kh != 3 || g.kw != 3 || g.xc % kChunk != 0 || m_total % BM != 0 ||
      !row_tiles(g, batch, kMaxPositions, t))
    return false;
  p.rows = t.rows, p.groups = t.groups, p.tiles = t.tiles;
  p.k_steps = (p.rows * g.yw + 15) / 16;
  p.hc = g.yw + 2;
  p.window_rows = (p.k_steps * 16 - 1) / g.yw + 3;
  p.by_hc = Divider<int32_t>(p.hc);
  p.ldd = BM + 8;
  const auto round = [](int64_t bytes) { return int((bytes + 127) / 128 * 128); };
  p.w_bytes = round(int64_t(p.window_rows) * p.hc * kLdw * 2);
  p.d_bytes = round(int64_t(p.k_steps) * 16 * p.ldd * 2);
  p.stage_bytes = BM * (kChunk * kTaps + 4) * 4;
  p.buffers = 1;
  return p.w_bytes + p.d_bytes <= kMaxTileBytes;
}

unsigned blocks_x(int sms, const WgradPlan& p, const ConvGather& g, int64_t m_total) {
  const int64_t others = (g.xc / kChunk) * (m_total / BM);
  const int64_t want = (int64_t(kBlocksPerSm) * std::max(sms, 1) + others - 1) / others;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(p.tiles, want)));
}

template <typename S>
void launch_kernel(const KernelContext& ctx, WgradPlan p, const void* x_t, const void* dy_t,
                   float* partials, const ConvGather& g, int64_t m_total, int64_t splits) {
  constexpr auto kernel = halo_wgrad_kernel<S>;
  // Two buffers unless that costs the SM its second block.
  const SharedMemory memory = device_shared_memory();
  const int one = std::max(p.w_bytes + p.d_bytes, p.stage_bytes);
  const int two = std::max(2 * (p.w_bytes + p.d_bytes), p.stage_bytes);
  const auto blocks_per_sm = [&](int bytes) { return memory.per_sm / (bytes + 1024); };
  p.buffers = two <= memory.per_block &&
                      (blocks_per_sm(two) >= kBlocksPerSm || blocks_per_sm(one) < kBlocksPerSm)
                  ? 2
                  : 1;
  if (int64_t(splits) >= p.tiles) p.buffers = 1;  // a tile a block: nothing to overlap
  const int bytes = p.buffers == 2 ? two : one;
  allow_dynamic_shared_memory<kernel>(bytes);
  const dim3 grid(unsigned(splits), unsigned(g.xc / kChunk), unsigned(m_total / BM));
  launch(ctx, kernel, grid, kThreads, size_t(bytes), static_cast<const S*>(x_t),
         static_cast<const S*>(dy_t), partials, g, p, int(m_total));
}

}  // namespace

int64_t halo_wgrad_splits(int sms, DType dtype, const ConvGather& g, int64_t batch,
                          int64_t m_total) {
  WgradPlan p{};
  if ((dtype != DType::bf16 && dtype != DType::f16) || !make_plan(g, batch, m_total, p)) return 0;
  return int64_t(blocks_x(sms, p, g, m_total));
}

void launch_halo_wgrad(const KernelContext& ctx, DType dtype, const void* x_t, const void* dy_t,
                       float* partials, const ConvGather& g, int64_t batch, int64_t m_total,
                       int64_t splits) {
  WgradPlan p{};
  if (!make_plan(g, batch, m_total, p)) return;  // halo_wgrad_splits said 0: not called
  if (dtype == DType::bf16)
    launch_kernel<Bf16>(ctx, p, x_t, dy_t, partials, g, m_total, splits);
  else
    launch_kernel<F16>(ctx, p, x_t, dy_t, partials, g, m_total, splits);
}

}  // namespace trident::cuda
