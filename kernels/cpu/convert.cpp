// CPU dtype conversion: the scalar formulas of core/half.h (bit-identical to every backend's),
// with F16C for float16 where available; split over the arena when large.
#include "trident/kernels/cpu/convert.h"

#include <cstring>

#include "trident/core/half.h"
#include "trident/kernels/cpu/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TRIDENT_CPU_X86 1
#endif

namespace trident::cpu {
namespace {

float load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::u8: return static_cast<float>(static_cast<const uint8_t*>(p)[i]);
    default: return half_bits_to_float(t, static_cast<const uint16_t*>(p)[i]);
  }
}

void store(void* p, DType t, int64_t i, float v) {
  if (t == DType::f32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<uint16_t*>(p)[i] = float_to_half_bits(t, v);
}

#ifdef TRIDENT_CPU_X86
// F16C converts 8 values per instruction, rounding to nearest even (imm 0) like float_to_f16.
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* s, uint16_t* d,
                                                         int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 8 <= e; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < e; ++i) d[i] = float_to_f16(s[i]);
}
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* s, float* d,
                                                         int64_t b, int64_t e) {
  int64_t i = b;
  for (; i + 8 <= e; i += 8)
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < e; ++i) d[i] = f16_to_float(s[i]);
}
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}
#endif

}  // namespace

void convert(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  if (src_type == dst_type) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_type));
    return;
  }
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
#ifdef TRIDENT_CPU_X86
    if (has_f16c() && src_type == DType::f32 && dst_type == DType::f16)
      return f32_to_f16_f16c(static_cast<const float*>(src), static_cast<uint16_t*>(dst), b, e);
    if (has_f16c() && src_type == DType::f16 && dst_type == DType::f32)
      return f16_to_f32_f16c(static_cast<const uint16_t*>(src), static_cast<float*>(dst), b, e);
#endif
    if (src_type == DType::f32 && dst_type == DType::bf16) {  // the common case, vectorisable
      const float* s = static_cast<const float*>(src);
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = b; i < e; ++i) d[i] = float_to_bf16(s[i]);
      return;
    }
    if (src_type == DType::bf16 && dst_type == DType::f32) {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      float* d = static_cast<float*>(dst);
      for (int64_t i = b; i < e; ++i) d[i] = bf16_to_float(s[i]);
      return;
    }
    for (int64_t i = b; i < e; ++i) store(dst, dst_type, i, load(src, src_type, i));
  });
}

}  // namespace trident::cpu
