// Dtype conversion and scaling between any of float32, float16, bfloat16 (and from uint8): one
// kernel whatever the two types (DTYPE_* codes from the host, the same in every work-item), so
// that it does not depend on the program's storage type and serves the mixed calls (a float32
// loss gradient scaled into a float16 one) in one launch.
//
// Without a factor it works on bits alone, rounding to nearest even exactly as core/half.h does
// for every input (NaN payloads, subnormals, signed zeros): no float arithmetic that a device
// might flush to zero. With a factor (scale()), y = float(x) * factor[0], then the same rounding.

// The float32 bits of element i of a buffer of `type`.
uint load_float_bits(__global const uchar* p, ulong i, int type) {
  if (type == DTYPE_f32) return ((__global const uint*)p)[i];
  if (type == DTYPE_u8) return as_uint((float)p[i]);
  const ushort h = ((__global const ushort*)p)[i];
  return type == DTYPE_bf16 ? (uint)h << 16 : f16_to_float_bits(h);
}

// Element i of a buffer of `type` (f32, f16 or bf16) = the float with these bits, rounded.
void store_float_bits(__global uchar* p, ulong i, int type, uint bits) {
  if (type == DTYPE_f32) {
    ((__global uint*)p)[i] = bits;
    return;
  }
  ((__global ushort*)p)[i] = type == DTYPE_bf16 ? float_bits_to_bf16(bits)
                                                : float_bits_to_f16(bits);
}

// dst[i] = src[i] (has_factor: times factor[0]) in dst's type. Offsets are in elements of each
// buffer's own type; dst may be src (scale in place).
__kernel void convert(__global const uchar* src, ulong src_off, int src_type, __global uchar* dst,
                      ulong dst_off, int dst_type, uint n, __global const float* factor,
                      ulong factor_off, int has_factor) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  uint bits = load_float_bits(src, src_off + i, src_type);
  if (has_factor) bits = as_uint(as_float(bits) * factor[factor_off]);
  store_float_bits(dst, dst_off + i, dst_type, bits);
}
