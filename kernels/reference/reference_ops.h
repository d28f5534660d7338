// Plain-loop reference versions of every Device op, on host pointers, that every backend is
// judged by: obvious loops, sums in double, the same names and argument order as the Device
// methods (tensors become pointers and explicit sizes).
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::reference {

// GemmArgs with host pointers in place of tensors; same fields, same meaning (strides filled).
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
  UnaryOp activation = UnaryOp::identity;
  float activation_alpha = 0.0f;
};

// ---- memory -----------------------------------------------------------------------------------
void fill(float* dst, int64_t count, float value);

// ---- linear algebra ---------------------------------------------------------------------------
void gemm(const HostGemmArgs& args);
// y = a * x + b * y (b == 0: y not read).
void axpby(const float* x, float* y, int64_t n, float a, float b);

// ---- elementwise ------------------------------------------------------------------------------
void unary_forward(UnaryOp op, const float* x, float* y, int64_t n, float alpha);
// x or y may be null where the op does not read it.
void unary_backward(UnaryOp op, const float* x, const float* y, const float* dy, float* dx,
                    int64_t n, float alpha);
// Inverted dropout with the Philox draw of core/philox.h; step_state is the host copy [2].
void dropout(const float* x, float* y, int64_t n, int64_t group, int64_t group_offset, float p,
             uint64_t seed, uint32_t stream, const uint32_t* step_state);
// Whether dropout keeps element i (the mask alone, for bit-exact comparisons).
bool dropout_keeps(int64_t i, int64_t group, int64_t group_offset, float p, uint64_t seed,
                   uint32_t stream, const uint32_t* step_state);

// ---- per-channel ------------------------------------------------------------------------------
void channel_affine(const float* x, const float* scale, const float* shift, float* y,
                    int64_t outer, int64_t channels, int64_t inner);
void channel_sums(const float* x, const float* y, float* out, int64_t outer, int64_t channels,
                  int64_t inner, float beta);
void sum_rows(const float* dy, int64_t rows, int64_t cols, float* db, float beta);

// ---- convolution (direct loops, no im2col: an independent check) -------------------------------
// y[N, OC, OH, OW] = conv(x[N, C, H, W], w[OC, C, KH, KW]) + b[OC] (b may be null).
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y);
// dw, and db and dx unless null.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db);
// One sample's patch matrix and its adjoint (Device::im2col / col2im).
void im2col(const Conv2dShape& s, const float* x, float* col);
void col2im(const Conv2dShape& s, const float* col, float* dx);

// ---- pooling and normalisation -------------------------------------------------------------------
// argmax holds the flat h*W+w index of the first maximum of each window in its input plane.
void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax);
void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx);
void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y);
void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx);
void batchnorm_forward(const BatchNormShape& s, bool training, const float* x, const float* gamma,
                       const float* beta, float* running_mean, float* running_var, float* y,
                       float* save_mean, float* save_invstd);
// s.relu: the gradient passes where the forward's output, recomputed from x, gamma, beta and
// the saved statistics, is positive (beta null: 0).
void batchnorm_backward(const BatchNormShape& s, const float* x, const float* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd,
                        float* dx, float* dgamma, float* dbeta, const float* beta = nullptr);

// ---- losses and the classification head -----------------------------------------------------------
void log_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols);
void log_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols);
void nll_loss_forward(const float* logp, const int32_t* labels, int64_t rows, int64_t cols,
                      float* loss, bool accumulate, float label_smoothing = 0.0f);
void nll_loss_backward(const int32_t* labels, int64_t rows, int64_t cols, float scale,
                       float* dlogp, float label_smoothing = 0.0f);
// log_softmax_forward, nll_loss_forward, then dx = grad_scale * (exp(y) - t).
void log_softmax_nll(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
                     float grad_scale, float label_smoothing, float* y, float* loss,
                     bool accumulate, float* dx);
void mse_loss(const float* x, const int32_t* labels, int64_t rows, int64_t cols,
              float grad_scale, float* loss, bool accumulate, float* dx);
void count_correct(const float* scores, const int32_t* labels, int64_t rows, int64_t cols,
                   float* correct);

// ---- data and optimizer -----------------------------------------------------------------------
void gather_rows(const void* src, size_t row_bytes, const int32_t* table, int64_t rows,
                 const uint32_t* step_state, void* dst);
// SampleTransform with host arrays (mean / inv_std may be null).
struct HostSampleTransform {
  float scale = 1.0f;
  const float* mean = nullptr;
  const float* inv_std = nullptr;
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  uint64_t seed = 0;
  uint32_t stream = 0;
  int64_t sample_offset = 0;
};
// src: count samples of [C, H, W], u8 when src_is_u8 else f32; dst f32 [rows, C, H, W].
void gather_samples(const void* src, bool src_is_u8, int64_t channels, int64_t height,
                    int64_t width, const int32_t* table, int64_t rows,
                    const uint32_t* step_state, const HostSampleTransform& t, float* dst);
void advance_step(uint32_t* step_state);
// UpdateControl with host arrays: schedule [rows, 2] (null: none), grad_sumsq (null: no clip;
// max_norm 0: only read for the loss scale's overflow check), loss_scale [1] (null: none; else
// the gradients are divided by it, and a non-finite grad_sumsq skips the update).
struct HostUpdateControl {
  const float* schedule = nullptr;
  int64_t schedule_rows = 0;
  const float* grad_sumsq = nullptr;
  float max_norm = 0.0f;
  const float* loss_scale = nullptr;
};
void sgd_update(float* params, const float* grads, float* momentum, int64_t n,
                const SgdParams& hp, const HostUpdateControl& control = {},
                const uint32_t* step_state = nullptr);
void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, const uint32_t* step_state,
                 const HostUpdateControl& control = {});
// GradScaler's update of state {scale, clean steps} after a step (see LossScaleParams).
void update_loss_scale(float* state, float grad_sumsq, const LossScaleParams& params);

}  // namespace trident::reference
