// Finding a non-finite float (an infinity or a NaN) in a large host array: inputs, datasets and
// weights are checked before they reach a device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace trident {

// The index of the first of `count` floats at `floats` (any alignment: read through memcpy)
// that is an infinity or a NaN, or -1 where every value is finite. Blocks of 1024 values are
// scanned without a branch (an exponent of all ones, tested on the bits, so -ffinite-math-only
// cannot fold it away), which the compiler vectorises; only a block that holds such a value is
// searched value by value. A loop of std::isfinite with an early exit stays scalar: 0.43 ms for
// a 1000 x 784 batch on an H200 machine's host, twice the batch's copy to the GPU.
inline int64_t first_non_finite(const void* floats, int64_t count) {
  const auto* bytes = static_cast<const unsigned char*>(floats);
  constexpr int64_t kBlock = 1024;
  constexpr uint32_t kExponent = 0x7f800000u;
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t n = std::min(kBlock, count - start);
    uint32_t special = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, bytes + 4 * (start + i), sizeof(bits));
      special |= static_cast<uint32_t>((bits & kExponent) == kExponent);
    }
    if (special == 0) continue;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, bytes + 4 * (start + i), sizeof(bits));
      if ((bits & kExponent) == kExponent) return start + i;
    }
  }
  return -1;
}

}  // namespace trident
