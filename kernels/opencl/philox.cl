// Philox4x32-10 in OpenCL C: a bit-for-bit copy of core/philox.h, so dropout masks match the CPU's.

// Ten rounds of Philox4x32 (Salmon et al., SC'11) on counter c with key k.
inline uint4 philox4x32_10(uint c0, uint c1, uint c2, uint c3, uint k0, uint k1) {
  for (int round = 0; round < 10; ++round) {
    const uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (uint4)(c0, c1, c2, c3);
}

// The uniform in [0, 1) for element group g: counter (g/4 low, g/4 high, stream, step), word g%4,
// top 24 bits (exact in float, so the comparison with p is the same on every device).
inline float philox_uniform(ulong seed, uint stream, uint step, ulong g) {
  const ulong block = g >> 2;
  const uint4 r = philox4x32_10((uint)block, (uint)(block >> 32), stream, step, (uint)seed,
                                (uint)(seed >> 32));
  const uint lane = (uint)(g & 3);
  const uint word = lane == 0 ? r.x : lane == 1 ? r.y : lane == 2 ? r.z : r.w;
  return (float)(word >> 8) * (1.0f / 16777216.0f);
}
