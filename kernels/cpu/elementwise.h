// CPU elementwise ops: ReLU, axpby, fill, copies and Philox dropout over flat float buffers.
#pragma once
#include <cstddef>
#include <cstdint>

namespace trident::cpu {

// y = max(x, 0) (NaN stays NaN); y may alias x.
void relu_forward(const float* x, float* y, int64_t n);
// dx = dy where y > 0 else 0; dx may alias dy.
void relu_backward(const float* y, const float* dy, float* dx, int64_t n);
// y = a * x + b * y; b == 0 means y is only written (as in BLAS, old NaNs do not survive).
void axpby(const float* x, float* y, int64_t n, float a, float b);
// dst[0..n) = value.
void fill(float* dst, int64_t n, float value);
// memcpy split over the arena for large copies.
void copy_bytes(void* dst, const void* src, size_t bytes);
// Inverted dropout: y[i] = keep(g) ? x[i] * (1 / (1 - p)) : 0, g = group_offset + i / group,
// keep(g) = philox_uniform(seed, stream, step, g) >= p. y may alias x.
void dropout(const float* x, float* y, int64_t n, int64_t group, int64_t group_offset, float p,
             uint64_t seed, uint32_t stream, uint32_t step);

}  // namespace trident::cpu
