// CPU elementwise ops: the unary family, axpby, fill, copies and Philox dropout over flat buffers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// y = op(x) (core/unary_math.h); y may alias x.
void unary_forward(UnaryOp op, const float* x, float* y, int64_t n, float alpha);
// dx = dy * op'(x) from x or y (either may be null when the op does not read it); dx may alias dy.
void unary_backward(UnaryOp op, const float* x, const float* y, const float* dy, float* dx,
                    int64_t n, float alpha);
// y = a * x + b * y; b == 0 means y is only written (as in BLAS, old NaNs do not survive).
void axpby(const float* x, float* y, int64_t n, float a, float b);
// dst[0..n) = value; fill_bytes: n bytes of zero (any dtype's zero).
void fill(float* dst, int64_t n, float value);
void fill_i32(int32_t* dst, int64_t n, int32_t value);
void fill_zero_bytes(void* dst, size_t bytes);
// memcpy split over the arena for large copies.
void copy_bytes(void* dst, const void* src, size_t bytes);
// Inverted dropout: y[i] = keep(g) ? x[i] * (1 / (1 - p)) : 0, g = group_offset + i / group,
// keep(g) = philox_uniform(seed, stream, step, g) >= p. y may alias x.
void dropout(const float* x, float* y, int64_t n, int64_t group, int64_t group_offset, float p,
             uint64_t seed, uint32_t stream, uint32_t step);

}  // namespace trident::cpu
