// CPU max pooling (NCHW, no padding, floor) with the argmax the backward pass scatters through.
#pragma once
#include <cstdint>

#include "trident/core/device.h"

namespace trident::cpu {

// y[N, C, OH, OW] = window max; argmax = flat h*W+w of the max within x's plane. Ties go to the
// first element in row-major window order and NaN wins, as in PyTorch.
void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax);
// dx[N, C, H, W] = dy added at the argmax positions, zero elsewhere. Throws ShapeError for an
// argmax outside the plane (which would write outside dx).
void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx);

}  // namespace trident::cpu
