// The default implementations of the Device's optional slots, built only from the public
// (required) ops, so that they run on any device. The base slots call them; tests call them
// directly on every backend to check them against the reference.
#pragma once
#include <cstddef>

#include "trident/core/device.h"

namespace trident::defaults {

// gemm without the epilogue, then channel_affine for the bias and unary_forward.
void gemm_fused(Device& device, const GemmArgs& args);
// One sample's columns: patch_size * OH * OW elements of s.dtype.
size_t conv2d_workspace_bytes(const Conv2dShape& s);
// Per sample: im2col, then y_n[OC, P] = W[OC, CKK] col[CKK, P]; the bias in one channel_affine.
void conv2d_forward(Device& device, const Conv2dShape& s, const Tensor& x, const Tensor& w,
                    const Tensor& b, const Tensor& y, const Tensor& workspace);
// db by channel_sums; per sample: im2col, dw (+)= dy_n col^T, dcol = W^T dy_n, dx_n = col2im.
void conv2d_backward(Device& device, const Conv2dShape& s, const Tensor& x, const Tensor& w,
                     const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                     const Tensor& workspace);
// log_softmax_forward, nll_loss_forward, nll_loss_backward into dx, log_softmax_backward in place.
void log_softmax_nll(Device& device, const Tensor& x, const Tensor& labels, float grad_scale,
                     float label_smoothing, const Tensor& y, const Tensor& loss, bool accumulate,
                     const Tensor& dx);

// y = x * factor[0] as a GEMM [n, 1] x [1, 1] (through float32 scratch when in place).
void scale(Device& device, const Tensor& x, const Tensor& factor, const Tensor& y);

}  // namespace trident::defaults
