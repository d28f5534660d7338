// CUDA elementwise kernels, one template per op over the storage type S (float, Bf16, F16:
// float32 arithmetic, one rounding per output): fills, axpby, the unary family dispatched from the
// TRIDENT_UNARY_OPS list (one kernel per op, its formula from core/unary_math.h inlined), the GEMM
// epilogue and Philox dropout. The flat ops run through map.cuh (16-byte packs where aligned).
#include "trident/core/philox.h"
#include "trident/core/unary_math.h"
#include "trident/kernels/cuda/elementwise.h"
#include "trident/kernels/cuda/map.cuh"

namespace trident::cuda {
namespace {

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  wait_for_prior_grids();
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>()) dst[i] = value;
}

// y = kOp(a * x + b * y).
template <typename S, UnaryOp kOp>
struct AxpbyOp {
  const S* x;
  S* y;
  float a, b, alpha;
  template <int V>
  __device__ __forceinline__ void at(int64_t i) const {
    float xv[V], yv[V];
    load_pack<V>(x, i, xv);
    if (b != 0.f) load_pack<V>(static_cast<const S*>(y), i, yv);  // b == 0: y may hold NaN
#pragma unroll
    for (int j = 0; j < V; ++j)
      yv[j] = unary_apply<float>(kOp, b == 0.f ? a * xv[j] : a * xv[j] + b * yv[j], alpha);
    store_pack<V>(y, i, yv);
  }
};

template <typename S, UnaryOp kOp>
struct UnaryForwardOp {
  const S* x;
  S* y;
  float alpha;
  template <int V>
  __device__ __forceinline__ void at(int64_t i) const {
    float v[V];
    load_pack<V>(x, i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = unary_apply<float>(kOp, v[j], alpha);
    store_pack<V>(y, i, v);
  }
};

template <typename S, UnaryOp kOp>
struct UnaryBackwardOp {
  const S* x;  // either may be null (the op reads the other)
  const S* y;
  const S* dy;
  const S* dy_more;  // null, or the gradient's second part (summed first, in float32)
  S* dx;
  float alpha;
  template <int V>
  __device__ __forceinline__ void at(int64_t i) const {
    float xv[V] = {}, yv[V] = {}, g[V];
    if (x) load_pack<V>(x, i, xv);
    if (y) load_pack<V>(y, i, yv);
    load_pack<V>(dy, i, g);
    if (dy_more) {
      float more[V];
      load_pack<V>(dy_more, i, more);
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] += more[j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = unary_derivative<float>(kOp, xv[j], yv[j], g[j], alpha);
    store_pack<V>(dx, i, g);
  }
};

// Whether x, y, ... of S allow packs of kPackOf<S> (null pointers do).
template <typename S>
bool packable(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p && !pack_aligned(p, sizeof(S) * kPackOf<S>)) return false;
  return true;
}

// c is [m, n] with row stride ldc; the index runs over the m * n elements, row = i / n.
template <typename S, typename I, UnaryOp kOp>
__global__ void gemm_epilogue_kernel(S* c, int64_t ldc, I total, I n, Divider<I> by_n,
                                     const float* bias, int bias_kind, float alpha,
                                     bool k_was_zero, float beta) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I row = by_n.div(i), col = i - row * n;
    S* p = c + int64_t(row) * ldc + col;
    float v = k_was_zero ? (beta == 0.f ? 0.f : beta * to_float(*p)) : to_float(*p);
    if (bias_kind == 1) v += bias[col];
    if (bias_kind == 2) v += bias[row];
    *p = from_float<S>(unary_apply<float>(kOp, v, alpha));
  }
}

template <typename S, typename I>
__global__ void dropout_kernel(const S* x, S* y, I n, Divider<I> by_group, int64_t group_offset,
                               float p, float scale, uint64_t seed, uint32_t rng_stream,
                               const uint32_t* step_state) {
  wait_for_prior_grids();
  const uint32_t step = step_state[1];
  for (I i = first_index<I>(); i < n; i += grid_step<I>()) {
    const uint64_t g = static_cast<uint64_t>(group_offset + int64_t(by_group.div(i)));
    y[i] = from_float<S>(philox_uniform(seed, rng_stream, step, g) >= p ? to_float(x[i]) * scale
                                                                        : 0.f);
  }
}

template <typename S, typename I, UnaryOp kOp>
void epilogue_as(const KernelContext& ctx, void* c, int64_t ldc, int64_t m, int64_t n,
                 const float* bias, int kind, float alpha, bool k_was_zero, float beta) {
  launch(ctx, gemm_epilogue_kernel<S, I, kOp>, grid_for(m * n), kBlockThreads, 0,
         static_cast<S*>(c), ldc, I(m * n), I(n), Divider<I>(n), bias, kind, alpha, k_was_zero,
         beta);
}

}  // namespace

void launch_fill_f32(const KernelContext& ctx, float* dst, int64_t n, float value) {
  if (n > 0) launch(ctx, fill_kernel<float>, grid_for(n), kBlockThreads, 0, dst, n, value);
}

void launch_fill_i32(const KernelContext& ctx, int32_t* dst, int64_t n, int32_t value) {
  if (n > 0) launch(ctx, fill_kernel<int32_t>, grid_for(n), kBlockThreads, 0, dst, n, value);
}

void launch_axpby(const KernelContext& ctx, DType type, const void* x, void* y, int64_t n,
                  float a, float b, UnaryOp activation, float alpha) {
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const bool packed = packable<S>({x, y});
    switch (activation) {
#define TRIDENT_CUDA_AXPBY(name, module)                                                        \
  case UnaryOp::name:                                                                           \
    launch_map<kPackOf<S>>(                                                                     \
        ctx,                                                                                    \
        AxpbyOp<S, UnaryOp::name>{static_cast<const S*>(x), static_cast<S*>(y), a, b, alpha}, \
        n, packed);                                                                             \
    return;
      TRIDENT_UNARY_OPS(TRIDENT_CUDA_AXPBY)
#undef TRIDENT_CUDA_AXPBY
    }
  });
}

void launch_unary_forward(const KernelContext& ctx, DType type, UnaryOp op, const void* x,
                          void* y, int64_t n, float alpha) {
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const bool packed = packable<S>({x, y});
    switch (op) {
#define TRIDENT_CUDA_UNARY_FORWARD(name, module)                                              \
  case UnaryOp::name:                                                                         \
    launch_map<kPackOf<S>>(                                                                   \
        ctx, UnaryForwardOp<S, UnaryOp::name>{static_cast<const S*>(x), static_cast<S*>(y), \
                                              alpha},                                         \
        n, packed);                                                                           \
    return;
      TRIDENT_UNARY_OPS(TRIDENT_CUDA_UNARY_FORWARD)
#undef TRIDENT_CUDA_UNARY_FORWARD
    }
  });
}

void launch_unary_backward(const KernelContext& ctx, DType type, UnaryOp op, const void* x,
                           const void* y, const void* dy, void* dx, int64_t n, float alpha,
                           const void* dy_more) {
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const bool packed = packable<S>({x, y, dy, dy_more, dx});
    const S *xs = static_cast<const S*>(x), *ys = static_cast<const S*>(y),
            *dys = static_cast<const S*>(dy), *mores = static_cast<const S*>(dy_more);
    switch (op) {
#define TRIDENT_CUDA_UNARY_BACKWARD(name, module)                                           \
  case UnaryOp::name:                                                                       \
    launch_map<kPackOf<S>>(                                                                 \
        ctx,                                                                                \
        UnaryBackwardOp<S, UnaryOp::name>{xs, ys, dys, mores, static_cast<S*>(dx), alpha}, \
        n, packed);                                                                         \
    return;
      TRIDENT_UNARY_OPS(TRIDENT_CUDA_UNARY_BACKWARD)
#undef TRIDENT_CUDA_UNARY_BACKWARD
    }
  });
}

void launch_gemm_epilogue(const KernelContext& ctx, DType c_type, void* c, int64_t ldc,
                          int64_t m, int64_t n, const float* bias, BiasKind bias_kind,
                          UnaryOp activation, float activation_alpha, bool k_was_zero,
                          float beta) {
  if (m <= 0 || n <= 0) return;
  const int kind = bias == nullptr ? 0 : bias_kind == BiasKind::per_column ? 1
                                       : bias_kind == BiasKind::per_row    ? 2 : 0;
  const bool small = fits_int32(m * n);
  with_float_type(c_type, [&](auto tag) {
    using S = decltype(tag);
    switch (activation) {
#define TRIDENT_CUDA_EPILOGUE(name, module)                                                   \
  case UnaryOp::name:                                                                         \
    if (small)                                                                                \
      epilogue_as<S, int32_t, UnaryOp::name>(ctx, c, ldc, m, n, bias, kind, activation_alpha, \
                                             k_was_zero, beta);                               \
    else                                                                                      \
      epilogue_as<S, int64_t, UnaryOp::name>(ctx, c, ldc, m, n, bias, kind, activation_alpha, \
                                             k_was_zero, beta);                               \
    return;
      TRIDENT_UNARY_OPS(TRIDENT_CUDA_EPILOGUE)
#undef TRIDENT_CUDA_EPILOGUE
    }
  });
}

void launch_dropout(const KernelContext& ctx, DType type, const void* x, void* y, int64_t n,
                    int64_t group, int64_t group_offset, float p, float scale, uint64_t seed,
                    uint32_t rng_stream, const uint32_t* step_state) {
  if (n <= 0) return;
  // i / group for i < n: a group of n or more gives 0 everywhere, as a group of n does.
  const int64_t divisor = group < n ? group : n;
  with_float_type(type, [&](auto tag) {
    using S = decltype(tag);
    const S* xs = static_cast<const S*>(x);
    S* ys = static_cast<S*>(y);
    if (fits_int32(n))
      launch(ctx, dropout_kernel<S, int32_t>, grid_for(n), kBlockThreads, 0, xs, ys, int32_t(n),
             Divider<int32_t>(divisor), group_offset, p, scale, seed, rng_stream, step_state);
    else
      launch(ctx, dropout_kernel<S, int64_t>, grid_for(n), kBlockThreads, 0, xs, ys, n,
             Divider<int64_t>(divisor), group_offset, p, scale, seed, rng_stream, step_state);
  });
}

}  // namespace trident::cuda
