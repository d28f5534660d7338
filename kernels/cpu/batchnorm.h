// CPU batch normalisation over x viewed as [outer, channels, inner] (see BatchNormShape).
#pragma once
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// Training: batch mean and biased variance per channel (two passes, in double), y, save_mean,
// save_invstd, and the running statistics updated (unbiased variance). Evaluation: y from the
// running statistics. gamma / beta may be null (1 / 0). x, y (dy, dx) float32 or bfloat16 bits;
// statistics and parameters float32. residual (batchnorm_add_forward), unless null: y =
// normalised + residual, then the ReLU if s.relu.
void batchnorm_forward(const BatchNormShape& s, bool training, const float* x, const float* gamma,
                       const float* beta, float* running_mean, float* running_var, float* y,
                       float* save_mean, float* save_invstd, const float* residual = nullptr);
void batchnorm_forward(const BatchNormShape& s, bool training, const uint16_t* x,
                       const float* gamma, const float* beta, float* running_mean,
                       float* running_var, uint16_t* y, float* save_mean, float* save_invstd,
                       const uint16_t* residual = nullptr);
// dx = gamma * invstd / n * (n * dy - sum(dy) - xhat * sum(dy * xhat)), n = outer * inner;
// dgamma = sum(dy * xhat), dbeta = sum(dy) (each unless null). s.relu: dy taken as 0 where the
// forward's output, recomputed from x, gamma, beta and the saved statistics, is not > 0 (beta is
// unused otherwise). y = max(.., 0) in the forward then.
void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd,
                        float* dx, float* dgamma, float* dbeta, const float* beta = nullptr);
void batchnorm_backward(const BatchNormShape& s, const uint16_t* x, const uint16_t* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd,
                        uint16_t* dx, float* dgamma, float* dbeta,
                        const float* beta = nullptr);

}  // namespace trident::cpu
