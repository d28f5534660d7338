// CPU classification head: log-softmax, negative log-likelihood and the accuracy count.
#pragma once
#include <cstdint>

namespace trident::cpu {

// y[r, :] = x[r, :] - logsumexp(x[r, :]); the row max is subtracted first, sums in double.
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols);
// dx = dy - exp(y) * sum(dy[r, :]).
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);
// loss[0] = (accumulate ? loss[0] : 0) + mean over rows of -logp[r, labels[r]].
// Throws ShapeError for a label outside [0, cols).
void nll_loss_forward(const float* logp, const int32_t* labels, int64_t rows, int64_t cols,
                      float* loss, bool accumulate);
// dlogp[r, c] = (c == labels[r]) ? -scale : 0. Throws ShapeError for a label outside [0, cols).
void nll_loss_backward(const int32_t* labels, int64_t rows, int64_t cols, float scale,
                       float* dlogp);
// The fused training head (Device::log_softmax_nll): y = log_softmax(x), the NLL mean added
// to loss[0] (or stored), dx = grad_scale * (exp(y) - onehot). Throws ShapeError for a label
// outside [0, cols) before writing anything.
void log_softmax_nll(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
                     float grad_scale, float* y, float* loss, bool accumulate, float* dx);
// correct[0] += rows whose first maximal score is at labels[r].
void count_correct(const float* scores, const int32_t* labels, int64_t rows, int64_t cols,
                   float* correct);

}  // namespace trident::cpu
