// CUDA direct convolution forward for layers with few input channels (a network's first layer:
// 1 grey or 3 colour channels). There im2col + GEMM is a poor fit: the GEMM's K is C * KH * KW
// (9 for a 3x3 kernel over one channel), too short and, odd, too badly aligned for cuBLAS's fast
// kernels (the ResNet's stem at batch 256 in bf16 on an H100: 22 us of GEMM after 5 us of im2col,
// against a memory floor of ~4 us for its 12.8 MB output). Here a thread per output position
// (or per two adjacent ones) holds its patch (at most 32 values) in registers and writes every
// output channel of that position (NCHW: a warp's stores are one run per channel), the kernel
// broadcast from shared memory: 14 us for that layer. Any stride and padding; x, w and y of one
// float type (f32, bf16, f16), float32 arithmetic (a float32 layer is exact float32 whatever
// allow_tf32 says).
//
// The backward stays with im2col + cuBLAS (backends/cuda/ops_conv2d.cpp), whose weight-gradient
// GEMM over the positions is efficient (10 us for that layer): direct weight-gradient kernels
// tried here took 64 us (a block per slice of positions, merging its threads a few output
// channels at a time) and 83 us (a warp per sample and output channel).
#pragma once
#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// Whether the direct kernel takes s: C <= 4, C * KH * KW <= 32, OC * C * KH * KW (rounded) <=
// 8192 (the kernel in shared memory), indices within 32 bits.
bool direct_conv_fits(const Conv2dShape& s);

// y[N, OC, OH, OW] = conv(x, w) (+ bias[oc] where bias is not null).
void launch_direct_conv_forward(const KernelContext& ctx, const Conv2dShape& s, const void* x,
                                const void* w, const float* bias, void* y);

}  // namespace trident::cuda
