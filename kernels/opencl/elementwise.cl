// Elementwise kernels: the unary family (activations, forward and derivative), axpby, dropout.
// Every buffer argument is a (pointer, element offset) pair; one work-item per element. Tensors
// are act_t (storage.cl), computed in float.

// The formulas of the UnaryOp family (core/op_types.h; core/unary_math.h holds the C++ copy),
// one line each for the forward and the derivative. `op` is a UNARY_<name> code the host
// defines from TRIDENT_UNARY_OPS, so a new activation is one case in each switch.
float unary_apply(int op, float x, float alpha) {
  switch (op) {
    case UNARY_identity: return x;
    case UNARY_relu: return x < 0.0f ? 0.0f : x;  // NaN fails the test: kept
    case UNARY_leaky_relu: return x > 0.0f ? x : alpha * x;
    case UNARY_tanh: return tanh(x);
    case UNARY_sigmoid: return 1.0f / (1.0f + exp(-x));
    case UNARY_gelu: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752440f));
    case UNARY_silu: return x / (1.0f + exp(-x));
  }
  return x;
}

// dy * op'(x), from x or from y = op(x) as unary_backward_needs_input says.
float unary_derivative(int op, float x, float y, float dy, float alpha) {
  switch (op) {
    case UNARY_identity: return dy;
    case UNARY_relu: return y > 0.0f ? dy : 0.0f;
    case UNARY_leaky_relu: return (alpha < 0.0f ? x > 0.0f : y > 0.0f) ? dy : alpha * dy;
    case UNARY_tanh: return dy * (1.0f - y * y);
    case UNARY_sigmoid: return dy * y * (1.0f - y);
    case UNARY_gelu:
      return dy * (0.5f * (1.0f + erf(x * 0.70710678118654752440f)) +
                   x * 0.39894228040143267794f * exp(-0.5f * x * x));
    case UNARY_silu: {
      const float s = 1.0f / (1.0f + exp(-x));
      return dy * s * (1.0f + x * (1.0f - s));
    }
  }
  return dy;
}

// y = op(x); y may be x.
__kernel void unary_forward(__global const act_t* x, ulong x_off, __global act_t* y, ulong y_off,
                            uint n, int op, float alpha) {
  const uint i = get_global_id(0);
  if (i < n) STORE(y, y_off + i, unary_apply(op, LOAD(x, x_off + i), alpha));
}

// dx = dy * op'(x); x or y may be absent (has_x, has_y) where the op does not read it; dx may
// be dy.
__kernel void unary_backward(__global const act_t* x, ulong x_off, int has_x,
                             __global const act_t* y, ulong y_off, int has_y,
                             __global const act_t* dy, ulong dy_off, __global act_t* dx,
                             ulong dx_off, uint n, int op, float alpha) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const float xi = has_x ? LOAD(x, x_off + i) : 0.0f, yi = has_y ? LOAD(y, y_off + i) : 0.0f;
  STORE(dx, dx_off + i, unary_derivative(op, xi, yi, LOAD(dy, dy_off + i), alpha));
}

// y = op(a x + b y) (op UNARY_identity: the plain sum); b == 0 does not read y (it may hold
// garbage). y may be x.
__kernel void axpby(__global const act_t* x, ulong x_off, __global act_t* y, ulong y_off, uint n,
                    float a, float b, int op, float alpha) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const float ax = a * LOAD(x, x_off + i);
  STORE(y, y_off + i, unary_apply(op, b == 0.0f ? ax : ax + b * LOAD(y, y_off + i), alpha));
}

// Inverted dropout: y[i] = keep(g) ? x[i] / (1 - p) : 0, g = group_offset + i / group, and
// keep(g) = philox_uniform(seed, stream, step_state[1], g) >= p. y may alias x.
__kernel void dropout(__global const act_t* x, ulong x_off, __global act_t* y, ulong y_off,
                      uint n, uint group, ulong group_offset, float p, ulong seed, uint stream,
                      __global const uint* state, ulong state_off) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const uint step = state[state_off + 1];
  const ulong g = group_offset + (group == 1 ? i : i / group);
  const bool keep = philox_uniform(seed, stream, step, g) >= p;
  STORE(y, y_off + i, keep ? LOAD(x, x_off + i) / (1.0f - p) : 0.0f);
}
