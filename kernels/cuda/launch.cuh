// Device-side helpers shared by the .cu files: grid sizes and grid-stride loops in 32- or 64-bit
// indices, division by a fixed divisor, the device error flag, and reductions over a warp, a
// block and a whole grid in a fixed order (deterministic results, no float atomics).
#pragma once
#include <atomic>
#include <climits>
#include <cstdint>

#include "trident/core/device.h"  // DeviceErrorCode
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

constexpr int kBlockThreads = 256;
// Enough blocks to fill any current GPU many times over; grid-stride loops cover the rest.
constexpr int64_t kMaxBlocks = 16384;

inline unsigned grid_for(int64_t items, int threads = kBlockThreads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Whether a grid-stride loop over [0, n) (grid_for's grids, up to 1024 threads a block) may count
// in int32: n plus one whole grid stride stays below 2^31. 32-bit division and multiplication
// are several times cheaper; kernels are instantiated for int32_t and int64_t and the launcher
// picks one, so that every op is also correct past 2^31 elements.
inline bool fits_int32(int64_t n) { return n >= 0 && n < (int64_t(1) << 31) - kMaxBlocks * 1024; }

template <typename I>
__device__ __forceinline__ I first_index() {
  return static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
}
template <typename I>
__device__ __forceinline__ I grid_step() {
  return static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
}

// Division of a non-negative index by a divisor fixed at launch. The int32 form is a
// multiply-high and a shift (Granlund and Montgomery, as PyTorch's IntDivider): for divisors in
// [1, 2^31) and numerators in [0, 2^31); the int64 form divides.
template <typename I>
struct Divider;

template <>
struct Divider<int32_t> {
  int32_t divisor = 1;
  uint32_t magic = 1, shift = 0;
  Divider() = default;
  explicit Divider(int64_t d) : divisor(static_cast<int32_t>(d)) {
    while (shift < 31 && (uint64_t(1) << shift) < uint64_t(d)) ++shift;
    magic = static_cast<uint32_t>(
        ((uint64_t(1) << 32) * ((uint64_t(1) << shift) - uint64_t(d))) / uint64_t(d) + 1);
  }
  __host__ __device__ __forceinline__ int32_t div(int32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(static_cast<uint32_t>(n), magic);
#else
    const uint32_t high = static_cast<uint32_t>((uint64_t(static_cast<uint32_t>(n)) * magic) >>
                                                32);
#endif
    return static_cast<int32_t>((high + static_cast<uint32_t>(n)) >> shift);
  }
};

template <>
struct Divider<int64_t> {
  int64_t divisor = 1;
  Divider() = default;
  explicit Divider(int64_t d) : divisor(d) {}
  __host__ __device__ __forceinline__ int64_t div(int64_t n) const { return n / divisor; }
};

// Programmatic dependent launch (sm_90+). launch() lets a kernel be scheduled while the kernel
// before it in the stream is still retiring its last blocks, instead of after it has completed:
// the launch latency between two dependent kernels is hidden (a graph of 100 dependent small
// kernels on an H200: 1.25 -> 1.04 us a kernel). Every kernel launched through launch() must
// therefore call wait_for_prior_grids() before it reads or writes global memory: it returns once
// the grids before it have completed and their writes are visible (on older GPUs, and for a
// launch without the attribute, it returns at once). No kernel triggers its dependents early
// (griddepcontrol.launch_dependents): with many blocks, dependents that sat waiting on SMs slowed
// the kernel before them (the same graph: up to 1.4x slower).
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// kernel<<<grid, block, shared_bytes, ctx.stream>>>(args...), with programmatic dependent launch
// where ctx.dependent_launch (see wait_for_prior_grids). Errors show as cudaGetLastError(), as
// after <<<...>>>.
template <typename... Params, typename... Args>
void launch(const KernelContext& ctx, void (*kernel)(Params...), dim3 grid, dim3 block,
            size_t shared_bytes, const Args&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = ctx.stream;
  cudaLaunchAttribute dependent{};
  dependent.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  dependent.val.programmaticStreamSerializationAllowed = 1;
  if (ctx.dependent_launch) {
    config.attrs = &dependent;
    config.numAttrs = 1;
  }
  (void)cudaLaunchKernelEx(&config, kernel, args...);
}

// Lets kKernel take `bytes` of dynamic shared memory on the current device (past 48 KB a kernel
// must opt in). The attribute belongs to each device's copy of the kernel, so it is set once per
// device, not once per process: a data-parallel run launches the same kernel on several. A
// failure is left to show as the launch's error.
template <auto kKernel>
void allow_dynamic_shared_memory(int bytes) {
  constexpr int kDevices = 64;
  static std::atomic<int> allowed[kDevices];  // bytes already allowed, per device ordinal
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  const bool tracked = device >= 0 && device < kDevices;
  if (tracked && allowed[device].load(std::memory_order_relaxed) >= bytes) return;
  if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (tracked) {
    int seen = allowed[device].load(std::memory_order_relaxed);
    while (seen < bytes && !allowed[device].compare_exchange_weak(seen, bytes)) {
    }
  }
}

// The current device's shared memory: what a block may opt in to, and an SM's (48 KB each where
// the device cannot be asked).
struct SharedMemory {
  int per_block = 48 * 1024, per_sm = 48 * 1024;
};
inline SharedMemory device_shared_memory() {
  SharedMemory m;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&m.per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&m.per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return SharedMemory{};
  }
  return m;
}

// Reports bad data met by a kernel (Device::error_flag): the first report sets the code, and
// its writer the value; the front turns it into a BackendError at the next synchronize.
__device__ __forceinline__ void raise_error(int32_t* flag, DeviceErrorCode code, int64_t value) {
  if (atomicCAS(flag, 0, static_cast<int32_t>(code)) == 0)
    flag[1] = static_cast<int32_t>(value > INT_MAX ? INT_MAX
                                                   : (value < INT_MIN ? INT_MIN : value));
}

// Reductions over the 32 lanes of a warp (every lane gets the result).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {  // fmaxf: NaN lanes are ignored
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ int warp_min(int v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over a 1-D block (blockDim.x a multiple of 32, at most 1024) in a fixed order: a shuffle
// tree within each warp, then the warps' sums in warp order. The total is valid in thread 0.
// `shared` holds 32 values; the call ends with a barrier, so it may be reused right after.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = T(0);
  if (threadIdx.x == 0)
    for (int w = 0; w < warps; ++w) total += shared[w];
  __syncthreads();
  return total;
}

// One value per block of a 1-D grid summed over the grid in block order, in the same launch: each
// block's thread 0 passes its block's value; the block that arrives last gets true, with the
// grid's total in thread 0's `total` (its other threads get true and an unspecified total).
// Needs gridDim.x <= scratch.partial_words. Resets the arrival counter for the next kernel.
__device__ __forceinline__ bool grid_sum_last(double block_value, const ReduceScratch& scratch,
                                              double* total) {
  __shared__ bool last;
  __shared__ double warp_values[32];
  if (threadIdx.x == 0) {
    scratch.partials[blockIdx.x] = block_value;
    __threadfence();  // the partial is visible device-wide before the arrival is counted
    last = atomicAdd(scratch.counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return false;
  // The last block: thread t adds partials t, t + blockDim.x, ... (L2 reads: other blocks wrote
  // them), then the block sum combines the threads in a fixed order.
  double sum = 0.0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
    sum += __ldcg(&scratch.partials[b]);
  sum = block_sum(sum, warp_values);
  if (threadIdx.x == 0) {
    *total = sum;
    *scratch.counter = 0u;
  }
  return true;
}

}  // namespace trident::cuda
