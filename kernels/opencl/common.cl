// Helpers the kernel files share: the device error flag, compensated sums and a work-group sum.
// The host prepends the codes they use (DEVICE_ERROR_*, UNARY_*: opencl_program.cpp).

#define REDUCE_GROUP 256

// Reports bad data met by a kernel in the device's error flag {code, value} (core/device.h):
// the first reporter keeps its code and value together; later ones leave them.
void raise_error(__global int* flag, ulong flag_off, int code, int value) {
  if (atomic_cmpxchg(flag + flag_off, 0, code) == 0) flag[flag_off + 1] = value;
}

// Kahan summation: *sum + *carry holds the running total to about one float rounding however
// many values were added (a work-item of a long reduction adds thousands).
void kahan_add(float* sum, float* carry, float value) {
  const float y = value - *carry;
  const float t = *sum + y;
  *carry = (t - *sum) - y;
  *sum = t;
}

// Tree sum of partial[0..REDUCE_GROUP) into partial[0], in a fixed order; every work-item of the
// (REDUCE_GROUP-wide) group must call it.
void local_sum(__local float* partial) {
  const uint lid = get_local_id(0);
  for (uint width = REDUCE_GROUP / 2; width > 0; width >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < width) partial[lid] += partial[lid + width];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

// Two work-group sums at once (a REDUCE_GROUP-wide group, a and b REDUCE_GROUP floats of local
// memory) by a fixed tree; every work-item gets them.
float2 local_sum2(float2 mine, __local float* a, __local float* b) {
  const uint lid = get_local_id(0);
  a[lid] = mine.x;
  b[lid] = mine.y;
  for (uint width = REDUCE_GROUP / 2; width > 0; width >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < width) {
      a[lid] += a[lid + width];
      b[lid] += b[lid + width];
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return (float2)(a[0], b[0]);
}
