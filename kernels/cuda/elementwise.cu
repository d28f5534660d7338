// CUDA elementwise kernels: fills, axpby, the unary family dispatched from the TRIDENT_UNARY_OPS
// list (one kernel per op, its formula from core/unary_math.h inlined), the GEMM epilogue and
// Philox dropout. Grid-stride loops in int32 when the buffer allows, else int64.
#include "trident/core/philox.h"
#include "trident/core/unary_math.h"
#include "trident/kernels/cuda/elementwise.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>()) dst[i] = value;
}

__global__ void axpby_kernel(const float* x, float* y, int64_t n, float a, float b) {
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>())
    y[i] = b == 0.f ? a * x[i] : a * x[i] + b * y[i];  // b == 0: y is not read (may hold NaN)
}

template <UnaryOp kOp>
__global__ void unary_forward_kernel(const float* x, float* y, int64_t n, float alpha) {
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>())
    y[i] = unary_apply<float>(kOp, x[i], alpha);
}

template <UnaryOp kOp>
__global__ void unary_backward_kernel(const float* x, const float* y, const float* dy, float* dx,
                                      int64_t n, float alpha) {
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>())
    dx[i] = unary_derivative<float>(kOp, x ? x[i] : 0.f, y ? y[i] : 0.f, dy[i], alpha);
}

// c is [m, n] with row stride ldc; the index runs over the m * n elements, row = i / n.
template <typename I, UnaryOp kOp>
__global__ void gemm_epilogue_kernel(float* c, int64_t ldc, I total, I n, Divider<I> by_n,
                                     const float* bias, int bias_kind, float alpha,
                                     bool k_was_zero, float beta) {
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I row = by_n.div(i), col = i - row * n;
    float* p = c + int64_t(row) * ldc + col;
    float v = k_was_zero ? (beta == 0.f ? 0.f : beta * *p) : *p;
    if (bias_kind == 1) v += bias[col];
    if (bias_kind == 2) v += bias[row];
    *p = unary_apply<float>(kOp, v, alpha);
  }
}

template <typename I>
__global__ void dropout_kernel(const float* x, float* y, I n, Divider<I> by_group,
                               int64_t group_offset, float p, float scale, uint64_t seed,
                               uint32_t rng_stream, const uint32_t* step_state) {
  const uint32_t step = step_state[1];
  for (I i = first_index<I>(); i < n; i += grid_step<I>()) {
    const uint64_t g = static_cast<uint64_t>(group_offset + int64_t(by_group.div(i)));
    y[i] = philox_uniform(seed, rng_stream, step, g) >= p ? x[i] * scale : 0.f;
  }
}

template <typename I, UnaryOp kOp>
void epilogue_as(const KernelContext& ctx, float* c, int64_t ldc, int64_t m, int64_t n,
                 const float* bias, int kind, float alpha, bool k_was_zero, float beta) {
  gemm_epilogue_kernel<I, kOp><<<grid_for(m * n), kBlockThreads, 0, ctx.stream>>>(
      c, ldc, I(m * n), I(n), Divider<I>(n), bias, kind, alpha, k_was_zero, beta);
}

}  // namespace

void launch_fill_f32(const KernelContext& ctx, float* dst, int64_t n, float value) {
  if (n > 0) fill_kernel<float><<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(dst, n, value);
}

void launch_fill_i32(const KernelContext& ctx, int32_t* dst, int64_t n, int32_t value) {
  if (n > 0) fill_kernel<int32_t><<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(dst, n, value);
}

void launch_axpby(const KernelContext& ctx, const float* x, float* y, int64_t n, float a,
                  float b) {
  if (n > 0) axpby_kernel<<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(x, y, n, a, b);
}

void launch_unary_forward(const KernelContext& ctx, UnaryOp op, const float* x, float* y,
                          int64_t n, float alpha) {
  if (n <= 0) return;
  switch (op) {
#define TRIDENT_CUDA_UNARY_FORWARD(name, module)                                           \
  case UnaryOp::name:                                                                      \
    unary_forward_kernel<UnaryOp::name><<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(    \
        x, y, n, alpha);                                                                   \
    return;
    TRIDENT_UNARY_OPS(TRIDENT_CUDA_UNARY_FORWARD)
#undef TRIDENT_CUDA_UNARY_FORWARD
  }
}

void launch_unary_backward(const KernelContext& ctx, UnaryOp op, const float* x, const float* y,
                           const float* dy, float* dx, int64_t n, float alpha) {
  if (n <= 0) return;
  switch (op) {
#define TRIDENT_CUDA_UNARY_BACKWARD(name, module)                                          \
  case UnaryOp::name:                                                                      \
    unary_backward_kernel<UnaryOp::name><<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(   \
        x, y, dy, dx, n, alpha);                                                           \
    return;
    TRIDENT_UNARY_OPS(TRIDENT_CUDA_UNARY_BACKWARD)
#undef TRIDENT_CUDA_UNARY_BACKWARD
  }
}

void launch_gemm_epilogue(const KernelContext& ctx, float* c, int64_t ldc, int64_t m, int64_t n,
                          const float* bias, BiasKind bias_kind, UnaryOp activation,
                          float activation_alpha, bool k_was_zero, float beta) {
  if (m <= 0 || n <= 0) return;
  const int kind = bias == nullptr ? 0 : bias_kind == BiasKind::per_column ? 1
                                       : bias_kind == BiasKind::per_row    ? 2 : 0;
  const bool small = fits_int32(m * n);
  switch (activation) {
#define TRIDENT_CUDA_EPILOGUE(name, module)                                                 \
  case UnaryOp::name:                                                                       \
    if (small)                                                                              \
      epilogue_as<int32_t, UnaryOp::name>(ctx, c, ldc, m, n, bias, kind, activation_alpha, \
                                          k_was_zero, beta);                                \
    else                                                                                    \
      epilogue_as<int64_t, UnaryOp::name>(ctx, c, ldc, m, n, bias, kind, activation_alpha, \
                                          k_was_zero, beta);                                \
    return;
    TRIDENT_UNARY_OPS(TRIDENT_CUDA_EPILOGUE)
#undef TRIDENT_CUDA_EPILOGUE
  }
}

void launch_dropout(const KernelContext& ctx, const float* x, float* y, int64_t n, int64_t group,
                    int64_t group_offset, float p, float scale, uint64_t seed,
                    uint32_t rng_stream, const uint32_t* step_state) {
  if (n <= 0) return;
  // i / group for i < n: a group of n or more gives 0 everywhere, as a group of n does.
  const int64_t divisor = group < n ? group : n;
  if (fits_int32(n))
    dropout_kernel<int32_t><<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(
        x, y, int32_t(n), Divider<int32_t>(divisor), group_offset, p, scale, seed, rng_stream,
        step_state);
  else
    dropout_kernel<int64_t><<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(
        x, y, n, Divider<int64_t>(divisor), group_offset, p, scale, seed, rng_stream,
        step_state);
}

}  // namespace trident::cuda
