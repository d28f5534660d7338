// Plain-loop reference versions of every Device op, on host pointers, that every backend is
// judged by: obvious loops, sums in double, the same argument order as the Device methods.
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/core/device.h"

namespace trident::reference {

// GemmArgs with host pointers in place of DeviceMemory; same fields, same meaning.
struct HostGemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
  int64_t lda = 0, ldb = 0, ldc = 0;
  const float* bias = nullptr;  // null: no bias
  BiasKind bias_kind = BiasKind::none;
  bool relu = false;
};

// ---- memory -----------------------------------------------------------------------------------
void fill(float* dst, int64_t count, float value);

// ---- linear algebra ---------------------------------------------------------------------------
void gemm(const HostGemmArgs& args);
// db[cols] = beta * db + sum over rows of dy[rows, cols].
void sum_rows(const float* dy, int64_t rows, int64_t cols, float* db, float beta);
// y = a * x + b * y.
void axpby(const float* x, float* y, int64_t n, float a, float b);

// ---- elementwise ------------------------------------------------------------------------------
void relu_forward(const float* x, float* y, int64_t n);
void relu_backward(const float* y, const float* dy, float* dx, int64_t n);
// Inverted dropout with the Philox draw of core/philox.h; step_state is the host copy [2].
void dropout(const float* x, float* y, int64_t n, int64_t group, int64_t group_offset, float p,
             uint64_t seed, uint32_t stream, const uint32_t* step_state);
// Whether dropout keeps element i (the mask alone, for bit-exact comparisons).
bool dropout_keeps(int64_t i, int64_t group, int64_t group_offset, float p, uint64_t seed,
                   uint32_t stream, const uint32_t* step_state);

// ---- convolution and pooling (direct loops, no im2col: an independent check) -------------------
// y[N, OC, OH, OW] = conv(x[N, C, H, W], w[OC, C, KH, KW]) + b[OC].
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y);
// dw, db, and dx unless dx is null.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db);
// argmax holds the flat h*W+w index of the first maximum of each window in its input plane.
void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax);
void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx);

// ---- classification head ----------------------------------------------------------------------
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols);
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);
void nll_loss_forward(const float* logp, const int32_t* labels, int64_t rows, int64_t cols,
                      float* loss, bool accumulate);
void nll_loss_backward(const int32_t* labels, int64_t rows, int64_t cols, float scale,
                       float* dlogp);
// log_softmax_forward, nll_loss_forward, then dx = grad_scale * (exp(y) - onehot(labels)).
void log_softmax_nll(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
                     float grad_scale, float* y, float* loss, bool accumulate, float* dx);
void count_correct(const float* scores, const int32_t* labels, int64_t rows, int64_t cols,
                   float* correct);

// ---- data and optimizer -----------------------------------------------------------------------
void gather_rows(const void* src, size_t row_bytes, const int32_t* table, int64_t rows,
                 const uint32_t* step_state, void* dst);
void advance_step(uint32_t* step_state);
void sgd_update(float* params, const float* grads, float* momentum, int64_t n,
                const SgdParams& hp);
void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, const uint32_t* step_state);

}  // namespace trident::reference
