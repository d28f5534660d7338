// CPU classification head and losses: log-softmax, negative log-likelihood (with label
// smoothing), the fused cross-entropy head, MSE against one-hot labels, and the accuracy count.
// t[c] = (1 - e) * (c == label) + e / cols is a row's target distribution (Device::nll_loss_*).
#pragma once
#include <cstdint>

namespace trident::cpu {

// y[r, :] = x[r, :] - logsumexp(x[r, :]); the row max is subtracted first, sums in double.
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols);
// dx = dy - exp(y) * sum(dy[r, :]); dx may alias dy.
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);
// loss[0] = (accumulate ? loss[0] : 0) + mean over rows of -sum_c t[c] logp[r, c].
// Every op here throws ShapeError for a label outside [0, cols) before writing anything.
void nll_loss_forward(const float* logp, const int32_t* labels, int64_t rows, int64_t cols,
                      float* loss, bool accumulate, float smoothing);
// dlogp[r, c] = -scale * t[c].
void nll_loss_backward(const int32_t* labels, int64_t rows, int64_t cols, float scale,
                       float* dlogp, float smoothing);
// The fused training head (Device::log_softmax_nll): y = log_softmax(x), the loss as
// nll_loss_forward, dx = grad_scale * (exp(y) - t).
void log_softmax_nll(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
                     float grad_scale, float smoothing, float* y, float* loss, bool accumulate,
                     float* dx);
// loss[0] (+)= sum (x - onehot)^2 / (rows * cols); dx = grad_scale * 2 (x - onehot) / cols
// unless dx is null.
void mse_loss(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
              float grad_scale, float* loss, bool accumulate, float* dx);
// correct[0] += rows whose first maximal score is at labels[r].
void count_correct(const float* scores, const int32_t* labels, int64_t rows, int64_t cols,
                   float* correct);

}  // namespace trident::cpu
