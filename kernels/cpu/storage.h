// The element types the CPU kernels store: float32, and bfloat16 as bit patterns (uint16_t)
// that every kernel widens to float, computes on in float, and rounds once when it stores
// (to nearest even, core/half.h) -- the same values the staged float32 path gives, bit for bit.
#pragma once
#include <cstdint>

#include "trident/core/half.h"

namespace trident::cpu {

inline float load_value(const float* p, int64_t i) { return p[i]; }
inline float load_value(const uint16_t* p, int64_t i) { return bf16_to_float(p[i]); }
inline void store_value(float* p, int64_t i, float v) { p[i] = v; }
inline void store_value(uint16_t* p, int64_t i, float v) { p[i] = float_to_bf16(v); }

}  // namespace trident::cpu
