// CUDA per-channel ops over x viewed as [outer, channels, inner]: the affine map (bias adds, the
// default GEMM epilogue) and deterministic channel sums (bias gradients, gradient norms). x and y
// are of `type` (f32, f16 or bf16; float32 arithmetic); scale, shift and out are float32.
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// y = x * scale[c] + shift[c] (scale or shift null: 1 or 0); y may be x.
void launch_channel_affine(const KernelContext& ctx, DType type, const void* x,
                           const float* scale, const float* shift, void* y, int64_t outer,
                           int64_t channels, int64_t inner);
// out[c] = beta * out[c] + sum over outer and inner of x (times y when y is not null); beta == 0:
// out is not read. Float sums of at most ~64 values per thread, merged in double in a fixed
// order: deterministic, ~1e-7 relative; fast for many channels and for one very long run.
void launch_channel_sums(const KernelContext& ctx, DType type, const void* x, const void* y,
                         float* out, int64_t outer, int64_t channels, int64_t inner, float beta);

}  // namespace trident::cuda
