// 16-bit float storage: the bit conversions of core/half.h in OpenCL C, and the storage type
// `act_t` with LOAD / STORE of the program variant being built.
//
// The host builds the main program once per storage type (kernel_source.cpp defines
// STORAGE_F16 or STORAGE_BF16 before this file; neither: float32), so one kernel text serves
// all three: the activation buffers (x, y, dx, dy) are act_t and every kernel computes in float.
// Parameters, statistics, losses and gradients of weights stay float.
//
// Both 16-bit types are held as ushort: without cl_khr_fp16 (NVIDIA's driver and PoCL do not
// report it) a half pointer allows no arithmetic, only vload_half / vstore_half, which are core
// OpenCL. float16 goes through those (hardware conversion where there is one; _rte rounds to
// nearest even like core/half.h); bfloat16 through the bit formulas below.

float bf16_to_float(ushort h) { return as_float((uint)h << 16); }

// Round to nearest even; NaN stays a quiet NaN (core/half.h float_to_bf16).
ushort float_bits_to_bf16(uint u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x0040u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
ushort float_to_bf16(float f) { return float_bits_to_bf16(as_uint(f)); }

// The float16 conversions on bits alone (core/half.h float_to_f16 / f16_to_float), for
// convert(), which must match the host bit for bit for every input: vload_half may quiet a
// signalling NaN and vstore_half keep a NaN's payload, where core/half.h does neither.
ushort float_bits_to_f16(uint u) {
  const uint sign = (u >> 16) & 0x8000u, magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return (ushort)(sign | 0x7e00u);
  if (magnitude >= 0x477ff000u) return (ushort)(sign | 0x7c00u);  // rounds to infinity
  if (magnitude < 0x38800000u) {  // a float16 subnormal, or zero
    if (magnitude < 0x33000000u) return (ushort)sign;
    const uint shift = 126u - (magnitude >> 23);
    const uint mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint kept = mantissa >> shift, rest = mantissa & ((1u << shift) - 1u);
    const uint half_way = 1u << (shift - 1u);
    const uint up = rest > half_way || (rest == half_way && (kept & 1u));
    return (ushort)(sign | (kept + up));
  }
  const uint rebased = magnitude - (112u << 23);
  return (ushort)(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
}

uint f16_to_float_bits(ushort h) {
  const uint sign = (uint)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or a subnormal: mantissa * 2^-24, a normal float
    return mantissa == 0 ? sign : sign | as_uint((float)mantissa * 5.9604644775390625e-8f);
  }
  if (exponent == 31) return sign | 0x7f800000u | (mantissa << 13);
  return sign | ((exponent + 112u) << 23) | (mantissa << 13);
}

#define LOAD_F32(p, i) ((p)[i])
#define STORE_F32(p, i, v) ((p)[i] = (v))
#define LOAD_F16(p, i) vload_half((i), (__global const half*)(p))
#define STORE_F16(p, i, v) vstore_half_rte((v), (i), (__global half*)(p))
#define LOAD_BF16(p, i) bf16_to_float((p)[i])
#define STORE_BF16(p, i, v) ((p)[i] = float_to_bf16(v))

#if defined(STORAGE_F16)
typedef ushort act_t;
#define LOAD(p, i) LOAD_F16(p, i)
#define STORE(p, i, v) STORE_F16(p, i, v)
#elif defined(STORAGE_BF16)
typedef ushort act_t;
#define LOAD(p, i) LOAD_BF16(p, i)
#define STORE(p, i, v) STORE_BF16(p, i, v)
#else
typedef float act_t;
#define LOAD(p, i) LOAD_F32(p, i)
#define STORE(p, i, v) STORE_F32(p, i, v)
#endif

// The convolution's workspace matrices (im2col.cl, conv2d.cl) hold act_t where col_act is set
// (16-bit runs whose GEMMs multiply 16-bit operands), else float (float32 GEMMs); m is the
// buffer as raw bytes, i an element index.
#define COL_LOAD(m, i, col_act) \
  ((col_act) ? LOAD((__global const act_t*)(m), (i)) : ((__global const float*)(m))[i])
#define COL_STORE(m, i, v, col_act)                \
  do {                                             \
    if (col_act)                                   \
      STORE((__global act_t*)(m), (i), (v));       \
    else                                           \
      ((__global float*)(m))[i] = (v);             \
  } while (0)
