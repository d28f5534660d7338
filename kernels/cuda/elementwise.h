// CUDA elementwise ops over flat buffers of one float type (f32, f16 or bf16, computed in float32
// and rounded once on the way out): fills, axpby, the unary family (forward and derivative), the
// GEMM epilogue (bias and any activation over a strided C) and Philox dropout.
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

void launch_fill_f32(const KernelContext& ctx, float* dst, int64_t n, float value);
void launch_fill_i32(const KernelContext& ctx, int32_t* dst, int64_t n, int32_t value);
// y = activation(a * x + b * y) (core/unary_math.h); b == 0: y is only written. x may be y. x
// and y of `type`.
void launch_axpby(const KernelContext& ctx, DType type, const void* x, void* y, int64_t n,
                  float a, float b, UnaryOp activation, float alpha);
// y = op(x) (core/unary_math.h); y may be x.
void launch_unary_forward(const KernelContext& ctx, DType type, UnaryOp op, const void* x,
                          void* y, int64_t n, float alpha);
// dx = (dy + dy_more) * op'(x) from x or y (the one the op does not read may be null), the sum
// in float32 (dy_more null: dy alone); dx may be dy.
void launch_unary_backward(const KernelContext& ctx, DType type, UnaryOp op, const void* x,
                           const void* y, const void* dy, void* dx, int64_t n, float alpha,
                           const void* dy_more = nullptr);
// c[m, n] (row stride ldc, of c_type) = activation((k_was_zero ? beta * c : c) + bias), the
// float32 bias per column (bias[n]) or per row (bias[m]) as bias_kind says, or none (null).
void launch_gemm_epilogue(const KernelContext& ctx, DType c_type, void* c, int64_t ldc,
                          int64_t m, int64_t n, const float* bias, BiasKind bias_kind,
                          UnaryOp activation, float activation_alpha, bool k_was_zero,
                          float beta);
// y[i] = keep(group_offset + i / group) ? x[i] * scale : 0, keep as in core/philox.h with the
// optimizer step read from step_state[1]; y may be x.
void launch_dropout(const KernelContext& ctx, DType type, const void* x, void* y, int64_t n,
                    int64_t group, int64_t group_offset, float p, float scale, uint64_t seed,
                    uint32_t rng_stream, const uint32_t* step_state);

}  // namespace trident::cuda
