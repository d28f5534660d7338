// CPU 2-D convolution (NCHW, any stride, zero padding) as im2col + sgemm per sample, samples
// split over the arena in `slots` contiguous pieces, each with its own slice of the workspace.
#pragma once
#include <cstddef>

#include "trident/core/op_types.h"

namespace trident::cpu {

// Workspace for up to `slots` pieces running at once (forward and backward share the layout).
size_t conv2d_workspace_bytes(const Conv2dShape& s, int slots);
// y[N, OC, OH, OW] = conv(x[N, C, H, W], w[OC, C, KH, KW]) + b[OC] (b may be null).
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y, void* workspace, int slots);
// dw[OC, C, KH, KW], and db[OC] and dx[N, C, H, W] when not null, from dy[N, OC, OH, OW].
// Partial sums of the pieces are combined in a fixed order: deterministic for given `slots`.
void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db, void* workspace, int slots);

}  // namespace trident::cpu
