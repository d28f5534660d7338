// CUDA implicit-GEMM convolution on tensor cores (bf16 and f16 with float32 accumulation; float32
// rounded to TF32 where allow_tf32) for convolutions whose channel counts are multiples of 32:
// the patch matrix is
// gathered tile by tile into shared memory instead of being written out by im2col (9x the
// activations for a 3x3 kernel) and read back by a GEMM, and col2im disappears.
//
// The gathered operand is read channels-last (NHWC), where a patch row's 32 channels at one
// position are 64 contiguous bytes: one 16-byte load per 8 channels and one bounds check per
// position and tap. So x and dy are first transposed to NHWC (one pass over the activations,
// against im2col's nine), and the kernel to [OC, KH, KW, C] (forward) or flipped to
// [C, KH, KW, OC] (data gradient). Results are written NCHW.
//   forward:         y[N, OC, OH, OW] = conv(x, w) (+ bias);
//   data gradient:   dx = the forward's product run on dy with the flipped kernel, padding
//                    KH-1-PH and KW-1-PW; with a stride S, S x S such products, one per phase
//                    of dx's positions (those a given set of taps reaches), each with its share
//                    of the taps, written at stride S (implicit_conv.cu, data_gradient);
//   weight gradient: dw[OC, C*KH*KW] = sum over positions of dy times the gathered x, split over
//                    slices of the positions into float32 partials that a fixed-order reduction
//                    sums (launch_conv_grad_reduce).
// On an H100 or H200 the forward and data-gradient products go to the warpgroup-multiply
// kernels (kernels/cuda/wgmma_conv.h), 16-bit and TF32, save those of up to 32 output channels or
// 32 input channels that the halo-window kernels below take; so do 16-bit weight gradients with
// channels in 64s and more than 32 output channels. Elsewhere the 16-bit forward and
// data-gradient products go to kernels/cuda/halo_conv.h's halo-window kernels where those take
// the shape (up to 64 output channels, a row within a block's positions), else to the
// tile-per-step gather kernel here; so does a 16-bit 3x3 kernel's weight gradient (its slices are
// then the halo kernel's blocks). Needs sm_80 or later code in the binary
// (implicit_conv_available()).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// Whether this build has the kernels for the current device.
bool implicit_conv_available();
// Whether these kernels can run s: C and OC multiples of 32, s.dtype bf16 or f16 (or f32 with
// allow_tf32), offsets within 32 bits.
bool implicit_conv_fits(const Conv2dShape& s);

// Workspace layout: x in NHWC, dy in NHWC, the kernel rearranged for the forward and flipped (in
// phases, when strided) for the data gradient, the weight-gradient partials.
struct ImplicitConvWorkspace {
  size_t x_t = 0, dy_t = 0, w_t = 0, w_flip = 0, partials = 0, bytes = 0;  // byte offsets; total
  int64_t splits = 1;  // slices of the positions the weight gradient is split over
};
// A function of the shape, the SM count and whether the device runs the warpgroup-multiply
// kernels (KernelContext::warpgroup_mma) only, so results do not depend on timing.
ImplicitConvWorkspace implicit_conv_workspace(int sms, const Conv2dShape& s, bool warpgroup_mma);

// y from x (NCHW); leaves x in NHWC at ws.x_t and the flipped kernel at ws.w_flip, which the
// backward may reuse.
void launch_implicit_conv_forward(const KernelContext& ctx, const Conv2dShape& s, const void* x,
                                  const void* w, const float* bias, void* y, char* workspace);
// dw (float32, overwritten) and, when dx is not null, dx. x_t_valid: the workspace still holds x
// in NHWC and the flipped kernel from the forward. The NHWC transposes go on ctx's stream; then
// fork() is called (unless empty) and dw's kernels go on weight_ctx's stream, dx's on ctx's:
// with weight_ctx on another stream that fork() made wait for ctx's, the two run side by side.
void launch_implicit_conv_backward(const KernelContext& ctx, const KernelContext& weight_ctx,
                                   const std::function<void()>& fork, const Conv2dShape& s,
                                   const void* x, const void* w, const void* dy, void* dx,
                                   float* dw, char* workspace, bool x_t_valid);

}  // namespace trident::cuda
