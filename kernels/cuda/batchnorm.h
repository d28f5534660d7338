// CUDA batch normalisation over x viewed as [outer, channels, inner] (BatchNormShape): training
// statistics by Welford's method merged in a fixed order, evaluation with running statistics,
// and the backward pass; all against core/device.h's batchnorm_forward / batchnorm_backward.
#pragma once
#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// Training: batch mean and biased variance per channel, save_mean / save_invstd written, the
// running statistics updated, y normalised. Evaluation: y from the running statistics only.
// gamma / beta may be null (1 / 0); y may be x.
void launch_batchnorm_forward(const KernelContext& ctx, const BatchNormShape& s, bool training,
                              const float* x, const float* gamma, const float* beta,
                              float* running_mean, float* running_var, float* y,
                              float* save_mean, float* save_invstd);
// dx, and dgamma / dbeta unless null; gamma may be null; dx may be dy.
void launch_batchnorm_backward(const KernelContext& ctx, const BatchNormShape& s, const float* x,
                               const float* dy, const float* gamma, const float* save_mean,
                               const float* save_invstd, float* dx, float* dgamma,
                               float* dbeta);

}  // namespace trident::cuda
