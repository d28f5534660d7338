// CUDA elementwise kernels: fill, ReLU, axpby, the GEMM bias/ReLU epilogue, dropout (Philox).
#include "trident/core/philox.h"
#include "trident/kernels/cuda/cuda_kernels.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

__global__ void fill_kernel(float* dst, int64_t n, float value) {
  for (int64_t i = first_index(); i < n; i += grid_step()) dst[i] = value;
}

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_step()) {
    const float v = x[i];
    y[i] = v < 0.f ? 0.f : v;  // NaN passes through, as on the CPU
  }
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_step()) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
}

__global__ void axpby_kernel(const float* x, float* y, int64_t n, float a, float b) {
  for (int64_t i = first_index(); i < n; i += grid_step())
    y[i] = b == 0.f ? a * x[i] : a * x[i] + b * y[i];  // b == 0: y is not read (may hold NaN)
}

// c is [m, n] with row stride ldc; kind 1: bias[n] per column, kind 2: bias[m] per row.
__global__ void gemm_epilogue_kernel(float* c, int64_t ldc, int64_t m, int64_t n,
                                     const float* bias, int kind, bool relu, bool k_was_zero,
                                     float beta) {
  const int64_t total = m * n;
  for (int64_t i = first_index(); i < total; i += grid_step()) {
    const int64_t row = i / n, col = i - row * n;
    float* p = c + row * ldc + col;
    float v = k_was_zero ? (beta == 0.f ? 0.f : beta * *p) : *p;
    if (kind == 1) v += bias[col];
    if (kind == 2) v += bias[row];
    if (relu) v = v < 0.f ? 0.f : v;
    *p = v;
  }
}

__global__ void dropout_kernel(const float* x, float* y, int64_t n, int64_t group,
                               int64_t group_offset, float p, float scale, uint64_t seed,
                               uint32_t rng_stream, const uint32_t* step_state) {
  const uint32_t step = step_state[1];
  for (int64_t i = first_index(); i < n; i += grid_step()) {
    const uint64_t g = static_cast<uint64_t>(group_offset + i / group);
    const float u = philox_uniform(seed, rng_stream, step, g);
    y[i] = u >= p ? x[i] * scale : 0.f;
  }
}

}  // namespace

void launch_fill(cudaStream_t stream, float* dst, int64_t n, float value) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(dst, n, value);
}

void launch_relu_forward(cudaStream_t stream, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  relu_forward_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(x, y, n);
}

void launch_relu_backward(cudaStream_t stream, const float* y, const float* dy, float* dx,
                          int64_t n) {
  if (n <= 0) return;
  relu_backward_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(y, dy, dx, n);
}

void launch_axpby(cudaStream_t stream, const float* x, float* y, int64_t n, float a, float b) {
  if (n <= 0) return;
  axpby_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(x, y, n, a, b);
}

void launch_gemm_epilogue(cudaStream_t stream, float* c, int64_t ldc, int64_t m, int64_t n,
                          const float* bias, BiasKind bias_kind, bool relu, bool k_was_zero,
                          float beta) {
  if (m <= 0 || n <= 0) return;
  const int kind = bias == nullptr ? 0 : bias_kind == BiasKind::per_column ? 1
                                       : bias_kind == BiasKind::per_row    ? 2 : 0;
  gemm_epilogue_kernel<<<grid_for(m * n), kBlockThreads, 0, stream>>>(c, ldc, m, n, bias, kind,
                                                                      relu, k_was_zero, beta);
}

void launch_dropout(cudaStream_t stream, const float* x, float* y, int64_t n, int64_t group,
                    int64_t group_offset, float p, float scale, uint64_t seed, uint32_t rng_stream,
                    const uint32_t* step_state) {
  if (n <= 0) return;
  dropout_kernel<<<grid_for(n), kBlockThreads, 0, stream>>>(x, y, n, group < 1 ? 1 : group,
                                                            group_offset, p, scale, seed,
                                                            rng_stream, step_state);
}

}  // namespace trident::cuda
