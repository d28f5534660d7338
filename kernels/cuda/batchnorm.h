// CUDA batch normalisation over x viewed as [outer, channels, inner] (BatchNormShape): training
// statistics from sums shifted by a value near each channel's mean, merged in a fixed order
// (batchnorm.cu says why and how accurate), evaluation with running statistics,
// and the backward pass; all against core/device.h's batchnorm_forward / batchnorm_backward.
// x, y, dy and dx are of `type` (f32, f16 or bf16); parameters, statistics and every sum float32.
#pragma once
#include "trident/core/dtype.h"
#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// Training: batch mean and biased variance per channel, save_mean / save_invstd written, the
// running statistics updated, y normalised. Evaluation: y from the running statistics only.
// gamma / beta may be null (1 / 0); y may be x. residual (batchnorm_add_forward), unless null:
// y = normalised + residual. s.relu: then y = max(y, 0).
void launch_batchnorm_forward(const KernelContext& ctx, DType type, const BatchNormShape& s,
                              bool training, const void* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var,
                              void* y, float* save_mean, float* save_invstd,
                              const void* residual = nullptr);
// dx, and dgamma / dbeta unless null; gamma may be null; dx may be dy. s.relu: y is the
// forward's output (the fused ReLU's mask), else unused.
void launch_batchnorm_backward(const KernelContext& ctx, DType type, const BatchNormShape& s,
                               const void* x, const void* dy, const float* gamma,
                               const float* save_mean, const float* save_invstd, void* dx,
                               float* dgamma, float* dbeta, const float* beta);

}  // namespace trident::cuda
