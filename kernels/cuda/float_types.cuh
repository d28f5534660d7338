// The float storage types of CUDA kernels: float, Bf16 and F16 (16-bit words), read into float
// and rounded back with core/half.h's conversions (round to nearest even, NaN kept NaN), so that
// a CUDA kernel rounds exactly as the CPU's float32 staging does. Kernels are templates on the
// storage type S; with_float_type() turns a tensor's DType into that template argument on the
// host. Pack<S, V> is V elements read or written as one access (16 bytes: 8 halves or 4 floats),
// and AnyFloat is a pointer whose type is known only at run time (small kernels of mixed types).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "trident/core/dtype.h"
#include "trident/core/half.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

__host__ __device__ __forceinline__ float to_float(float v) { return v; }
__host__ __device__ __forceinline__ float to_float(Bf16 v) { return bf16_to_float(v.bits); }
// Device code converts f16 with the hardware's cvt (exact one way, round to nearest even the
// other, as core/half.h) instead of core/half.h's integer formulas, which made memory-bound f16
// kernels compute-bound (about 1.5x slower than their bf16 twins on an H100). NaNs, where cvt
// gives its canonical NaN, get core/half.h's bits by a select, not a branch to core/half.h: a
// branch after each load kept the next load from being issued (fp16 7x7 batch-norm gradients,
// one value a load, took 1.6-2.5x their bf16 time on an H100).
__host__ __device__ __forceinline__ float to_float(F16 v) {
#ifdef __CUDA_ARCH__
  const float f = __half2float(__ushort_as_half(v.bits));
  const uint32_t nan = (uint32_t(v.bits & 0x8000u) << 16) | 0x7f800000u |
                       (uint32_t(v.bits & 0x3ffu) << 13);  // f16_to_float's NaN
  return f == f ? f : __uint_as_float(nan);
#else
  return f16_to_float(v.bits);
#endif
}
__host__ __device__ __forceinline__ float to_float(uint8_t v) { return float(v); }

template <typename S>
__host__ __device__ __forceinline__ S from_float(float v);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__host__ __device__ __forceinline__ Bf16 from_float<Bf16>(float v) { return {float_to_bf16(v)}; }
template <>
__host__ __device__ __forceinline__ F16 from_float<F16>(float v) {
#ifdef __CUDA_ARCH__
  const uint16_t nan = uint16_t(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7e00u);  // as half.h
  const uint16_t h = __half_as_ushort(__float2half_rn(v));
  return {v != v ? nan : h};
#else
  return {float_to_f16(v)};
#endif
}

// V elements of S as one aligned access (two 16-byte accesses for 8 floats).
template <typename S, int V>
struct alignas(sizeof(S) * V < 16 ? sizeof(S) * V : 16) Pack {
  S v[V];
};

// Elements per 16-byte access of S.
template <typename S>
constexpr int kPackOf = int(16 / sizeof(S));

// Whether either f16 of a 32-bit word is a NaN: its magnitude bits above 0x7c00, i.e. their sum
// with 0x3ff reaching bit 15 (no carry crosses into the other half).
__device__ __forceinline__ bool f16x2_has_nan(uint32_t word) {
  return (((word & 0x7fff7fffu) + 0x03ff03ffu) & 0x80008000u) != 0u;
}

// Loads V floats from p[at, at + V) (one Pack when V > 1: the caller checked the alignment).
// f16 packs without a NaN (one integer test a pair) convert a pair an instruction; testing and
// converting each value alone made f16 batch-norm gradients compute-bound (ResNet: 1.6x their
// bf16 time on an H100). A bf16 value is its 32-bit word's half moved up: a shift or a mask.
template <int V, typename S, typename I>
__device__ __forceinline__ void load_pack(const S* p, I at, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_float(p[at]);
  } else if constexpr (std::is_same_v<S, F16>) {
    const Pack<S, V> pack = *reinterpret_cast<const Pack<S, V>*>(p + at);
    uint32_t words[V / 2];
    __builtin_memcpy(words, &pack, sizeof(words));
    bool nan = false;
#pragma unroll
    for (int j = 0; j < V / 2; ++j) nan |= f16x2_has_nan(words[j]);
    if (!nan) {
#pragma unroll
      for (int j = 0; j < V / 2; ++j) {
        __half2 h;
        __builtin_memcpy(&h, &words[j], sizeof(h));
        const float2 f = __half22float2(h);
        out[2 * j] = f.x, out[2 * j + 1] = f.y;
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = to_float(pack.v[j]);
    }
  } else if constexpr (std::is_same_v<S, Bf16>) {
    const Pack<S, V> pack = *reinterpret_cast<const Pack<S, V>*>(p + at);
    uint32_t words[V / 2];
    __builtin_memcpy(words, &pack, sizeof(words));
#pragma unroll
    for (int j = 0; j < V / 2; ++j) {
      out[2 * j] = __uint_as_float(words[j] << 16);
      out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
    }
  } else {
    const Pack<S, V> pack = *reinterpret_cast<const Pack<S, V>*>(p + at);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = to_float(pack.v[j]);
  }
}

// Two floats rounded to a 16-bit type by the hardware's paired cvt.rn (to nearest even, as
// core/half.h), as one 32-bit word, the first in the low half. A NaN gets cvt's canonical NaN
// rather than half.h's bits: store_pack takes it only for packs without one.
template <typename S>
__device__ __forceinline__ uint32_t round_pair(float a, float b) {
  static_assert(std::is_same_v<S, F16> || std::is_same_v<S, Bf16>, "a 16-bit type");
  uint32_t word;
  if constexpr (std::is_same_v<S, F16>) {
    const __half2 h = __floats2half2_rn(a, b);
    __builtin_memcpy(&word, &h, sizeof(word));
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    __builtin_memcpy(&word, &h, sizeof(word));
  }
  return word;
}

// Stores in[0, V) at p[at, at + V) (one Pack when V > 1: the caller checked the alignment).
// 16-bit packs without a NaN are rounded a pair an instruction (round_pair), a pack with one value
// by value (from_float). For bf16, half.h's integer formula took about 7 instructions a value: a
// third of the ResNet's 28x28 batch-norm forward's instructions (H200, ncu), about 3% of the
// ResNet's bf16 step. A single value keeps from_float's formula: cvt of one value is no cheaper,
// and a constant's formula folds at compile time (an im2col's zeros: 12% slower through cvt).
template <int V, typename S, typename I>
__device__ __forceinline__ void store_pack(S* p, I at, const float (&in)[V]) {
  if constexpr (V == 1) {
    p[at] = from_float<S>(in[0]);
  } else if constexpr (std::is_same_v<S, F16> || std::is_same_v<S, Bf16>) {
    bool nan = false;
#pragma unroll
    for (int j = 0; j < V; ++j) nan |= in[j] != in[j];
    Pack<S, V> pack;
    if (!nan) {
      uint32_t words[V / 2];
#pragma unroll
      for (int j = 0; j < V / 2; ++j) words[j] = round_pair<S>(in[2 * j], in[2 * j + 1]);
      __builtin_memcpy(&pack, words, sizeof(words));
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) pack.v[j] = from_float<S>(in[j]);
    }
    *reinterpret_cast<Pack<S, V>*>(p + at) = pack;
  } else {
    Pack<S, V> pack;
#pragma unroll
    for (int j = 0; j < V; ++j) pack.v[j] = from_float<S>(in[j]);
    *reinterpret_cast<Pack<S, V>*>(p + at) = pack;
  }
}

// Whether every pointer allows Pack<S, V> accesses at element offsets that are multiples of V.
inline bool pack_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % (bytes < 16 ? bytes : 16) == 0;
}

// A pack width chosen at run time (8, 4, 2 or 1 elements of kElementBytes, 16 bytes at most)
// passed to f as a template argument: f(std::integral_constant<int, V>()).
template <int kElementBytes, class F>
void with_pack_width(int width, F&& f) {
  if constexpr (kElementBytes <= 2)
    if (width == 8) return f(std::integral_constant<int, 8>());
  if constexpr (kElementBytes <= 4)
    if (width == 4) return f(std::integral_constant<int, 4>());
  if (width == 2) return f(std::integral_constant<int, 2>());
  f(std::integral_constant<int, 1>());
}

// The storage type of dtype (f32, f16, bf16) passed to f as a value: f(float{}), f(Bf16{}), ...
template <class F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::bf16: f(Bf16{}); return;
    case DType::f16: f(F16{}); return;
    default: f(float{}); return;
  }
}

// A float tensor's data whose type is a run-time value (the head's and the gather's operands:
// few elements, where one kernel for every type combination would not pay).
struct AnyFloat {
  void* p = nullptr;
  DType t = DType::f32;
  AnyFloat() = default;
  __host__ __device__ AnyFloat(void* data, DType type) : p(data), t(type) {}
  __host__ __device__ AnyFloat(const FloatData& d) : p(d.data), t(d.dtype) {}  // NOLINT: implicit
  __device__ __forceinline__ float load(int64_t i) const {
    switch (t) {
      case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
      case DType::f16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
      default: return static_cast<const float*>(p)[i];
    }
  }
  __device__ __forceinline__ void store(int64_t i, float v) const {
    switch (t) {
      case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); return;
      case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_f16(v); return;
      default: static_cast<float*>(p)[i] = v; return;
    }
  }
  __device__ __forceinline__ AnyFloat offset(int64_t i) const {
    return {static_cast<char*>(p) + i * (t == DType::f32 ? 4 : 2), t};
  }
  explicit __host__ __device__ operator bool() const { return p != nullptr; }
};

// v rounded to TF32 (10 mantissa bits), to nearest (cvt.rna), as wmma::__float_to_tf32 does.
__device__ __forceinline__ float round_to_tf32(float v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  unsigned out;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(out) : "f"(v));
  return __uint_as_float(out);
#else
  return v;
#endif
}

}  // namespace trident::cuda
