// CUDA classification head and losses over [rows, cols] scores with i32 labels [rows]: log-softmax
// forward and backward, NLL loss with label smoothing (forward and gradient), the fused training
// head, MSE against one-hot labels, and the count of correct predictions. A label outside
// [0, cols) skips its row (zeros where the row's gradient would go) and raises the error flag.
// Scores and their gradients are FloatData: each of any float type (computed in float32).
#pragma once
#include <cstdint>

#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

void launch_log_softmax_forward(const KernelContext& ctx, FloatData x, FloatData y, int64_t rows,
                                int64_t cols);
// dx = dy - exp(y) * sum(dy[r, :]); dx may be dy.
void launch_log_softmax_backward(const KernelContext& ctx, FloatData y, FloatData dy,
                                 FloatData dx, int64_t rows, int64_t cols);
// loss[0] = (accumulate ? loss[0] : 0) + mean over rows of -sum_c t[c] * logp[r, c], with the
// smoothed target t of core/device.h. One launch; the rows' sums are added in a fixed order.
void launch_nll_loss_forward(const KernelContext& ctx, FloatData logp, const int32_t* labels,
                             int64_t rows, int64_t cols, float* loss, bool accumulate,
                             float smoothing);
// dlogp[r, c] = -scale * t[c].
void launch_nll_loss_backward(const KernelContext& ctx, const int32_t* labels, int64_t rows,
                              int64_t cols, float scale, float smoothing, FloatData dlogp);
// y = log_softmax(x); loss as nll_loss_forward on y; dx = grad_scale * (exp(y) - t). One launch.
void launch_log_softmax_nll(const KernelContext& ctx, FloatData x, const int32_t* labels,
                            int64_t rows, int64_t cols, float grad_scale, float smoothing,
                            FloatData y, float* loss, bool accumulate, FloatData dx);
// loss[0] (+)= sum (x - onehot)^2 / (rows * cols); dx (unless null) = grad_scale * 2 *
// (x - onehot) / cols. One launch.
void launch_mse_loss(const KernelContext& ctx, FloatData x, const int32_t* labels, int64_t rows,
                     int64_t cols, float grad_scale, float* loss, bool accumulate, FloatData dx);
// correct[0] += rows whose first maximal score is at the label.
void launch_count_correct(const KernelContext& ctx, FloatData scores, const int32_t* labels,
                          int64_t rows, int64_t cols, float* correct);

}  // namespace trident::cuda
