// CPU 2-D convolution (NCHW, any stride, zero padding) as im2col + GEMM, several samples per
// GEMM where the planes are small; samples split over the arena in `slots` contiguous pieces,
// each with its own slice of the workspace.
// float32 on sgemm (3x3 stride-1 layers of 16 channels or more over 100 positions or more:
// forward and both gradients by Winograd's minimal filtering, kernels/cpu/winograd.h); bfloat16 (x, w, y, dy, dx as bit patterns; dw, db float32) on gemm_bf16,
// only where cpu_has_avx512_bf16().
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// Workspace for up to `slots` pieces running at once (forward and backward share the layout;
// s.dtype f32 or bf16 picks it).
size_t conv2d_workspace_bytes(const Conv2dShape& s, int slots);
// y[N, OC, OH, OW] = conv(x[N, C, H, W], w[OC, C, KH, KW]) + b[OC] (b may be null).
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y, void* workspace, int slots);
// dw[OC, C, KH, KW], and db[OC] and dx[N, C, H, W] when not null, from dy[N, OC, OH, OW].
// Partial sums of the pieces are combined in a fixed order: deterministic for given `slots`.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db, void* workspace, int slots);

// The bfloat16 forms: products exact in float, sums in float; y and dx rounded once.
void conv2d_forward(const Conv2dShape& s, const uint16_t* x, const uint16_t* w, const float* b,
                    uint16_t* y, void* workspace, int slots);
void conv2d_backward(const Conv2dShape& s, const uint16_t* x, const uint16_t* w,
                     const uint16_t* dy, uint16_t* dx, float* dw, float* db, void* workspace,
                     int slots);

}  // namespace trident::cpu
