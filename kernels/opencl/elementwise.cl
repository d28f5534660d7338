// Elementwise kernels: ReLU, axpby, the GEMM epilogue (bias, ReLU) and dropout.
// Every buffer argument is a (pointer, element offset) pair; one work-item per element.

__kernel void relu_forward(__global const float* x, ulong x_off, __global float* y, ulong y_off,
                           uint n) {
  const uint i = get_global_id(0);
  if (i < n) y[y_off + i] = fmax(x[x_off + i], 0.0f);
}

// dx = dy where y > 0 else 0; dx may alias dy.
__kernel void relu_backward(__global const float* y, ulong y_off, __global const float* dy,
                            ulong dy_off, __global float* dx, ulong dx_off, uint n) {
  const uint i = get_global_id(0);
  if (i < n) dx[dx_off + i] = y[y_off + i] > 0.0f ? dy[dy_off + i] : 0.0f;
}

// y = a x + b y; b == 0 does not read y (it may hold garbage).
__kernel void axpby(__global const float* x, ulong x_off, __global float* y, ulong y_off, uint n,
                    float a, float b) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const float ax = a * x[x_off + i];
  y[y_off + i] = b == 0.0f ? ax : ax + b * y[y_off + i];
}

// After a GEMM: c[r, col] (row stride ldc, m x n) gets + bias (kind 1: bias[col], 2: bias[r]),
// then ReLU. scale_c != 1 rescales c first (the k == 0 GEMM, where CLBlast is not called).
__kernel void gemm_epilogue(__global float* c, ulong c_off, uint ldc, uint m, uint n,
                            __global const float* bias, ulong bias_off, int bias_kind, int relu,
                            int rescale, float beta) {
  const uint i = get_global_id(0);
  if (i >= m * n) return;
  const uint r = i / n, col = i - r * n;
  const ulong at = c_off + (ulong)r * ldc + col;
  float v = rescale ? (beta == 0.0f ? 0.0f : beta * c[at]) : c[at];
  if (bias_kind == 1) v += bias[bias_off + col];
  else if (bias_kind == 2) v += bias[bias_off + r];
  c[at] = relu ? fmax(v, 0.0f) : v;
}

// Inverted dropout: y[i] = keep(g) ? x[i] / (1 - p) : 0, g = group_offset + i / group, and
// keep(g) = philox_uniform(seed, stream, step_state[1], g) >= p. y may alias x.
__kernel void dropout(__global const float* x, ulong x_off, __global float* y, ulong y_off,
                      uint n, uint group, ulong group_offset, float p, ulong seed, uint stream,
                      __global const uint* state, ulong state_off) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const uint step = state[state_off + 1];
  const ulong g = group_offset + (group == 1 ? i : i / group);
  const bool keep = philox_uniform(seed, stream, step, g) >= p;
  y[y_off + i] = keep ? x[x_off + i] / (1.0f - p) : 0.0f;
}
