// The gathered product of the implicit-GEMM convolution (implicit_conv.cu's gather kernel: the
// forward, and the data gradient's phases) on Hopper's warpgroup multiply (wgmma.mma_async), for
// input channels in 32s. Built for sm_90a only (CMake: trident_cuda_sm90a); kernels/cuda/
// wgmma_conv.h says when it is used.
//
// A K step is a 128-byte row of the flat K index (r, s, c) of the kernel w_t[m, r, s, c] and of
// the gathered NHWC input: 64 16-bit channels or 32 floats (TF32), of one tap, or of two taps
// where the input has 32 16-bit channels (each thread copies one 16-byte chunk of a row, which
// never straddles two taps, and follows its own tap). A K not in steps is padded with zeros. The
// tiles are copied by cp.async straight into shared memory in wgmma's 128-byte swizzle (zeros
// outside the image), kStages deep. mma.sync (implicit_conv_mma.cuh) reads every fragment
// through registers, eight warps each issuing its own small products; here the tensor cores read
// the tiles from shared memory themselves.
//
// The product's 64 rows (the instruction's M) are output channels where there are more than 32:
// a block of one warpgroup (up to 64 channels) or two (128), each 64 channels by 128 positions.
// With 32 output channels (the ResNet's 28x28 layers, and the data gradients into them) half of
// those rows would idle, so the rows are positions instead: two warpgroups, each 128 positions
// (two instructions of 64) by the 32 channels, the accumulators stored transposed.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/implicit_conv_kernels.cuh"
#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/sm90a/wgmma_ops.cuh"
#include "trident/kernels/cuda/wgmma_conv.h"

namespace trident::cuda {
namespace {

using implicit_gemm::Gather;
using implicit_gemm::GatherProducts;
using tile_mma::copy_async16;
using tile_mma::copy_async_commit;
using tile_mma::copy_async_wait;

using tile_mma::StorageOf;
using tile_mma::Tf32;

constexpr int kRowBytes = 128;  // a K step of one row: wgmma's 128-byte swizzle
constexpr int kChunks = kRowBytes / 16;  // 16-byte copies per row
constexpr int kStages = 3;
// Channels per K step for math M: 64 16-bit ones, 32 floats (TF32).
template <typename M>
constexpr int kStepChannels = kRowBytes / int(sizeof(StorageOf<M>));

// A block of kWarpgroups warpgroups, three stages deep; each step's products complete before the
// next step's barrier, and the copies run two steps ahead (against one product group left running
// past a step, one step closer: the same 5.61 ms a ResNet-9 bf16 step on an H200; at one block an
// SM, four stages: 5.84 ms). kChannels output channels by kPositions positions a block; the
// stage holds kChannels rows of the kernel, then kPositions rows of the gathered input.
template <int kWarpgroups, bool kPositionsMajor>
struct Config {
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kChannels = kPositionsMajor ? 32 : 64 * kWarpgroups;
  static constexpr int kPositions = kPositionsMajor ? 128 * kWarpgroups : 128;
  static constexpr int kWBytes = kChannels * kRowBytes, kPBytes = kPositions * kRowBytes;
  static constexpr int kStageBytes = kWBytes + kPBytes;  // a multiple of 1024
  // C staged as float [kChannels][kLdc]: +8 puts the pairs of store_accumulators on distinct
  // banks, +4 the columns of store_accumulators_transposed.
  static constexpr int kLdc = kPositions + (kPositionsMajor ? 4 : 8);
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes;
  static_assert(kChannels * kLdc * 4 <= kStages * kStageBytes, "C fits the stages");
  // Two blocks an SM of 128 channels (96 KB each) or 256 positions (108 KB), three of 64
  // channels (72 KB).
  static constexpr int kBlocksPerSm = kWarpgroups == 2 ? 2 : 3;
  // Accumulators a thread: a 64 x 128 product, or two 64 x 32 ones.
  static constexpr int kAccumulators = kPositionsMajor ? 32 : 64;
};

// One K step's products, kernel rows as M (channels-major): 16 16-bit channels (or 8 TF32 ones,
// the same 32 bytes) an instruction, each 32 bytes further (+2 in a descriptor).
template <typename M>
__device__ __forceinline__ void multiply_step(float (&d)[64], uint64_t desc_w, uint64_t desc_p) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (std::is_same_v<M, Tf32>)
      wgmma::mma_m64n128k8_tf32(d, desc_w + 2 * k, desc_p + 2 * k, 1);
    else
      wgmma::mma_m64n128k16(wgmma::Tag<M>{}, d, desc_w + 2 * k, desc_p + 2 * k, 1);
  }
}

// The same with positions as M (positions-major): two products of 64 positions (desc_p, and 64
// rows further: 8 KB, +512 in a descriptor) by 32 channels.
template <typename M>
__device__ __forceinline__ void multiply_step(float (&d)[32], uint64_t desc_w, uint64_t desc_p) {
  float(&d0)[16] = *reinterpret_cast<float(*)[16]>(d);
  float(&d1)[16] = *reinterpret_cast<float(*)[16]>(d + 16);
  constexpr uint64_t kNextRows = 64 * kRowBytes / 16;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (std::is_same_v<M, Tf32>) {
      wgmma::mma_m64n32k8_tf32(d0, desc_p + 2 * k, desc_w + 2 * k, 1);
      wgmma::mma_m64n32k8_tf32(d1, desc_p + kNextRows + 2 * k, desc_w + 2 * k, 1);
    } else {
      wgmma::mma_m64n32k16(wgmma::Tag<M>{}, d0, desc_p + 2 * k, desc_w + 2 * k, 1);
      wgmma::mma_m64n32k16(wgmma::Tag<M>{}, d1, desc_p + kNextRows + 2 * k, desc_w + 2 * k, 1);
    }
  }
}

// kSplitTaps: some product's input channels are not in K steps (32 16-bit ones), so a thread
// follows its own chunk's tap and K is padded; else every thread is at the same tap and channel
// offset, which the copies track once (the general bookkeeping cost the kernels with 64 channels
// 3-4%).
template <typename M, int kWarpgroups, bool kPositionsMajor, bool kSplitTaps,
          typename S = StorageOf<M>>
__global__ void __launch_bounds__(Config<kWarpgroups, kPositionsMajor>::kThreads,
                                  Config<kWarpgroups, kPositionsMajor>::kBlocksPerSm)
    wgmma_gather_kernel(const S* __restrict__ in_t, const S* __restrict__ w_t,
                        const float* __restrict__ bias, S* __restrict__ out,
                        const __grid_constant__ GatherProducts products, int m_total) {
  wait_for_prior_grids();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Config<kWarpgroups, kPositionsMajor>;
  constexpr int kBK = kStepChannels<M>, V = 16 / int(sizeof(S));  // V: elements a copy
  constexpr int kThreads = C::kThreads;
  const Gather& g = products.g[blockIdx.z];
  const int columns = products.columns[blockIdx.z];
  if (int(blockIdx.x) * C::kPositions >= columns) return;  // past this product's positions
  w_t += products.w_offset[blockIdx.z];
  extern __shared__ char smem_raw[];
  // The swizzle works on address bits: stages on 1024 bytes.
  char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  const uint32_t smem_base = uint32_t(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * C::kChannels, col0 = blockIdx.x * C::kPositions;
  const int k_total = g.kh * g.kw * g.xc;
  const int positions = g.yh * g.yw;
  // This thread copies chunk `cv` of rows row0 + kRowsPerPass i: each such row is row0 % 8, so
  // its swizzled chunk is the same for all of them.
  constexpr int kRowsPerPass = kThreads / kChunks;
  constexpr int kPRows = C::kPositions / kRowsPerPass, kWRows = C::kChannels / kRowsPerPass;
  static_assert(kWRows >= 1, "every thread copies kernel rows");
  const int cv = tid % kChunks, row0 = tid / kChunks;
  const uint32_t swizzled = uint32_t(((cv ^ (row0 % 8)) * 16));
  // With whole steps a tap, each thread's channel offset cv V is folded into its rows' bases.
  const int channel = kSplitTaps ? 0 : cv * V;
  int p_base[kPRows], p_iy[kPRows], p_ix[kPRows];
#pragma unroll
  for (int i = 0; i < kPRows; ++i) {
    const int column = col0 + row0 + i * kRowsPerPass;
    const implicit_gemm::WindowCorner w =
        implicit_gemm::window_corner(column, column < columns, positions, g, channel);
    p_iy[i] = w.iy;
    p_ix[i] = w.ix;
    p_base[i] = w.base;
  }
  const S* w_row[kWRows];
  bool w_ok[kWRows];
#pragma unroll
  for (int i = 0; i < kWRows; ++i) {
    const int m = m0 + row0 + i * kRowsPerPass;
    w_ok[i] = m < m_total;
    w_row[i] = w_t + int64_t(w_ok[i] ? m : 0) * k_total + channel;
  }
  // The next step to copy (copies go in step order): its tap (r, s), the channel c of this
  // thread's chunk within it (of the step's first chunk without kSplitTaps), and the flat index k
  // of the chunk (of the step).
  int k = cv * V - channel, c = k % g.xc, r = (k / g.xc) / g.kw, s = (k / g.xc) % g.kw;
  auto copy = [&](int stage) {
    char* w_tile = smem + stage * C::kStageBytes;
    char* p_tile = w_tile + C::kWBytes;
    const bool k_ok = !kSplitTaps || k < k_total;  // else K's zero padding
    const int shift = (r * g.xw + s) * g.xc + c;
#pragma unroll
    for (int i = 0; i < kPRows; ++i) {
      const int iy = p_iy[i] + r, ix = p_ix[i] + s;
      const bool ok = k_ok && unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(p_tile + (row0 + i * kRowsPerPass) * kRowBytes + swizzled,
                   ok ? in_t + p_base[i] + shift : in_t, ok);
    }
#pragma unroll
    for (int i = 0; i < kWRows; ++i)
      copy_async16(w_tile + (row0 + i * kRowsPerPass) * kRowBytes + swizzled,
                   w_ok[i] && k_ok ? w_row[i] + k : w_t, w_ok[i] && k_ok);
    k += kBK;
    if constexpr (kSplitTaps) {
      for (c += kBK; c >= g.xc; c -= g.xc)  // once or twice: channels come in 32s
        if (++s == g.kw) s = 0, ++r;
    } else if ((c += kBK) == g.xc) {
      c = 0;
      if (++s == g.kw) s = 0, ++r;
    }
  };
  const int steps = (k_total + kBK - 1) / kBK;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < steps) copy(st);
    copy_async_commit();
  }
  float d[C::kAccumulators];
#pragma unroll
  for (int i = 0; i < C::kAccumulators; ++i) d[i] = 0.0f;
  const int warpgroup = tid / 128;
  for (int step = 0; step < steps; ++step) {
    copy_async_wait<kStages - 2>();  // this thread's copies of `step` have landed
    wgmma::fence_shared_for_async();
    // Everyone's copies have landed; every warpgroup's products of step - 1 are done with their
    // stage, which the copies below refill.
    __syncthreads();
    const int next = step + kStages - 1;
    if (next < steps) copy(next % kStages);
    copy_async_commit();
    const uint32_t w_tile = smem_base + (step % kStages) * C::kStageBytes;
    const uint32_t p_tile = w_tile + C::kWBytes;
    // This warpgroup's rows of the product: 64 kernel rows, or 128 positions.
    const uint32_t w_rows = kPositionsMajor ? w_tile : w_tile + warpgroup * 64 * kRowBytes;
    const uint32_t p_rows = kPositionsMajor ? p_tile + warpgroup * 128 * kRowBytes : p_tile;
    wgmma::fence();
    multiply_step<M>(d, wgmma::descriptor(w_rows), wgmma::descriptor(p_rows));
    wgmma::commit();
    wgmma::wait<0>();
  }
  copy_async_wait<0>();
  __syncthreads();  // every warpgroup is done with the stages: C takes their memory
  float* c_tile = reinterpret_cast<float*>(smem);
  if constexpr (kPositionsMajor) {
    const float(&d0)[16] = *reinterpret_cast<const float(*)[16]>(d);
    const float(&d1)[16] = *reinterpret_cast<const float(*)[16]>(d + 16);
    wgmma::store_accumulators_transposed(d0, c_tile + warpgroup * 128, C::kLdc);
    wgmma::store_accumulators_transposed(d1, c_tile + warpgroup * 128 + 64, C::kLdc);
  } else {
    wgmma::store_accumulators(d, c_tile + warpgroup * 64 * C::kLdc, C::kLdc);
  }
  __syncthreads();
  implicit_gemm::store_gather_tile<C::kChannels, C::kPositions, kThreads>(
      c_tile, C::kLdc, g, out, bias, m0, m_total, col0, columns, positions);
#endif
}

template <typename M, int kWarpgroups, bool kPositionsMajor, bool kSplitTaps,
          typename S = StorageOf<M>>
void launch_type(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
                 void* out, const GatherProducts& products, int count, int64_t most,
                 int64_t m_total) {
  using C = Config<kWarpgroups, kPositionsMajor>;
  constexpr auto kKernel = wgmma_gather_kernel<M, kWarpgroups, kPositionsMajor, kSplitTaps>;
  allow_dynamic_shared_memory<kKernel>(C::kSmemBytes);
  const dim3 grid(unsigned((most + C::kPositions - 1) / C::kPositions),
                  unsigned((m_total + C::kChannels - 1) / C::kChannels), unsigned(count));
  launch(ctx, kKernel, grid, C::kThreads, size_t(C::kSmemBytes), static_cast<const S*>(in_t),
         static_cast<const S*>(w_t), bias, static_cast<S*>(out), products, int(m_total));
}

template <typename M, bool kSplitTaps>
void launch_type(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
                 void* out, const GatherProducts& products, int count, int64_t most,
                 int64_t m_total) {
  if (m_total <= 32)
    launch_type<M, 2, true, kSplitTaps>(ctx, in_t, w_t, bias, out, products, count, most,
                                        m_total);
  else if (m_total <= 64)
    launch_type<M, 1, false, kSplitTaps>(ctx, in_t, w_t, bias, out, products, count, most,
                                         m_total);
  else
    launch_type<M, 2, false, kSplitTaps>(ctx, in_t, w_t, bias, out, products, count, most,
                                         m_total);
}

template <typename M>
void launch_type(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
                 void* out, const GatherProducts& products, int count, int64_t most,
                 int64_t m_total) {
  bool split_taps = false;
  for (int z = 0; z < count; ++z) split_taps |= products.g[z].xc % kStepChannels<M> != 0;
  if (split_taps)
    launch_type<M, true>(ctx, in_t, w_t, bias, out, products, count, most, m_total);
  else
    launch_type<M, false>(ctx, in_t, w_t, bias, out, products, count, most, m_total);
}

}  // namespace

bool wgmma_conv_available() {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, wgmma_gather_kernel<Bf16, 2, false, false>) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.binaryVersion == 90;
}

bool wgmma_gather_fits(const Gather* gs, int count) {
  // A chunk of a K step (8 16-bit channels, 4 floats) never straddles two taps.
  for (int z = 0; z < count; ++z)
    if (gs[z].xc % 32 != 0) return false;
  return true;
}

void launch_wgmma_gather(const KernelContext& ctx, DType dtype, const void* in_t,
                         const void* w_t, const float* bias, void* out,
                         const GatherProducts& products, int count, int64_t most,
                         int64_t m_total) {
  if (dtype == DType::bf16)
    launch_type<Bf16>(ctx, in_t, w_t, bias, out, products, count, most, m_total);
  else if (dtype == DType::f16)
    launch_type<F16>(ctx, in_t, w_t, bias, out, products, count, most, m_total);
  else
    launch_type<Tf32>(ctx, in_t, w_t, bias, out, products, count, most, m_total);
}

}  // namespace trident::cuda
