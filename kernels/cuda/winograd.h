// CUDA float32 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, 2015;
// kernels/cpu/winograd.h has the algebra): a 3x3 kernel at stride 1 gives each 2x2 block of
// outputs from a 4x4 block of inputs with 16 multiplications instead of 36, so the products
// shrink 2.25x; the transforms around them are additions. backends/cuda/ops_conv2d_winograd.cpp
// drives these kernels, each of which transforms its operands in shared memory (no Winograd-
// domain array goes through global memory):
//   forward and data gradient (a convolution of dy with the flipped kernel, padding 2 - P):
//     U = the kernel's transform (launch_winograd_kernel), then launch_winograd_conv;
//   weight gradient, F(3x3, 2x2) on the same 4x4 input blocks: dw = G^T [sum over tiles
//     (A e A^T) . (B^T d B)] G for dy's 2x2 block e and x's 4x4 block d
//     (launch_winograd_weight_gradient_fused: partial sums per slice of the tiles, then
//     launch_winograd_slices_to_weights adds them in order).
#pragma once
#include <cstdint>

#include "trident/core/op_types.h"
#include "trident/core/winograd_plan.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// U[xi][c][o] = (G k G^T)[xi] for the kernel k of output channel o and input channel c: w[o,
// c] (w [OC, C, 3, 3]), or, when flipped (for a data gradient: its output channels are the
// forward's input ones, channels = the forward's OC), w[c, o] turned by 180 degrees.
void launch_winograd_kernel(const KernelContext& ctx, int64_t channels, int64_t out_channels,
                            const float* w, bool flipped, float* U);
// y [N, OC, OH, OW] = conv(x [N, C, H, W], the kernel whose transform is U) (+ bias[o] unless
// null) for s (3x3, stride 1, padding 0-2; s.dtype and s.allow_tf32 are not read).
void launch_winograd_conv(const KernelContext& ctx, const Conv2dShape& s, const float* x,
                          const float* U, const float* bias, float* y);
// The slices of launch_winograd_weight_gradient_fused (passes of 16 tiles).
inline WinogradSlices winograd_slices(const Conv2dShape& s) { return WinogradSlices(s, 16); }
// dw [OC, C, 3, 3] of s from x and dy, F(3x3, 2x2) in one kernel over the slices (both
// transforms in shared memory), then launch_winograd_slices_to_weights; partial holds
// winograd_slices(s).partial_elements(s) floats.
void launch_winograd_weight_gradient_fused(const KernelContext& ctx, const Conv2dShape& s,
                                           const float* x, const float* dy, float* partial,
                                           float* dw);
// dw [OC, C, 3, 3] = G^T m G, m the sum over the slices of partial[slice][xi][o][i] in order.
void launch_winograd_slices_to_weights(const KernelContext& ctx, int64_t out_channels,
                                       int64_t channels, int64_t slices, const float* partial,
                                       float* dw);

}  // namespace trident::cuda
