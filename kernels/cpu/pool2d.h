// CPU pooling (NCHW, any window, stride and padding, floor): max with the argmax its backward
// scatters through, and average (padding counted in the divisor). Each for float32 and for
// bfloat16 bits (uint16_t: compared and summed in float, rounded once; storage.h).
#pragma once
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// y[N, C, OH, OW] = window max; argmax = flat h*W+w of the max within x's plane. Ties go to the
// first element in row-major window order and NaN wins, as in PyTorch; padding never wins.
void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax);
void maxpool2d_forward(const Pool2dShape& s, const uint16_t* x, uint16_t* y, int32_t* argmax);
// dx[N, C, H, W] = dy added at the argmax positions, zero elsewhere. Throws ShapeError for an
// argmax outside the plane (which would write outside dx).
void maxpool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx);
void maxpool2d_backward(const Pool2dShape& s, const uint16_t* dy, const int32_t* argmax,
                        uint16_t* dx);
// y = sum of the window's valid inputs / (kernel_h * kernel_w).
void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y);
void avgpool2d_forward(const Pool2dShape& s, const uint16_t* x, uint16_t* y);
// dx = each window's dy / (kernel_h * kernel_w) added over the window's valid inputs.
void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx);
void avgpool2d_backward(const Pool2dShape& s, const uint16_t* dy, uint16_t* dx);

}  // namespace trident::cpu
