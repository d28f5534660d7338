// The 16-bit float formats as raw bits: bfloat16 (8-bit exponent, 7-bit mantissa) and IEEE
// binary16 (5-bit exponent, 10-bit mantissa), converted to and from float32 with round to
// nearest even, NaN kept NaN, overflow to infinity. Host and CUDA (TRIDENT_HD) share them, so
// that every backend and the reference round alike.
#pragma once
#include <cstdint>
#include <cstring>

#include "trident/core/dtype.h"
#include "trident/core/philox.h"  // TRIDENT_HD

namespace trident {

TRIDENT_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TRIDENT_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

TRIDENT_HD uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

TRIDENT_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

TRIDENT_HD uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (magnitude < 0x38800000u) {  // below the smallest normal half: a subnormal (or zero)
    if (magnitude < 0x33000000u) return static_cast<uint16_t>(sign);  // under half the smallest
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14 + (113 - exponent): places the 24-bit mantissa
    const uint32_t kept = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half_way = 1u << (shift - 1u);
    const uint32_t rounded = kept + ((rest > half_way || (rest == half_way && (kept & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | rounded);
  }
  const uint32_t rebased = magnitude - (112u << 23);  // exponent 127 -> 15
  const uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebased + rounding) >> 13));
}

TRIDENT_HD float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // A subnormal: mantissa * 2^-24, exact in float.
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -value : value;
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// The value of a 16-bit element of dtype t (f16 or bf16) as float, and back.
TRIDENT_HD float half_bits_to_float(DType t, uint16_t h) {
  return t == DType::bf16 ? bf16_to_float(h) : f16_to_float(h);
}
TRIDENT_HD uint16_t float_to_half_bits(DType t, float f) {
  return t == DType::bf16 ? float_to_bf16(f) : float_to_f16(f);
}

// Whether t is one of the 16-bit float types.
TRIDENT_HD bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }
TRIDENT_HD bool is_float(DType t) { return t == DType::f32 || is_half(t); }

// The unit roundoff of a float type (half the distance from 1 to the next value): the relative
// error of one rounding, which the conformance tolerances are built from.
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::bf16: return 1.0 / 256.0;     // 2^-8
    case DType::f16: return 1.0 / 2048.0;     // 2^-11
    default: return 1.0 / 16777216.0;         // 2^-24
  }
}

}  // namespace trident
