// CPU dtype conversion between float32, float16, bfloat16 (and from uint8), rounding to nearest
// even; float16 through the F16C instructions where the CPU has them (checked at run time).
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"

namespace trident::cpu {

// dst[i] = src[i] in dst_type; src_type f32, f16, bf16 or u8; dst_type f32, f16 or bf16.
void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);

}  // namespace trident::cpu
