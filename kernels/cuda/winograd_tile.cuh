// The pieces CUDA's fused Winograd kernels share (winograd_conv.cu, winograd_wgrad.cu): the
// input transform of a 4x4 block and the 8x8 outer product of one coefficient's slices.
#pragma once

namespace trident::cuda::winograd_tile {

// out[e * stride] = (B^T d B)[e / 4][e % 4] for x's 4x4 block d, e = 0..15.
__device__ __forceinline__ void store_input_transform(const float (&d)[4][4], float* out,
                                                      int stride) {
  float b[4][4];  // B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    b[0][k] = d[0][k] - d[2][k];
    b[1][k] = d[1][k] + d[2][k];
    b[2][k] = d[2][k] - d[1][k];
    b[3][k] = d[1][k] - d[3][k];
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {  // (B^T d) B
    out[(r * 4 + 0) * stride] = b[r][0] - b[r][2];
    out[(r * 4 + 1) * stride] = b[r][1] + b[r][2];
    out[(r * 4 + 2) * stride] = b[r][2] - b[r][1];
    out[(r * 4 + 3) * stride] = b[r][1] - b[r][3];
  }
}

// acc[a][b] += u[a] v[b] for 8 floats at u and 8 at v (shared memory, 16-byte aligned).
__device__ __forceinline__ void add_outer_product(float (&acc)[8][8], const float* u8,
                                                  const float* v8) {
  const float4* u4 = reinterpret_cast<const float4*>(u8);
  const float4* v4 = reinterpret_cast<const float4*>(v8);
  const float4 ua = u4[0], ub = u4[1], va = v4[0], vb = v4[1];
  const float u[8] = {ua.x, ua.y, ua.z, ua.w, ub.x, ub.y, ub.z, ub.w};
  const float v[8] = {va.x, va.y, va.z, va.w, vb.x, vb.y, vb.z, vb.w};
#pragma unroll
  for (int a = 0; a < 8; ++a)
#pragma unroll
    for (int b = 0; b < 8; ++b) acc[a][b] = fmaf(u[a], v[b], acc[a][b]);
}

}  // namespace trident::cuda::winograd_tile
