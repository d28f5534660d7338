// The formulas of the elementwise family (UnaryOp), forward and derivative, shared by the CPU
// kernels, the CUDA kernels (host and device) and, in double, the reference: one line per op.
// kernels/opencl/elementwise.cl holds the OpenCL copy.
#pragma once
#include <cmath>

#include "trident/core/op_types.h"
#include "trident/core/philox.h"  // TRIDENT_HD

namespace trident {

// y = op(x).
template <typename T>
TRIDENT_HD T unary_apply(UnaryOp op, T x, T alpha) {
  using std::erf; using std::exp; using std::tanh;
  switch (op) {
    case UnaryOp::identity: return x;
    case UnaryOp::relu: return x < T(0) ? T(0) : x;  // NaN fails the test: kept
    case UnaryOp::leaky_relu: return x > T(0) ? x : alpha * x;
    case UnaryOp::tanh: return tanh(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + exp(-x));
    case UnaryOp::gelu: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
    case UnaryOp::silu: return x / (T(1) + exp(-x));
  }
  return x;
}

// dx = dy * op'(x), from x or from y = op(x) as unary_backward_needs_input says.
template <typename T>
TRIDENT_HD T unary_derivative(UnaryOp op, T x, T y, T dy, T alpha) {
  using std::erf; using std::exp;
  switch (op) {
    case UnaryOp::identity: return dy;
    case UnaryOp::relu: return y > T(0) ? dy : T(0);
    case UnaryOp::leaky_relu: return (alpha < T(0) ? x > T(0) : y > T(0)) ? dy : alpha * dy;
    case UnaryOp::tanh: return dy * (T(1) - y * y);
    case UnaryOp::sigmoid: return dy * y * (T(1) - y);
    case UnaryOp::gelu:
      return dy * (T(0.5) * (T(1) + erf(x * T(0.70710678118654752440))) +
                   x * T(0.39894228040143267794) * exp(T(-0.5) * x * x));
    case UnaryOp::silu: {
      const T s = T(1) / (T(1) + exp(-x));
      return dy * s * (T(1) + x * (T(1) - s));
    }
  }
  return dy;
}

}  // namespace trident
