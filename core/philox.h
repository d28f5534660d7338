// Philox4x32-10, the counter-based RNG every backend uses, so that dropout masks and initial
// weights are identical bit for bit on CPU, CUDA and OpenCL (kernels/opencl has a C copy).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define TRIDENT_HD __host__ __device__ __forceinline__
#else
#define TRIDENT_HD inline
#endif

namespace trident {

struct Philox4 { uint32_t v[4]; };

TRIDENT_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Ten rounds of Philox4x32 (Salmon et al., SC'11) on counter c with key k.
TRIDENT_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                 uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(0xD2511F53u, c0, &hi0);
    const uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The uniform in [0, 1) that dropout draws for element group g of stream `stream` at optimizer
// step `step` with key `seed`: counter (g/4 low, g/4 high, stream, step), word g%4, top 24 bits.
TRIDENT_HD float philox_uniform(uint64_t seed, uint32_t stream, uint32_t step, uint64_t g) {
  const uint64_t block = g >> 2;
  const Philox4 r = philox4x32_10(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                  stream, step, static_cast<uint32_t>(seed),
                                  static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(r.v[g & 3] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace trident
