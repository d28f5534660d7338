// CPU per-channel broadcast and reduction over x viewed as [outer, channels, inner]: bias adds,
// affine maps, and the sums of bias gradients, norms and batch statistics.
#pragma once
#include <cstdint>

namespace trident::cpu {

// y = x * scale[c] + shift[c]; scale or shift may be null (1 or 0). y may alias x.
void channel_affine(const float* x, const float* scale, const float* shift, float* y,
                    int64_t outer, int64_t channels, int64_t inner);
// out[c] = beta * out[c] + sum over outer and inner of x (times y when y is not null), summed in
// double; partial sums are combined in a fixed order (deterministic for a given thread count).
void channel_sums(const float* x, const float* y, float* out, int64_t outer, int64_t channels,
                  int64_t inner, float beta);

}  // namespace trident::cpu
