// CUDA pooling over NCHW planes (Pool2dShape: rectangular windows, any stride, padding): max
// pooling with its argmax and optional fused ReLU, average pooling (padding counted), both
// backward passes, and a warp-per-plane path for global average pooling. x, y, dy and dx are of
// `type` (f32, f16 or bf16; float32 sums, one rounding per output).
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// y and argmax [N, C, OH, OW]: the window maximum and the flat h * W + w of its first maximum in
// x's plane (a NaN wins, the last one of the window in row-major order); see Pool2dShape::relu.
void launch_maxpool2d_forward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                              const void* x, void* y, int32_t* argmax);
// dx[N, C, H, W] = dy summed at the argmax positions (entries outside the plane send nothing).
void launch_maxpool2d_backward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                               const void* dy, const int32_t* argmax, void* dx);
// y = window sum / (KH * KW); the backward spreads dy / (KH * KW) over each window.
void launch_avgpool2d_forward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                              const void* x, void* y);
void launch_avgpool2d_backward(const KernelContext& ctx, DType type, const Pool2dShape& s,
                               const void* dy, void* dx);

}  // namespace trident::cuda
