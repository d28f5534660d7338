// Host-side launchers of Trident's own CUDA kernels (kernels/cuda/*.cu). Each queues one kernel
// on `stream` and returns; the caller checks cudaGetLastError. Sizes of zero queue nothing.
// Pointers are device pointers; shapes follow core/device.h.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "trident/core/device.h"

namespace trident::cuda {

// ---- elementwise.cu --------------------------------------------------------------------------
void launch_fill(cudaStream_t stream, float* dst, int64_t n, float value);
void launch_relu_forward(cudaStream_t stream, const float* x, float* y, int64_t n);
void launch_relu_backward(cudaStream_t stream, const float* y, const float* dy, float* dx,
                          int64_t n);
void launch_axpby(cudaStream_t stream, const float* x, float* y, int64_t n, float a, float b);
// C[m, n] (row stride ldc) = (k_was_zero ? beta * C : C) + bias, then ReLU. bias_kind as BiasKind.
void launch_gemm_epilogue(cudaStream_t stream, float* c, int64_t ldc, int64_t m, int64_t n,
                          const float* bias, BiasKind bias_kind, bool relu, bool k_was_zero,
                          float beta);
// y[i] = keep(group_offset + i / group) ? x[i] * scale : 0, keep as in core/philox.h.
void launch_dropout(cudaStream_t stream, const float* x, float* y, int64_t n, int64_t group,
                    int64_t group_offset, float p, float scale, uint64_t seed, uint32_t rng_stream,
                    const uint32_t* step_state);

// ---- reduce.cu -------------------------------------------------------------------------------
// db[cols] = beta * db + column sums of dy[rows, cols] (fixed order: deterministic).
void launch_sum_rows(cudaStream_t stream, const float* dy, int64_t rows, int64_t cols, float* db,
                     float beta);

// ---- softmax_nll.cu --------------------------------------------------------------------------
void launch_log_softmax_forward(cudaStream_t stream, const float* x, float* y, int64_t rows,
                                int64_t cols);
void launch_log_softmax_backward(cudaStream_t stream, const float* y, const float* dy, float* dx,
                                 int64_t rows, int64_t cols);
void launch_nll_loss_forward(cudaStream_t stream, const float* logp, const int32_t* labels,
                             int64_t rows, int64_t cols, float* loss, bool accumulate);
void launch_nll_loss_backward(cudaStream_t stream, const int32_t* labels, int64_t rows,
                              int64_t cols, float scale, float* dlogp);
// y = log_softmax(x); loss[0] (+)= NLL mean; dx = grad_scale * (exp(y) - onehot(labels)).
void launch_log_softmax_nll(cudaStream_t stream, const float* x, const int32_t* labels,
                            int64_t rows, int64_t cols, float grad_scale, float* y, float* loss,
                            bool accumulate, float* dx);
void launch_count_correct(cudaStream_t stream, const float* scores, const int32_t* labels,
                          int64_t rows, int64_t cols, float* correct);

// ---- pool2d.cu -------------------------------------------------------------------------------
void launch_maxpool2d_forward(cudaStream_t stream, const Pool2dShape& s, const float* x, float* y,
                              int32_t* argmax);
void launch_maxpool2d_backward(cudaStream_t stream, const Pool2dShape& s, const float* dy,
                               const int32_t* argmax, float* dx);

// ---- conv2d.cu -------------------------------------------------------------------------------
// The patch matrix col is [N, CKK + 1, OH*OW] (CKK = C*KH*KW): rows (c, kh, kw) of patches, then
// a row of ones (written only when ones_row), so that the per-sample weight-gradient GEMM
// dy_n[OC, OHW] col_n^T also yields the bias gradient as its last column.
size_t conv2d_col_floats(const Conv2dShape& s);
// Throws ShapeError when a conv2d index would not fit the kernels' 32-bit arithmetic.
void check_conv2d_fits(const Conv2dShape& s);
// col = patches of x[N, C, H, W] (and the ones row if ones_row); if bias is not null, also
// y[N, OC, OH*OW] = bias[oc], so that the forward GEMM adds into y with beta = 1.
void launch_im2col_bias_fill(cudaStream_t stream, const Conv2dShape& s, const float* x,
                             float* col, bool ones_row, const float* bias, float* y);
// dx[N, C, H, W] = sum of dcol (col layout, patch rows only) over the patches covering each pixel.
void launch_col2im(cudaStream_t stream, const Conv2dShape& s, const float* dcol, float* dx);
// dw_part is [N, OC, CKK + 1]: dw[OC, CKK] = sums over n of its first CKK columns, db[OC] (if
// not null) = sums over n of its last column. Fixed order: deterministic.
void launch_conv_grad_reduce(cudaStream_t stream, const Conv2dShape& s, const float* dw_part,
                             float* dw, float* db);

// ---- train.cu --------------------------------------------------------------------------------
void launch_gather_rows(cudaStream_t stream, const void* src, size_t row_bytes,
                        const int32_t* table, int64_t rows, const uint32_t* step_state,
                        void* dst);
void launch_advance_step(cudaStream_t stream, uint32_t* step_state);
void launch_sgd_update(cudaStream_t stream, float* params, const float* grads, float* momentum,
                       int64_t n, const SgdParams& hp);
void launch_adam_update(cudaStream_t stream, float* params, const float* grads, float* m,
                        float* v, int64_t n, const AdamParams& hp, const uint32_t* step_state);

}  // namespace trident::cuda
