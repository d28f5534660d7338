// The implicit-GEMM convolution's layout passes (for kernels/cuda/implicit_conv.cu): NCHW ->
// NHWC transposes of activations and kernels, and the data gradient's flipped kernel.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda::layout {

constexpr int kThreads = 256;
template <typename S>
constexpr int kVec = 16 / int(sizeof(S));  // elements per 16-byte vector
template <typename S>
using Vec = Pack<S, kVec<S>>;

// dst[b, j, i] = src[b, i, j] for src [batches, rows, cols] (32 x 32 tiles through shared memory).
template <typename S>
__global__ void transpose_kernel(const S* __restrict__ src, S* __restrict__ dst, int rows,
                                 int cols) {
  __shared__ S tile[32][33];
  const int64_t batch = blockIdx.z;
  const S* in = src + batch * rows * cols;
  S* out = dst + batch * rows * cols;
  const int i0 = blockIdx.y * 32, j0 = blockIdx.x * 32;
  for (int di = threadIdx.y; di < 32; di += 8) {
    const int i = i0 + di, j = j0 + threadIdx.x;
    if (i < rows && j < cols) tile[di][threadIdx.x] = in[int64_t(i) * cols + j];
  }
  __syncthreads();
  for (int dj = threadIdx.y; dj < 32; dj += 8) {
    const int j = j0 + dj, i = i0 + threadIdx.x;
    if (i < rows && j < cols) out[int64_t(j) * rows + i] = tile[threadIdx.x][dj];
  }
}

// The same for a whole [rows, cols] matrix per block (rows a multiple of the vector width, the
// matrix at most kSampleTransposeBytes): 16-byte loads into shared memory, 16-byte stores out.
constexpr int kSampleTransposeBytes = 96 * 1024;
template <typename S>
__global__ void __launch_bounds__(kThreads)
    transpose_sample_kernel(const S* __restrict__ src, S* __restrict__ dst, int rows, int cols) {
  extern __shared__ __align__(16) char smem[];
  S* tile = reinterpret_cast<S*>(smem);
  constexpr int V = kVec<S>;
  const int total = rows * cols, vectors = total / V, row_vectors = rows / V;
  const int64_t base = int64_t(blockIdx.x) * total;
  for (int v = threadIdx.x; v < vectors; v += kThreads)
    reinterpret_cast<Vec<S>*>(tile)[v] = reinterpret_cast<const Vec<S>*>(src + base)[v];
  __syncthreads();
  for (int v = threadIdx.x; v < vectors; v += kThreads) {
    const int j = v / row_vectors, i0 = (v - j * row_vectors) * V;
    Vec<S> out;
#pragma unroll
    for (int e = 0; e < V; ++e) out.v[e] = tile[(i0 + e) * cols + j];
    reinterpret_cast<Vec<S>*>(dst + base)[v] = out;
  }
}

// w_t[c, tap, oc] = w[oc, c, taps - 1 - tap]: the data gradient's kernel.
template <typename S>
__global__ void flip_kernel(const S* __restrict__ w, S* __restrict__ w_t, int oc_total,
                            int c_total, int taps) {
  const int total = oc_total * c_total * taps;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int oc = i % oc_total, rest = i / oc_total, tap = rest % taps, c = rest / taps;
    w_t[i] = w[(int64_t(oc) * c_total + c) * taps + (taps - 1 - tap)];
  }
}

// w[oc, c, tap] (tap = r * KW + s) to the forward's w_t[oc, tap, c] and, where w_flip is not
// null, to flip_kernel's w_flip[c, tap, oc] = w[oc, c, taps - 1 - tap] in the same pass: the
// kernels are small enough that each of these launches cost about 3 us (ResNet, H100, ncu).
template <typename S>
__global__ void arrange_weights_kernel(const S* __restrict__ w, S* __restrict__ w_t,
                                       S* __restrict__ w_flip, int oc_total, int c_total,
                                       int taps) {
  const int total = oc_total * c_total * taps;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int tap = i % taps, rest = i / taps, c = rest % c_total, oc = rest / c_total;
    const S v = w[i];
    w_t[(oc * taps + tap) * c_total + c] = v;
    if (w_flip) w_flip[(c * taps + taps - 1 - tap) * oc_total + oc] = v;
  }
}

template <typename S>
inline void transpose(const KernelContext& ctx, const void* src, void* dst, int64_t batches,
                      int64_t rows, int64_t cols) {
  const int64_t bytes = rows * cols * int64_t(sizeof(S));
  if (rows % kVec<S> == 0 && bytes <= kSampleTransposeBytes && pack_aligned(src, 16) &&
      pack_aligned(dst, 16)) {
    allow_dynamic_shared_memory<transpose_sample_kernel<S>>(kSampleTransposeBytes);
    transpose_sample_kernel<S><<<unsigned(batches), kThreads, size_t(bytes), ctx.stream>>>(
        static_cast<const S*>(src), static_cast<S*>(dst), int(rows), int(cols));
    return;
  }
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32), unsigned(batches));
  transpose_kernel<S><<<grid, dim3(32, 8), 0, ctx.stream>>>(
      static_cast<const S*>(src), static_cast<S*>(dst), int(rows), int(cols));
}

}  // namespace trident::cuda::layout
