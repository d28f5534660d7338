// CUDA pieces of the batched im2col + GEMM convolution (backends/cuda/ops_conv2d.cpp drives the
// cuBLAS GEMMs): the fixed-order reduction of the per-sample weight and bias gradients, and the
// flipped kernel of a data gradient computed as a convolution.
#pragma once
#include <cstdint>

#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// dw_part is [samples, OC, columns] with columns = patch + 1 when bias_column (the last column
// is then the per-sample bias gradient), else patch; transposed: [samples, columns, OC]. dw[OC,
// patch] and db[OC] (unless null) = (accumulate ? themselves : 0) + the sums over the samples,
// in a fixed order. tap_major_channels > 0: dw_part's patch columns are (r, s, c), c fastest
// over that many channels (kernels/cuda/implicit_conv.cu's weight-gradient kernel), and are
// written to dw's (c, r, s) order.
void launch_conv_grad_reduce(const KernelContext& ctx, const float* dw_part, int64_t samples,
                             int64_t out_channels, int64_t patch, bool bias_column,
                             bool transposed, float* dw, float* db, bool accumulate,
                             int64_t tap_major_channels = 0);

// flipped[c, oc, t] = w[oc, c, taps - 1 - t] for w [OC, C, taps] (taps = KH * KW, t = kh * KW +
// kw; reversing t flips both axes): the weights of dx = conv(dy, flipped) for a stride-1
// convolution. element_bytes: 2 or 4 (the data is only moved).
void launch_conv_flip_weights(const KernelContext& ctx, int element_bytes, const void* w,
                              int64_t out_channels, int64_t channels, int64_t taps,
                              void* flipped);

}  // namespace trident::cuda
