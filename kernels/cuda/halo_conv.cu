// The halo-window gather product (kernels/cuda/halo_conv.h) on ldmatrix + mma.sync.
//
// A tile is `rows` output rows of one image (at most BN positions) by BM output channels: C[BM,
// BN] over K = (32-channel chunk, tap, channel), 8 warps each a 32 x 32 piece (two 16-row by
// four 8-column mma tiles). Shared memory holds the block's BM rows of the kernel, A
// [chunk][BM][taps * 32 + 8], and a tile's window [chunk][(rows + KH - 1) * HC][32 + 8], both
// copied by cp.async (the window with zeros outside the image); the +8 paddings put 8
// consecutive rows on distinct banks (a row is an odd number of 16-byte units). A lane's B row
// for output position j at tap (r, s) is window row (j / YW + r) * HC + j % YW + s. Where A
// outweighs a window (14x14 64->64: 75 KB against 21), blocks are persistent: each copies A once
// and walks tiles blockIdx.x, + gridDim.x, ..., copying the next tile's window while it multiplies
// this one where two windows leave room for a second block an SM (else co-resident blocks overlap
// one another's copies and multiplies). Elsewhere a block takes one tile. Results go from the
// accumulators to NCHW, two positions a store where the addresses allow.
#include "trident/kernels/cuda/halo_conv.h"

#include <algorithm>
#include <type_traits>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/implicit_conv_mma.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

using tile_mma::copy_async16;
using tile_mma::copy_async_commit;
using tile_mma::copy_async_wait;
using tile_mma::load_matrices;

constexpr int kThreads = 256;
constexpr int kWarpN = 32;  // positions per warp
constexpr int kChunk = 32;  // channels per chunk of A and of a window
constexpr int kLdw = kChunk + 8;  // a window row: 80 bytes
template <int BM>
constexpr int kBN = 8 / (BM / 32) * kWarpN;  // 256 positions for BM = 32, 128 for 64

// A launch's geometry, the same on host and device.
struct HaloPlan {
  int rows;      // output rows per tile
  int groups;    // tiles per image along the rows
  int tiles;     // batch * groups
  int hc;        // window columns: YW + KW - 1 (rows: rows + KH - 1)
  // Divisions by run-time divisors in the copy loops, one per 16 bytes (an integer division is
  // about 20 instructions, these 3).
  Divider<int32_t> by_hc, by_vecs, by_xc;  // vecs: 16-byte copies per window position, XC / 8
  int lda;       // A row within a chunk: taps * 32 + 8 elements
  int a_chunk;   // elements between A's chunks: BM * lda
  int w_chunk;   // elements between a window's chunks: window positions * kLdw
  int a_bytes;   // A, rounded to 128 bytes
  int w_bytes;   // one window, rounded to 128 bytes
  int windows;   // 2: the next tile's window is copied during this tile's multiply
  bool pairs;    // out and every row's first position on 4 bytes: results stored in pairs
};

// k3x3: the kernel is 3x3 (the tap loop unrolled, so that the next tap's fragments load while
// this tap multiplies), else any KH x KW.
template <typename S, int BM, bool k3x3>
__global__ void __launch_bounds__(kThreads, BM == 32 ? 3 : 2)
    halo_gather_kernel(const S* __restrict__ in_t, const S* __restrict__ w_t,
                       const float* __restrict__ bias, S* __restrict__ out, ConvGather g,
                       HaloPlan p, int m_total) {
  wait_for_prior_grids();
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int BN = kBN<BM>, kWarpsN = BN / kWarpN;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN;
  const int m0 = blockIdx.y * BM;
  const int kw = k3x3 ? 3 : g.kw, taps = k3x3 ? 9 : g.kh * kw, k_total = taps * g.xc;
  const int lda = k3x3 ? 9 * kChunk + 8 : p.lda;
  const int vecs = g.xc / 8;  // 16-byte copies per window position
  const int window_vecs = (p.rows + g.kh - 1) * p.hc * vecs;
  S* const a_tile = reinterpret_cast<S*>(smem);
  auto window_at = [&](int buffer) {
    return reinterpret_cast<S*>(smem + p.a_bytes + buffer * p.w_bytes);
  };
  auto copy_window = [&](int tile, int buffer) {
    S* h = window_at(buffer);
    const int n = tile / p.groups, iy0 = (tile - n * p.groups) * p.rows - g.ph;
    const S* image = in_t + int64_t(n) * g.xh * g.xw * g.xc;
    for (int v = tid; v < window_vecs; v += kThreads) {
      const int hp = p.by_vecs.div(v), part = v - hp * vecs;
      const int hy = p.by_hc.div(hp), hx = hp - hy * p.hc;
      const int iy = iy0 + hy, ix = hx - g.pw;
      const bool ok = unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(h + (part / 4) * p.w_chunk + hp * kLdw + (part % 4) * 8,
                   image + (ok ? (iy * g.xw + ix) * g.xc + part * 8 : 0), ok);
    }
  };
  // A: BM rows of w_t[m, tap, c] (taps * XC contiguous elements each) into [chunk][m][tap][32].
  for (int row = warp; row < BM; row += kThreads / 32) {
    const int m = m0 + row;
    const S* src = w_t + int64_t(m < m_total ? m : 0) * k_total;
    for (int k = lane * 8; k < k_total; k += 32 * 8) {
      const int tap = p.by_xc.div(k), c = k - tap * g.xc;
      copy_async16(a_tile + (c / kChunk) * p.a_chunk + row * lda + tap * kChunk + c % kChunk,
                   src + k, m < m_total);
    }
  }
  copy_window(blockIdx.x, 0);
  copy_async_commit();
  // ldmatrix: lane l gives a row of matrix l / 8 (tile_mma::load_matrices). A's rows are m, B's
  // are positions (B is stored [position][channel]: the mma's column-major operand).
  const int matrix = lane / 8, r8 = lane % 8;
  int b_row[2];  // this lane's B position's window row at tap (0, 0), per 16 positions
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int pos = warp_n * kWarpN + j * 16 + (matrix / 2) * 8 + r8;
    const int oy = pos / g.yw, ox = pos - oy * g.yw;
    b_row[j] = (pos < p.rows * g.yw ? oy * p.hc + ox : 0) * kLdw + (matrix % 2) * 8;
  }
  const S* a = a_tile + (warp_m * 32 + (matrix % 2) * 8 + r8) * lda + (matrix / 2) * 8;
  const int plane = g.yh * g.yw;
  int buffer = 0;
  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const int next = tile + gridDim.x;
    if (p.windows == 2) {
      if (next < p.tiles) copy_window(next, buffer ^ 1);
      copy_async_commit();
      copy_async_wait<1>();  // this thread's copies of A and this tile's window have landed
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();  // everyone's have
    const int n = tile / p.groups, oy0 = (tile - n * p.groups) * p.rows;
    const int positions = min(p.rows, g.yh - oy0) * g.yw;
    if (warp_n * kWarpN < positions) {  // else this warp's positions are all past the tile
      float acc[2][4][4] = {};
      // K = (32-channel chunk, tap, 16 channels, 16 channels): for a 3x3 kernel each chunk is
      // one straight run of 18 fragment loads and 144 multiplies a warp.
      for (int chunk = 0; chunk < g.xc / kChunk; ++chunk) {
        const S* a_chunk = a + chunk * p.a_chunk;
        const S* h_chunk = window_at(buffer) + chunk * p.w_chunk;
#pragma unroll(k3x3 ? 9 : 1)
        for (int tap = 0; tap < taps; ++tap) {
          const int tr = tap / kw;
          const S* a_tap = a_chunk + tap * kChunk;
          const S* h_tap = h_chunk + (tr * p.hc + tap - tr * kw) * kLdw;
#pragma unroll
          for (int k = 0; k < kChunk; k += 16) {
            unsigned af[2][4];
#pragma unroll
            for (int i = 0; i < 2; ++i) load_matrices(af[i], a_tap + i * 16 * lda + k, false);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              unsigned b[4];
              load_matrices(b, h_tap + b_row[j] + k, false);
#pragma unroll
              for (int i = 0; i < 2; ++i) {
                tile_mma::mma_16x8x16<S>(acc[i][2 * j], af[i], b[0], b[1]);
                tile_mma::mma_16x8x16<S>(acc[i][2 * j + 1], af[i], b[2], b[3]);
              }
            }
          }
        }
      }
      // Straight from the accumulators to out[n, m, oy0 * YW + position] (+ bias): lane l
      // holds rows l / 4 and l / 4 + 8 of each 16-row tile, positions 2 (l % 4) and
      // 2 (l % 4) + 1 of each 8-position tile, stored as one pair where p.pairs allows.
      S* out_n = out + int64_t(n) * m_total * plane + oy0 * g.yw;
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int m = m0 + warp_m * 32 + i * 16 + half * 8 + lane / 4;
          if (m >= m_total) continue;
          const float b = bias ? bias[m] : 0.0f;
          S* row = out_n + int64_t(m) * plane;
#pragma unroll
          for (int t = 0; t < 4; ++t) {
            const int pos = warp_n * kWarpN + t * 8 + (lane % 4) * 2;
            const float pair[2] = {acc[i][t][2 * half] + b, acc[i][t][2 * half + 1] + b};
            if (p.pairs && pos + 1 < positions) {
              store_pack<2>(row, pos, pair);
            } else {
              if (pos < positions) row[pos] = from_float<S>(pair[0]);
              if (pos + 1 < positions) row[pos + 1] = from_float<S>(pair[1]);
            }
          }
        }
    }
    __syncthreads();  // this window is free for the copy of the tile after next
    if (p.windows == 2) {
      buffer ^= 1;
    } else if (next < p.tiles) {
      copy_window(next, 0);
      copy_async_commit();
    }
  }
#endif
}

// The plan for BM, or false where the shape does not fit these kernels (A and one window must
// fit in shared memory).
template <int BM>
bool make_plan(const ConvGather& g, int64_t batch, HaloPlan& p) {
  constexpr int BN = kBN<BM>;
  RowTiles t;
  if (g.xc % 32 != 0 || !row_tiles(g, batch, BN, t)) return false;
  p.rows = t.rows, p.groups = t.groups, p.tiles = t.tiles;
  p.hc = g.yw + g.kw - 1;
  p.by_hc = Divider<int32_t>(p.hc);
  p.by_vecs = Divider<int32_t>(g.xc / 8);
  p.by_xc = Divider<int32_t>(g.xc);
  p.lda = g.kh * g.kw * kChunk + 8;
  p.a_chunk = BM * p.lda;
  const int window = (p.rows + g.kh - 1) * p.hc;
  p.w_chunk = window * kLdw;
  const auto round = [](int64_t bytes) { return (bytes + 127) / 128 * 128; };
  const int64_t chunks = g.xc / kChunk;
  const int64_t a_bytes = round(chunks * p.a_chunk * 2);
  const int64_t w_bytes = round(chunks * p.w_chunk * 2);
  const SharedMemory memory = device_shared_memory();
  const int64_t most = memory.per_block;
  if (a_bytes + w_bytes > most) return false;
  p.a_bytes = int(a_bytes);
  p.w_bytes = int(w_bytes);
  // Two windows unless that costs the SM its second block (ResNet: 28x28 32->32 keeps three
  // blocks an SM with two; 14x14 64->64, whose A is 75 KB, fits two blocks only with one each).
  const auto blocks_per_sm = [&](int64_t bytes) {
    return memory.per_sm / (bytes + 1024);  // 1 KB an SM reserves per block
  };
  const int64_t with_two = a_bytes + 2 * w_bytes;
  const bool two = with_two <= most &&
                   (blocks_per_sm(with_two) >= 2 || blocks_per_sm(a_bytes + w_bytes) < 2);
  p.windows = two ? 2 : 1;
  return true;
}

template <typename S, int BM, bool k3x3>
void launch_kernel(const KernelContext& ctx, HaloPlan p, const void* in_t, const void* w_t,
                   const float* bias, void* out, const ConvGather& g, int64_t m_total) {
  constexpr auto kernel = halo_gather_kernel<S, BM, k3x3>;
  // A block per tile (one window each), except where the kernel's rows outweigh a window: then
  // as many blocks as are resident, each copying A once for several tiles (ResNet, H100, an
  // earlier form of this kernel: 14x14 64->64 29.8 -> 28.3 us that way; 28x28 32->32, whose A
  // is smaller than a window, 27 -> 30 us, where the hardware's own block order balanced better).
  int blocks = p.tiles;
  if (p.a_bytes > p.w_bytes) {
    int per_sm = 1;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads,
                                                      p.a_bytes + p.windows * p.w_bytes) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      per_sm = 1;
    }
    blocks = std::min(p.tiles, std::max(1, per_sm) * ctx.sms);
  }
  if (blocks == p.tiles) p.windows = 1;
  const int bytes = p.a_bytes + p.windows * p.w_bytes;
  allow_dynamic_shared_memory<kernel>(bytes);
  const dim3 grid(unsigned(blocks), unsigned((m_total + BM - 1) / BM));
  launch(ctx, kernel, grid, kThreads, size_t(bytes), static_cast<const S*>(in_t),
         static_cast<const S*>(w_t), bias, static_cast<S*>(out), g, p, int(m_total));
}

template <typename S, int BM>
bool launch(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
            void* out, const ConvGather& g, int64_t batch, int64_t m_total) {
  HaloPlan p{};
  if (!make_plan<BM>(g, batch, p)) return false;
  p.pairs = pack_aligned(out, 4) && (g.yh * g.yw) % 2 == 0 && (p.rows * g.yw) % 2 == 0;
  if (g.kh == 3 && g.kw == 3)
    launch_kernel<S, BM, true>(ctx, p, in_t, w_t, bias, out, g, m_total);
  else
    launch_kernel<S, BM, false>(ctx, p, in_t, w_t, bias, out, g, m_total);
  return true;
}

template <typename S>
bool launch_type(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
                 void* out, const ConvGather& g, int64_t batch, int64_t m_total) {
  if (m_total <= 32) return launch<S, 32>(ctx, in_t, w_t, bias, out, g, batch, m_total);
  if (m_total <= 64) return launch<S, 64>(ctx, in_t, w_t, bias, out, g, batch, m_total);
  return false;
}

}  // namespace

bool launch_halo_gather(const KernelContext& ctx, DType dtype, const void* in_t, const void* w_t,
                        const float* bias, void* out, const ConvGather& g, int64_t batch,
                        int64_t m_total) {
  if (batch == 0 || m_total == 0) return true;
  if (dtype == DType::bf16)
    return launch_type<Bf16>(ctx, in_t, w_t, bias, out, g, batch, m_total);
  if (dtype == DType::f16)
    return launch_type<F16>(ctx, in_t, w_t, bias, out, g, batch, m_total);
  return false;
}

}  // namespace trident::cuda
