// The two tile-per-step product kernels of the implicit-GEMM convolution and their constants
// (kernels/cuda/implicit_conv.cu launches them); the block's multiply is BlockMma
// (kernels/cuda/implicit_conv_mma.cuh).
//
// Both product kernels compute a block tile C[BM, BN] of A[M, K] B[K, N] with 8 warps, each a
// 32 x (BN / warps across) piece of 16x16 fragments, over K in steps of 64 bytes of a row (32
// 16-bit elements, 16 floats). A step's tiles are copied from global memory straight into shared
// memory (cp.async, 16 bytes a copy, zeros outside the image), three stages deep: the tensor
// cores work on one step while the next two are in flight (against loads staged through
// registers into two stages: ResNet bf16 steps 1.615 -> 1.570 ms with this gather kernel, 1.574
// -> 1.544 with this weight-gradient kernel too, on an H100; 80 and 64 registers, three and four
// blocks an SM, instead of 118 and 64).
//
// gather kernel (forward, data gradient): M = output channels, N = output positions (n, oy, ox)
//   of all samples, K = (r, s, c) of the gathered NHWC input, c fastest: a step is 32 (16)
//   channels of one tap. B[k, j] = in_t[n, oy SY - PH + r, ox SX - PW + s, c] (zero outside),
//   stored [position][k]; A[m, k] = w_t[m, r, s, c]. The result goes through shared memory to
//   out[n, m, oy, ox] (NCHW; a data-gradient phase's positions at a stride), coalesced along the
//   positions, + bias[m], rounded once.
// weight-gradient kernel: M = OC, N = (r, s, c), K = the positions of one slice of the batch.
//   A[m, p] = dy_t[p, m]; B[p, j] = x_t gathered as above. Each slice writes float32 partials
//   [slice, OC, KH*KW*C] in the kernel's own (r, s, c) order.
#pragma once
#include <type_traits>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/halo_conv.h"
#include "trident/kernels/cuda/implicit_conv_mma.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda::implicit_gemm {

using tile_mma::BlockMma;
using tile_mma::copy_async16;
using tile_mma::copy_async_commit;
using tile_mma::copy_async_wait;
using tile_mma::kStepK;
using tile_mma::kVec;
using tile_mma::StorageOf;
using tile_mma::Tf32;

constexpr int kThreads = 256;  // 8 warps
// Positions per weight-gradient slice come in multiples of this (every kStepK<M> divides it; a
// 16-bit step of 64 positions was slower on an H200: 118 against 100 us for the ResNet's 28x28
// 32->32 layer).
constexpr int kSliceRound = 32;
constexpr int kWgradBN = 128;  // N per weight-gradient block
// N per gather block: 256 when M fits 32 rows (each warp then has 2x2 fragments), else 128.
template <int BM>
constexpr int kGatherBN = BM == 32 ? 256 : 128;

// The gathered operand in[N, XH, XW, XC] (NHWC) through a KH x KW window with a stride; outputs
// yh x yw per sample, written to a plane as halo_conv.h's ConvGather says.
using Gather = ConvGather;

// Image, padding and kernel are under kMaxExtent (implicit_conv_fits), so a row index of
// kFarOutside plus any kernel row fails every bounds check.
constexpr int kMaxExtent = 0x4000;
constexpr int kFarOutside = -2 * kMaxExtent;

constexpr int kGatherStages = 3;

// Writes a gather block's results: c[row * ldc + j] (float, shared memory) holds output channel
// m0 + row at position col0 + j of `positions` a sample. Thread tid takes j = tid % BN and rows
// tid / BN, + kThreads / BN, ..., each to out[n, m, oy, ox] (NCHW; a data-gradient phase's
// positions at a stride) + bias[m], rounded once: coalesced along the positions.
// Where the outputs are one plain plane a sample (not a data-gradient phase's strided
// positions) of an even number of positions and out is 4-byte aligned, a thread takes two
// adjacent positions instead, one pack a row: half the stores, and bf16 pairs rounded by one cvt
// (float_types.cuh's store_pack) where one value took about 7 instructions. Every product
// instruction is issued by the tensor cores' own queue in the warpgroup kernels, so their
// epilogue was most of a block's instructions.
template <int BM, int BN, int kThreads, typename S>
__device__ __forceinline__ void store_gather_tile(const float* c, int ldc, const Gather& g, S* out,
                                                  const float* bias, int m0, int m_total,
                                                  int col0, int columns, int positions) {
  const int tid = threadIdx.x;
  const bool pairs = g.plane_h() == g.yh && g.plane_w() == g.yw && g.oy0 == 0 && g.ox0 == 0 &&
                     g.osy == 1 && g.osx == 1 && positions % 2 == 0 &&
                     reinterpret_cast<uintptr_t>(out) % (2 * sizeof(S)) == 0;
  if (pairs) {  // columns is a multiple of positions: a pair never straddles two samples
    const int j = 2 * (tid % (BN / 2)), column = col0 + j;
    if (column >= columns) return;
    const int n = column / positions, pos = column - n * positions;
    const int plane = g.yh * g.yw;
    S* out_n = out + int64_t(n) * m_total * plane + pos;
#pragma unroll 4
    for (int row = tid / (BN / 2); row < BM; row += kThreads / (BN / 2)) {
      const int m = m0 + row;
      if (m >= m_total) break;
      const float b = bias ? bias[m] : 0.0f;
      const float2 v = *reinterpret_cast<const float2*>(c + row * ldc + j);
      const float pair[2] = {v.x + b, v.y + b};
      store_pack<2>(out_n, int64_t(m) * plane, pair);
    }
    return;
  }
  const int j = tid % BN, column = col0 + j;
  if (column >= columns) return;
  // Output position (oy, ox) at (oy0 + oy * osy, ox0 + ox * osx) of the out_h x out_w plane.
  const int n = column / positions, pos = column - n * positions;
  const int oy = pos / g.yw, ox = pos - oy * g.yw;
  const int plane_w = g.plane_w(), plane = g.plane_h() * plane_w;
  S* out_n = out + int64_t(n) * m_total * plane + (g.oy0 + oy * g.osy) * plane_w + g.ox0 +
             ox * g.osx;
#pragma unroll 4
  for (int row = tid / BN; row < BM; row += kThreads / BN) {
    const int m = m0 + row;
    if (m >= m_total) break;
    out_n[int64_t(m) * plane] = from_float<S>(c[row * ldc + j] + (bias ? bias[m] : 0.0f));
  }
}

// Where output position p of the batch (of `positions` a sample) reads the gathered input: the
// in_t offset of its window's corner (n, oy SY - PH, ox SX - PW) plus `channel`, that row and
// that column; where !ok (past the positions), offset 0 and row kFarOutside (every bounds check
// fails).
struct WindowCorner {
  int base, iy, ix;
};
__device__ __forceinline__ WindowCorner window_corner(int p, bool ok, int positions,
                                                      const Gather& g, int channel = 0) {
  const int n = ok ? p / positions : 0, pos = p - n * positions;
  const int oy = pos / g.yw, ox = pos - oy * g.yw;
  const int iy = ok ? oy * g.sy - g.ph : kFarOutside, ix = ox * g.sx - g.pw;
  return {ok ? ((n * g.xh + iy) * g.xw + ix) * g.xc + channel : 0, iy, ix};
}

// Entry i of a weight-gradient step's position table t ([3][k_step]): position p's
// window_corner, past p_end outside.
__device__ __forceinline__ void decode_position(int* t, int k_step, int i, int p, int p_end,
                                                int positions, const Gather& g) {
  const WindowCorner w = window_corner(p, p < p_end, positions, g);
  t[i] = w.base;
  t[k_step + i] = w.iy;
  t[2 * k_step + i] = w.ix;
}

// Up to kMaxProducts gathered products in one launch, product z in blocks (x, y, z): the phases
// of a strided convolution's data gradient (data_gradient below), which as separate launches left
// most of the GPU idle (each a few dozen blocks at 7x7 and 14x14). Product z reads its kernel
// from w_t + w_offset[z]; `columns` = batch * YH * YW of its gather.
constexpr int kMaxProducts = 4;
struct GatherProducts {
  Gather g[kMaxProducts];
  int64_t w_offset[kMaxProducts];
  int columns[kMaxProducts];
};

// Three blocks an SM where BM allows it without spilling (80 registers), two at BM = 128 and for
// TF32, whose rounding spilled at 80 registers.
template <typename M, int BM>
constexpr int kGatherBlocksPerSm = BM == 128 || std::is_same_v<M, Tf32> ? 2 : 3;

template <typename M, int BM, int kBN = kGatherBN<BM>>
__global__ void __launch_bounds__(kThreads, kGatherBlocksPerSm<M, BM>)
    gather_conv_kernel(const StorageOf<M>* __restrict__ in_t, const StorageOf<M>* __restrict__ w_t,
                       const float* __restrict__ bias, StorageOf<M>* __restrict__ out,
                       const __grid_constant__ GatherProducts products, int m_total) {
  wait_for_prior_grids();
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using S = StorageOf<M>;
  const Gather& g = products.g[blockIdx.z];
  const int columns = products.columns[blockIdx.z];
  if (int(blockIdx.x) * kBN >= columns) return;  // past this product's positions
  w_t += products.w_offset[blockIdx.z];
  using Mma = BlockMma<M, BM, kBN, false, true, kGatherStages, /*kRawTf32=*/true>;
  using E = typename Mma::E;
  constexpr int kBK = Mma::kBK, V = kVec<M>, kVecsPerRow = kBK / V;
  constexpr int kBVecs = kBN * kVecsPerRow / kThreads;
  constexpr int kAVecs = (BM * kVecsPerRow + kThreads - 1) / kThreads;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, col0 = blockIdx.x * kBN;
  const int k_total = g.kh * g.kw * g.xc;
  const int positions = g.yh * g.yw;
  const int cv = tid % kVecsPerRow;
  int b_base[kBVecs], b_iy[kBVecs], b_ix[kBVecs];
#pragma unroll
  for (int i = 0; i < kBVecs; ++i) {
    const int column = col0 + tid / kVecsPerRow + i * (kThreads / kVecsPerRow);
    const WindowCorner w = window_corner(column, column < columns, positions, g, cv * V);
    b_iy[i] = w.iy;
    b_ix[i] = w.ix;
    b_base[i] = w.base;
  }
  // The tap (r, s) and first channel c0 of the next step to copy: the copies go in step order,
  // so these advance step by step instead of costing two divisions a copy.
  int next_r = 0, next_s = 0, next_c0 = 0;
  auto copy = [&](int stage, int k0) {
    E* a = Mma::a_stage(smem, stage);
    E* b = Mma::b_stage(smem, stage);
    const int r = next_r, s = next_s, c0 = next_c0;
    next_c0 += kBK;
    if (next_c0 == g.xc) {
      next_c0 = 0;
      if (++next_s == g.kw) next_s = 0, ++next_r;
    }
    const int shift = (r * g.xw + s) * g.xc + c0;
#pragma unroll
    for (int i = 0; i < kBVecs; ++i) {
      const int iy = b_iy[i] + r, ix = b_ix[i] + s;
      const bool ok = unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(b + (tid / kVecsPerRow + i * (kThreads / kVecsPerRow)) * Mma::kLdb + cv * V,
                   ok ? in_t + b_base[i] + shift : in_t, ok);
    }
#pragma unroll
    for (int i = 0; i < kAVecs; ++i) {
      const int v = tid + i * kThreads, m = m0 + v / kVecsPerRow;
      if (v < BM * kVecsPerRow) {
        const bool ok = m < m_total;
        copy_async16(a + (v / kVecsPerRow) * Mma::kLda + (v % kVecsPerRow) * V,
                     w_t + int64_t(ok ? m : 0) * k_total + k0 + (v % kVecsPerRow) * V, ok);
      }
    }
  };
  const int steps = k_total / kBK;
#pragma unroll
  for (int st = 0; st < kGatherStages - 1; ++st) {
    if (st < steps) copy(st, st * kBK);
    copy_async_commit();
  }
  Mma mma;
  for (int step = 0; step < steps; ++step) {
    copy_async_wait<kGatherStages - 2>();  // this thread's copies of `step` have landed
    __syncthreads();  // everyone's have, and step - 1's multiply is done with its stage
    const int next = step + kGatherStages - 1;
    if (next < steps) copy(next % kGatherStages, next * kBK);
    copy_async_commit();
    const int stage = step % kGatherStages;
    mma.template step</*kHoist=*/true>(Mma::a_stage(smem, stage), Mma::b_stage(smem, stage));
  }
  copy_async_wait<0>();
  __syncthreads();
  float* c = reinterpret_cast<float*>(smem);
  mma.store(c);
  __syncthreads();
  store_gather_tile<BM, kBN, kThreads>(c, Mma::kLdc, g, out, bias, m0, m_total, col0, columns,
                                       positions);
#endif
}

constexpr int kWgradStages = 3;

// The position tables ([kWgradStages][3][kBK]) run one step ahead of the copies. Four blocks an
// SM at BM = 32 (64 registers, as before the copies went asynchronous), three at 64, two at 128.
template <typename M, int BM, int kBN = kWgradBN>
__global__ void __launch_bounds__(kThreads, BM == 128 ? 2 : BM == 64 ? 3 : 4)
    wgrad_conv_kernel(const StorageOf<M>* __restrict__ x_t, const StorageOf<M>* __restrict__ dy_t,
                      float* __restrict__ partials, Gather g, int m_total, int positions_total,
                      int slice_positions) {
  wait_for_prior_grids();
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using Mma = BlockMma<M, BM, kBN, true, false, kWgradStages, /*kRawTf32=*/true>;
  using E = typename Mma::E;
  constexpr int kBK = Mma::kBK, V = kVec<M>;
  constexpr int kBVecsPerRow = kBN / V, kBVecs = kBK * kBVecsPerRow / kThreads;
  constexpr int kAVecsPerRow = BM / V;
  constexpr int kAVecs = (kBK * kAVecsPerRow + kThreads - 1) / kThreads;
  extern __shared__ __align__(128) char smem[];
  int* tables = reinterpret_cast<int*>(smem + Mma::kTileBytes);  // [kWgradStages][3][kBK]
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, j0 = blockIdx.x * kBN;
  const int taps = g.kh * g.kw, n_total = taps * g.xc;
  const int p_begin = blockIdx.z * slice_positions;
  const int p_end = min(positions_total, p_begin + slice_positions);
  const int positions = g.yh * g.yw;
  const int jv = tid % kBVecsPerRow, j = j0 + jv * V;
  const bool j_ok = j < n_total;
  const int tap = j_ok ? j / g.xc : 0, r = tap / g.kw, s = tap - r * g.kw;
  const int b_shift = (r * g.xw + s) * g.xc + (j - tap * g.xc);
  auto table = [&](int step) { return tables + (step % kWgradStages) * 3 * kBK; };
  auto decode = [&](int step) {  // threads < kBK
    decode_position(table(step), kBK, tid, p_begin + step * kBK + tid, p_end, positions, g);
  };
  auto copy = [&](int step) {
    const int stage = step % kWgradStages, p0 = p_begin + step * kBK;
    const int* t = table(step);
    E* a = Mma::a_stage(smem, stage);
    E* b = Mma::b_stage(smem, stage);
#pragma unroll
    for (int i = 0; i < kBVecs; ++i) {
      const int row = tid / kBVecsPerRow + i * (kThreads / kBVecsPerRow);
      const int iy = t[kBK + row] + r, ix = t[2 * kBK + row] + s;
      const bool ok = j_ok && unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(b + row * Mma::kLdb + jv * V, ok ? x_t + t[row] + b_shift : x_t, ok);
    }
#pragma unroll
    for (int i = 0; i < kAVecs; ++i) {
      const int v = tid + i * kThreads;
      if (v < kBK * kAVecsPerRow) {
        const int p = p0 + v / kAVecsPerRow, m = m0 + (v % kAVecsPerRow) * V;
        const bool ok = p < p_end && m < m_total;
        copy_async16(a + (v / kAVecsPerRow) * Mma::kLda + (v % kAVecsPerRow) * V,
                     ok ? dy_t + int64_t(p) * m_total + m : dy_t, ok);
      }
    }
  };
  Mma mma;
  const int steps = p_begin < p_end ? (p_end - p_begin + kBK - 1) / kBK : 0;
  if (steps > 0) {
    if (tid < kBK)
      for (int st = 0; st < kWgradStages && st < steps; ++st) decode(st);
    __syncthreads();
#pragma unroll
    for (int st = 0; st < kWgradStages - 1; ++st) {
      if (st < steps) copy(st);
      copy_async_commit();
    }
    for (int step = 0; step < steps; ++step) {
      copy_async_wait<kWgradStages - 2>();
      // Everyone's copies of `step` landed; step - 1's multiply is done with its stage; the
      // table decoded last iteration is visible.
      __syncthreads();
      const int next = step + kWgradStages - 1;
      if (next < steps) copy(next);
      copy_async_commit();
      // step's table was last read by the copies issued two iterations ago (or before the
      // loop): it takes step + kWgradStages's positions.
      if (tid < kBK && step + kWgradStages < steps) decode(step + kWgradStages);
      const int stage = step % kWgradStages;
      mma.step(Mma::a_stage(smem, stage), Mma::b_stage(smem, stage));
    }
  }
  copy_async_wait<0>();
  __syncthreads();
  float* c = reinterpret_cast<float*>(smem);
  mma.store(c);
  __syncthreads();
  // In the kernel's own (r, s, c) column order, so that a warp's stores are one run (in (c, r, s)
  // order each was a sector of its own); launch_conv_grad_reduce reorders as it sums.
  float* out = partials + int64_t(blockIdx.z) * m_total * n_total;
  const int jj = j0 + tid % kBN;
  if (jj >= n_total) return;
#pragma unroll 4
  for (int row = tid / kBN; row < BM; row += kThreads / kBN) {
    const int m = m0 + row;
    if (m >= m_total) break;
    out[int64_t(m) * n_total + jj] = c[row * Mma::kLdc + tid % kBN];
  }
#endif
}

}  // namespace trident::cuda::implicit_gemm
