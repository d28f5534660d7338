// Patch matrices of one sample for the convolution GEMMs (NCHW, any stride, zero padding).
#pragma once
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// col[C*KH*KW, OH*OW]: row (c, kh, kw) holds x[c, oh*SH - PH + kh, ow*SW - PW + kw] (0 outside).
// The forward GEMM reads it in place as its [K, N] operand. ld: the rows' stride (0: OH*OW), so
// that several samples' patch matrices can sit side by side as one wider matrix.
void im2col(const Conv2dShape& s, const float* x, float* col, int64_t ld = 0);
// The same for bfloat16 (or any 16-bit) bit patterns.
void im2col(const Conv2dShape& s, const uint16_t* x, uint16_t* col, int64_t ld = 0);
// dx[C, H, W] = sum of col[C*KH*KW, OH*OW] (rows ld apart; 0: OH*OW) scattered back to the input
// positions (overwrites dx).
void col2im(const Conv2dShape& s, const float* col, float* dx, int64_t ld = 0);

}  // namespace trident::cpu
