// The gathered product of the implicit-GEMM convolution (implicit_conv.cu's gather kernel: the
// forward, and the data gradient's phases) on Hopper's warpgroup multiply (wgmma.mma_async), for
// more than 32 output channels and 16-bit operands whose channels come in 64s, or TF32 ones in
// 32s. Built for sm_90a only (CMake: trident_cuda_sm90a); kernels/cuda/wgmma_conv.h says when
// it is used.
//
// A block computes C[BM output channels, 128 positions] with one warpgroup (BM = 64, for up to 64
// output channels) or two (BM = 128), each 64 rows by 128 (one m64n128k16 instruction per 16
// channels; m64n128k8 per 8 in TF32). A K step is a 128-byte row of one tap's channels (64 16-bit
// ones, 32 floats): A[BM][row] of the kernel w_t[m, r, s, c] and B[128][row] of the gathered
// NHWC input, copied by cp.async straight into shared memory in wgmma's 128-byte swizzle (zeros
// outside the image), kStages deep. mma.sync (implicit_conv_mma.cuh) reads every fragment
// through registers, eight warps each issuing its own small products; here the tensor cores read
// the tiles from shared memory themselves.
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

// A block of kWarpgroups warpgroups (each 64 output channels by BN = 128 positions), three
// stages deep; each step's products complete before the next step's barrier, and the copies run
// two steps ahead (against one product group left running past a step, one step closer: the same
// 5.61 ms a ResNet-9 bf16 step on an H200; at one block an SM, four stages: 5.84 ms).
template <int kWarpgroups>
struct Config {
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int BM = 64 * kWarpgroups, BN = 128;
  static constexpr int kABytes = BM * kRowBytes, kBBytes = BN * kRowBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;  // a multiple of 1024
  static constexpr int kLdc = BN + 8;  // C staged as float [BM][kLdc]; 8: pairs on distinct banks
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes;
  static_assert(BM * kLdc * 4 <= kStages * kStageBytes, "C fits the stages");
  // Two blocks an SM of 128 rows (96 KB each), three of 64 (72 KB).
  static constexpr int kBlocksPerSm = kWarpgroups == 2 ? 2 : 3;
};

// One K step's products: 16 16-bit channels (or 8 TF32 ones, the same 32 bytes) an instruction.
template <typename M>
__device__ __forceinline__ void multiply_step(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // each 32 bytes further: +2 in a descriptor
    if constexpr (std::is_same_v<M, Tf32>)
      wgmma::mma_m64n128k8_tf32(d, desc_a + 2 * k, desc_b + 2 * k, 1);
    else
      wgmma::mma_m64n128k16(wgmma::Tag<M>{}, d, desc_a + 2 * k, desc_b + 2 * k, 1);
  }
}

template <typename M, int kWarpgroups, typename S = StorageOf<M>>
__global__ void __launch_bounds__(Config<kWarpgroups>::kThreads, Config<kWarpgroups>::kBlocksPerSm)
    wgmma_gather_kernel(const S* __restrict__ in_t, const S* __restrict__ w_t,
                        const float* __restrict__ bias, S* __restrict__ out,
                        const __grid_constant__ GatherProducts products, int m_total) {
  wait_for_prior_grids();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Config<kWarpgroups>;
  constexpr int kBK = kStepChannels<M>, V = 16 / int(sizeof(S));  // V: elements a copy
  constexpr int BM = C::BM, BN = C::BN, kThreads = C::kThreads;
  const Gather& g = products.g[blockIdx.z];
  const int columns = products.columns[blockIdx.z];
  if (int(blockIdx.x) * BN >= columns) return;  // past this product's positions
  w_t += products.w_offset[blockIdx.z];
  extern __shared__ char smem_raw[];
  // The swizzle works on address bits: stages on 1024 bytes.
  char* smem = smem_raw + ((1024 - (__cvta_generic_to_shared(smem_raw) & 1023)) & 1023);
  const uint32_t smem_base = uint32_t(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x;
  const int m0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const int k_total = g.kh * g.kw * g.xc;
  const int positions = g.yh * g.yw;
  // This thread copies chunk `cv` of rows row0 + kRowsPerPass i: each such row is row0 % 8, so
  // its swizzled chunk is the same for all of them.
  constexpr int kRowsPerPass = kThreads / kChunks;
  constexpr int kBRows = BN / kRowsPerPass, kARows = BM / kRowsPerPass;
  const int cv = tid % kChunks, row0 = tid / kChunks;
  const uint32_t swizzled = uint32_t(((cv ^ (row0 % 8)) * 16));
  int b_base[kBRows], b_iy[kBRows], b_ix[kBRows];
#pragma unroll
  for (int i = 0; i < kBRows; ++i) {
    const int column = col0 + row0 + i * kRowsPerPass;
    const implicit_gemm::WindowCorner w =
        implicit_gemm::window_corner(column, column < columns, positions, g, cv * V);
    b_iy[i] = w.iy;
    b_ix[i] = w.ix;
    b_base[i] = w.base;
  }
  const S* a_src[kARows];
  bool a_ok[kARows];
#pragma unroll
  for (int i = 0; i < kARows; ++i) {
    const int m = m0 + row0 + i * kRowsPerPass;
    a_ok[i] = m < m_total;
    a_src[i] = w_t + int64_t(a_ok[i] ? m : 0) * k_total + cv * V;
  }
  // The tap (r, s) and first channel c0 of the next step to copy (copies go in step order).
  int next_r = 0, next_s = 0, next_c0 = 0, next_k0 = 0;
  auto copy = [&](int stage) {
    char* a = smem + stage * C::kStageBytes;
    char* b = a + C::kABytes;
    const int r = next_r, s = next_s, k0 = next_k0;
    const int shift = (r * g.xw + s) * g.xc + next_c0;
    next_k0 += kBK;
    next_c0 += kBK;
    if (next_c0 == g.xc) {
      next_c0 = 0;
      if (++next_s == g.kw) next_s = 0, ++next_r;
    }
#pragma unroll
    for (int i = 0; i < kBRows; ++i) {
      const int iy = b_iy[i] + r, ix = b_ix[i] + s;
      const bool ok = unsigned(iy) < unsigned(g.xh) && unsigned(ix) < unsigned(g.xw);
      copy_async16(b + (row0 + i * kRowsPerPass) * kRowBytes + swizzled,
                   ok ? in_t + b_base[i] + shift : in_t, ok);
    }
#pragma unroll
    for (int i = 0; i < kARows; ++i)
      copy_async16(a + (row0 + i * kRowsPerPass) * kRowBytes + swizzled, a_src[i] + k0, a_ok[i]);
  };
  const int steps = k_total / kBK;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < steps) copy(st);
    copy_async_commit();
  }
  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.0f;
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
    const uint32_t a = smem_base + (step % kStages) * C::kStageBytes + warpgroup * 64 * kRowBytes;
    const uint32_t b = smem_base + (step % kStages) * C::kStageBytes + C::kABytes;
    const uint64_t desc_a = wgmma::descriptor(a), desc_b = wgmma::descriptor(b);
    wgmma::fence();
    multiply_step<M>(d, desc_a, desc_b);
    wgmma::commit();
    wgmma::wait<0>();
  }
  copy_async_wait<0>();
  __syncthreads();  // every warpgroup is done with the stages: C takes their memory
  float* c = reinterpret_cast<float*>(smem);
  wgmma::store_accumulators(d, c + warpgroup * 64 * C::kLdc, C::kLdc);
  __syncthreads();
  implicit_gemm::store_gather_tile<BM, BN, kThreads>(c, C::kLdc, g, out, bias, m0, m_total, col0,
                                                     columns, positions);
#endif
}

template <typename M, int kWarpgroups, typename S = StorageOf<M>>
void launch_type(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
                 void* out, const GatherProducts& products, int count, int64_t most,
                 int64_t m_total) {
  using C = Config<kWarpgroups>;
  constexpr auto kKernel = wgmma_gather_kernel<M, kWarpgroups>;
  allow_dynamic_shared_memory<kKernel>(C::kSmemBytes);
  const dim3 grid(unsigned((most + C::BN - 1) / C::BN), unsigned((m_total + C::BM - 1) / C::BM),
                  unsigned(count));
  launch(ctx, kKernel, grid, C::kThreads, size_t(C::kSmemBytes), static_cast<const S*>(in_t),
         static_cast<const S*>(w_t), bias, static_cast<S*>(out), products, int(m_total));
}

template <typename M>
void launch_type(const KernelContext& ctx, const void* in_t, const void* w_t, const float* bias,
                 void* out, const GatherProducts& products, int count, int64_t most,
                 int64_t m_total) {
  if (m_total <= 64)
    launch_type<M, 1>(ctx, in_t, w_t, bias, out, products, count, most, m_total);
  else
    launch_type<M, 2>(ctx, in_t, w_t, bias, out, products, count, most, m_total);
}

}  // namespace

bool wgmma_conv_available() {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, wgmma_gather_kernel<Bf16, 2>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.binaryVersion == 90;
}

bool wgmma_gather_fits(DType dtype, const Gather* gs, int count, int64_t m_total) {
  // float32 only comes with TF32 allowed (implicit_conv_fits), and its operands rounded.
  if (m_total <= 32) return false;  // half a warpgroup's rows would idle
  const int step = dtype == DType::f32 ? kStepChannels<Tf32> : kStepChannels<Bf16>;
  for (int z = 0; z < count; ++z)
    if (gs[z].xc % step != 0) return false;
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
