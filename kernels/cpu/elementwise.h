// CPU elementwise ops: the unary family, axpby, scale, fill, copies and Philox dropout over flat
// buffers. The float ops come for float32 and for bfloat16 bit patterns (uint16_t), computed in
// float and rounded once per stored element (storage.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// y = op(x) (core/unary_math.h); y may alias x.
void unary_forward(UnaryOp op, const float* x, float* y, int64_t n, float alpha);
void unary_forward(UnaryOp op, const uint16_t* x, uint16_t* y, int64_t n, float alpha);
// dx = dy * op'(x) from x or y (either may be null when the op does not read it); dx may alias dy.
void unary_backward(UnaryOp op, const float* x, const float* y, const float* dy, float* dx,
                    int64_t n, float alpha);
void unary_backward(UnaryOp op, const uint16_t* x, const uint16_t* y, const uint16_t* dy,
                    uint16_t* dx, int64_t n, float alpha);
// y = a * x + b * y; b == 0 means y is only written (as in BLAS, old NaNs do not survive).
void axpby(const float* x, float* y, int64_t n, float a, float b);
void axpby(const uint16_t* x, uint16_t* y, int64_t n, float a, float b);
// y = activation(a * x + b * y), the activation in float before y's rounding.
void axpby(const float* x, float* y, int64_t n, float a, float b, UnaryOp activation,
           float alpha);
void axpby(const uint16_t* x, uint16_t* y, int64_t n, float a, float b, UnaryOp activation,
           float alpha);
// y = x * factor (y may alias x).
void scale(const float* x, float factor, float* y, int64_t n);
void scale(const uint16_t* x, float factor, uint16_t* y, int64_t n);
// dst[0..n) = value (fill_bf16: value rounded once); fill_bytes: n bytes of zero (any dtype's
// zero).
void fill(float* dst, int64_t n, float value);
void fill_bf16(uint16_t* dst, int64_t n, float value);
void fill_i32(int32_t* dst, int64_t n, int32_t value);
void fill_zero_bytes(void* dst, size_t bytes);
// memcpy split over the arena for large copies.
void copy_bytes(void* dst, const void* src, size_t bytes);
// Inverted dropout: y[i] = keep(g) ? x[i] * (1 / (1 - p)) : 0, g = group_offset + i / group,
// keep(g) = philox_uniform(seed, stream, step, g) >= p. y may alias x.
void dropout(const float* x, float* y, int64_t n, int64_t group, int64_t group_offset, float p,
             uint64_t seed, uint32_t stream, uint32_t step);
void dropout(const uint16_t* x, uint16_t* y, int64_t n, int64_t group, int64_t group_offset,
             float p, uint64_t seed, uint32_t stream, uint32_t step);

}  // namespace trident::cpu
