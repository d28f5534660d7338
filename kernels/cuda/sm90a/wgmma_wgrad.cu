// The implicit-GEMM convolution's weight gradient on Hopper's warpgroup multiply, for 16-bit
// operands whose channels come in 64s and more than 32 output channels (kernels/cuda/
// wgmma_conv.h; implicit_conv_kernels.cuh's wgrad_conv_kernel computes the same on mma.sync).
//
// dw[m, (r, s, c)] = sum over positions p of dy_t[p, m] x_t[p shifted by (r, s), c]: M = output
// channels, N = (r, s, c) with c fastest, K = positions of one slice of the batch. A block
// computes C[BM, 128] with one or two warpgroups (BM = 64 or 128), warpgroup w rows 64 w.. of M,
// both N halves. Both operands are MN-major in memory (dy_t rows are positions with M
// contiguous, x_t rows positions with C contiguous), so a K step of 64 positions is copied as
// 64-wide chunks of rows, [chunk][64 positions][128 bytes] in the 128-byte swizzle, and the
// products run with both transpose flags set, 64 x 64 each (wgmma_ops.cuh: one atom wide). Each
// slice writes float32 partials [slice, OC, KH*KW*C] in (r, s, c) order, as the mma.sync kernel
// does. Two blocks an SM of 128 rows (100 KB each); at 64 rows three by registers, two by shared
// memory (75 KB).
#include <cuda_runtime.h>

#include <cstdint>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/implicit_conv_kernels.cuh"
#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/sm90a/wgmma_ops.cuh"
#include "trident/kernels/cuda/wgmma_conv.h"

namespace trident::cuda {
namespace {

using implicit_gemm::Gather;
using tile_mma::copy_async16;
using tile_mma::copy_async_commit;
using tile_mma::copy_async_wait;

constexpr int kBN = 128;
constexpr int kBK = kWgmmaWgradStep;    // positions per K step
constexpr int kChunkBytes = kBK * 128;  // one 64-wide chunk of a step: 8 KB
constexpr int kBBytes = 2 * kChunkBytes;  // B: two chunks of 64 (r, s, c) columns
constexpr int kLdc = kBN + 8;             // C staged as float [BM][kLdc]
constexpr int kStages = 3;

// kWarpgroups warpgroups, each 64 output channels by both N chunks; each step's products complete
// before the next step's barrier (one group left running past a step, the copies one step
// closer: ResNet-9 bf16 5.42 against 5.34 ms a step on an H200).
template <int kWarpgroups>
struct Config {
  static constexpr int kThreads = 128 * kWarpgroups, BM = 64 * kWarpgroups;
  static constexpr int kABytes = kWarpgroups * kChunkBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kStages * 3 * kBK * 4;
  static_assert(BM * kLdc * 4 <= kStages * kStageBytes, "C fits the stages");
  static constexpr int kBlocksPerSm = kWarpgroups == 2 ? 2 : 3;
};

template <typename S, int kWarpgroups>
__global__ void __launch_bounds__(Config<kWarpgroups>::kThreads, Config<kWarpgroups>::kBlocksPerSm)
    wgmma_wgrad_kernel(const S* __restrict__ x_t, const S* __restrict__ dy_t,
                       float* __restrict__ partials, Gather g, int m_total, int positions_total,
                       int slice_positions) {
  wait_for_prior_grids();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Config<kWarpgroups>;
  constexpr int kThreads = C::kThreads, BM = C::BM;
  extern __shared__ char smem_raw[];
  char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  const uint32_t smem_base = uint32_t(__cvta_generic_to_shared(smem));
  int* tables = reinterpret_cast<int*>(smem + kStages * C::kStageBytes);  // [kStages][3][kBK]
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, j0 = blockIdx.x * kBN;
  const int n_total = g.kh * g.kw * g.xc;
  const int p_begin = blockIdx.z * slice_positions;
  const int p_end = min(positions_total, p_begin + slice_positions);
  const int positions = g.yh * g.yw;
  // A K row is 8 kWarpgroups 16-byte pieces of A and 16 of B. This thread copies A's piece
  // tid % (8 kWarpgroups) of rows a_row0 + 16 i and B's piece tid % 16 of rows b_row0 + kBRowStep
  // i; each set of rows is one value mod 8, so a piece's swizzled offset differs only by row.
  constexpr int kBRowStep = kThreads / 16, kBRows = kBK / kBRowStep;
  const int a_piece = tid % (8 * kWarpgroups), a_row0 = tid / (8 * kWarpgroups);
  const int b_piece = tid % 16, b_row0 = tid / 16;
  const int a_dst =
      (a_piece / 8) * kChunkBytes + a_row0 * 128 + ((a_piece % 8) ^ (a_row0 % 8)) * 16;
  const int b_dst =
      (b_piece / 8) * kChunkBytes + b_row0 * 128 + ((b_piece % 8) ^ (b_row0 % 8)) * 16;
  const int j = j0 + b_piece * 8;  // B's first column (r, s, c): one tap, C in 64s
  const bool j_ok = j < n_total;
  const int tap = j_ok ? j / g.xc : 0, r = tap / g.kw, s = tap - r * g.kw;
  const int b_shift = (r * g.xw + s) * g.xc + (j - tap * g.xc);
  const int m = m0 + a_piece * 8;  // A's first output channel
  const bool m_ok = m < m_total;
  auto table = [&](int step) { return tables + (step % kStages) * 3 * kBK; };
  auto decode = [&](int step) {  // threads < kBK
    implicit_gemm::decode_position(table(step), kBK, tid, p_begin + step * kBK + tid, p_end,
                                   positions, g);
  };
  auto copy = [&](int step) {
    char* a = smem + (step % kStages) * C::kStageBytes;
    char* b = a + C::kABytes;
    const int* t = table(step);
    const int p0 = p_begin + step * kBK;
#pragma unroll
    for (int i = 0; i < kBRows; ++i) {
      const int row = b_row0 + kBRowStep * i;
      const int iy = t[kBK + row] + r, ix = t[2 * kBK + row] + s;
      const bool ok = j_ok && unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(b + b_dst + i * kBRowStep * 128, ok ? x_t + t[row] + b_shift : x_t, ok);
    }
#pragma unroll
    for (int i = 0; i < kBK / 16; ++i) {
      const int p = p0 + a_row0 + 16 * i;
      const bool ok = m_ok && p < p_end;
      copy_async16(a + a_dst + i * 16 * 128, ok ? dy_t + int64_t(p) * m_total + m : dy_t, ok);
    }
  };
  float d[2][32];
#pragma unroll
  for (int e = 0; e < 32; ++e) d[0][e] = d[1][e] = 0.0f;
  const int warpgroup = tid / 128;
  const int steps = p_begin < p_end ? (p_end - p_begin + kBK - 1) / kBK : 0;
  if (steps > 0) {
    if (tid < kBK)
      for (int st = 0; st < kStages && st < steps; ++st) decode(st);
    __syncthreads();
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
      if (st < steps) copy(st);
      copy_async_commit();
    }
    for (int step = 0; step < steps; ++step) {
      copy_async_wait<kStages - 2>();
      wgmma::fence_shared_for_async();
      // Everyone's copies of `step` landed; the products of step - 1 are done with their stage;
      // the table decoded last iteration is visible.
      __syncthreads();
      const int next = step + kStages - 1;
      if (next < steps) copy(next);
      copy_async_commit();
      // step's table was read by its copies, issued two iterations ago (or before the loop): it
      // takes step + kStages's positions.
      if (tid < kBK && step + kStages < steps) decode(step + kStages);
      const uint32_t a = smem_base + (step % kStages) * C::kStageBytes;
      const uint64_t desc_a = wgmma::descriptor_mn_major(a + warpgroup * kChunkBytes);
      const uint64_t desc_b0 = wgmma::descriptor_mn_major(a + C::kABytes);
      const uint64_t desc_b1 = wgmma::descriptor_mn_major(a + C::kABytes + kChunkBytes);
      wgmma::fence();
#pragma unroll
      for (int k = 0; k < kBK / 16; ++k) {  // 16 K rows are 2048 bytes: +128 in a descriptor
        wgmma::mma_m64n64k16_mn_major(wgmma::Tag<S>{}, d[0], desc_a + 128 * k, desc_b0 + 128 * k,
                                      1);
        wgmma::mma_m64n64k16_mn_major(wgmma::Tag<S>{}, d[1], desc_a + 128 * k, desc_b1 + 128 * k,
                                      1);
      }
      wgmma::commit();
      wgmma::wait<0>();
    }
  }
  copy_async_wait<0>();
  __syncthreads();  // every warpgroup is done with the stages: C takes their memory
  float* c = reinterpret_cast<float*>(smem);
  wgmma::store_accumulators(d[0], c + warpgroup * 64 * kLdc, kLdc);
  wgmma::store_accumulators(d[1], c + warpgroup * 64 * kLdc + 64, kLdc);
  __syncthreads();
  float* out = partials + int64_t(blockIdx.z) * m_total * n_total;
  const int jj = j0 + tid % kBN;
  if (jj >= n_total) return;
#pragma unroll 4
  for (int row = tid / kBN; row < BM; row += kThreads / kBN) {
    const int mm = m0 + row;
    if (mm >= m_total) break;
    out[int64_t(mm) * n_total + jj] = c[row * kLdc + tid % kBN];
  }
#endif
}

template <typename S, int kWarpgroups>
void launch_type(const KernelContext& ctx, const void* x_t, const void* dy_t, float* partials,
                 const Gather& g, int64_t batch, int64_t m_total, int64_t splits) {
  using C = Config<kWarpgroups>;
  constexpr auto kKernel = wgmma_wgrad_kernel<S, kWarpgroups>;
  allow_dynamic_shared_memory<kKernel>(C::kSmemBytes);
  const int64_t positions = batch * g.yh * g.yw;
  const int64_t slice = (positions + splits - 1) / splits;
  const int64_t n_total = int64_t(g.kh) * g.kw * g.xc;
  const dim3 grid(unsigned((n_total + kBN - 1) / kBN), unsigned((m_total + C::BM - 1) / C::BM),
                  unsigned(splits));
  launch(ctx, kKernel, grid, C::kThreads, size_t(C::kSmemBytes), static_cast<const S*>(x_t),
         static_cast<const S*>(dy_t), partials, g, int(m_total), int(positions), int(slice));
}

template <typename S>
void launch_type(const KernelContext& ctx, const void* x_t, const void* dy_t, float* partials,
                 const Gather& g, int64_t batch, int64_t m_total, int64_t splits) {
  if (m_total <= 64)
    launch_type<S, 1>(ctx, x_t, dy_t, partials, g, batch, m_total, splits);
  else
    launch_type<S, 2>(ctx, x_t, dy_t, partials, g, batch, m_total, splits);
}

}  // namespace

bool wgmma_wgrad_fits(DType dtype, const ConvGather& g, int64_t m_total) {
  // With 32 input channels (a chunk of 64 columns then spans two taps, which the copies would
  // take) this kernel was slower than mma.sync's: the ResNet's 32 -> 64 layer 23.8 against 27.3
  // us on an H200, its 288 columns in three blocks of 128.
  return (dtype == DType::bf16 || dtype == DType::f16) && m_total > 32 && g.xc % 64 == 0;
}

void launch_wgmma_wgrad(const KernelContext& ctx, DType dtype, const void* x_t, const void* dy_t,
                        float* partials, const ConvGather& g, int64_t batch, int64_t m_total,
                        int64_t splits) {
  if (dtype == DType::bf16)
    launch_type<Bf16>(ctx, x_t, dy_t, partials, g, batch, m_total, splits);
  else
    launch_type<F16>(ctx, x_t, dy_t, partials, g, batch, m_total, splits);
}

}  // namespace trident::cuda
