// CUDA's Winograd kernel transform and the weight gradient's final sum (see winograd.h).
#include "trident/kernels/cuda/winograd.h"

#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

// U[xi][c][o]: thread (c, o), o the fastest.
__global__ void winograd_kernel_transform(const float* __restrict__ w, int64_t C, int64_t OC,
                                          bool flipped, float* __restrict__ U) {
  wait_for_prior_grids();
  const int64_t total = OC * C;
  for (int64_t i = first_index<int64_t>(); i < total; i += grid_step<int64_t>()) {
    const int64_t c = i / OC, o = i - c * OC;
    float k[9];
    // flipped: the forward's kernel [c, o] (its output channel c, input channel o; its OC is
    // this C), turned by 180 degrees
    const float* src = flipped ? w + (c * OC + o) * 9 : w + (o * C + c) * 9;
#pragma unroll
    for (int e = 0; e < 9; ++e) k[e] = __ldg(src + (flipped ? 8 - e : e));
    float q[4][3];  // G k: rows k0, (k0 + k1 + k2) / 2, (k0 - k1 + k2) / 2, k2
#pragma unroll
    for (int b = 0; b < 3; ++b) {
      q[0][b] = k[b];
      q[1][b] = 0.5f * (k[b] + k[3 + b] + k[6 + b]);
      q[2][b] = 0.5f * (k[b] - k[3 + b] + k[6 + b]);
      q[3][b] = k[6 + b];
    }
    float* out = U + i;  // + xi * total
#pragma unroll
    for (int a = 0; a < 4; ++a) {  // (G k) G^T
      out[(a * 4 + 0) * total] = q[a][0];
      out[(a * 4 + 1) * total] = 0.5f * (q[a][0] + q[a][1] + q[a][2]);
      out[(a * 4 + 2) * total] = 0.5f * (q[a][0] - q[a][1] + q[a][2]);
      out[(a * 4 + 3) * total] = q[a][2];
    }
  }
}

// dw from the slices' sums: a block is 16 elements (o, i) x the 16 xi; each thread adds one
// (xi, element) over the slices (eight running sums, slice % 8, for eight loads in flight,
// joined in a fixed order), then 16 threads turn an element's 16 sums into its 3x3 gradient.
constexpr int kElementsPerBlock = 16;

__global__ void __launch_bounds__(16 * kElementsPerBlock)
    winograd_weight_gradient_kernel(const float* __restrict__ partial, int64_t elements,
                                    int64_t slices, float* __restrict__ dw) {
  wait_for_prior_grids();
  __shared__ float sums[16][kElementsPerBlock + 1];
  const int lane = threadIdx.x % kElementsPerBlock, xi = threadIdx.x / kElementsPerBlock;
  const int64_t element = int64_t(blockIdx.x) * kElementsPerBlock + lane;
  float run[8] = {};
  if (element < elements) {
    const float* p = partial + xi * elements + element;
    const int64_t stride = 16 * elements;  // from one slice to the next
    int64_t g = 0;
    for (; g + 8 <= slices; g += 8)
#pragma unroll
      for (int k = 0; k < 8; ++k) run[k] += p[(g + k) * stride];
    for (int k = 0; g < slices; ++g, ++k) run[k] += p[g * stride];
  }
  const float sum = ((run[0] + run[1]) + (run[2] + run[3])) +
                    ((run[4] + run[5]) + (run[6] + run[7]));
  sums[xi][lane] = sum;
  __syncthreads();
  if (xi != 0 || element >= elements) return;
  float m[4][4];
#pragma unroll
  for (int k = 0; k < 16; ++k) m[k / 4][k % 4] = sums[k][lane];
  float q[3][4];  // G^T m
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    q[0][b] = m[0][b] + 0.5f * (m[1][b] + m[2][b]);
    q[1][b] = 0.5f * (m[1][b] - m[2][b]);
    q[2][b] = 0.5f * (m[1][b] + m[2][b]) + m[3][b];
  }
  float* out = dw + element * 9;
#pragma unroll
  for (int a = 0; a < 3; ++a) {  // (G^T m) G
    out[a * 3 + 0] = q[a][0] + 0.5f * (q[a][1] + q[a][2]);
    out[a * 3 + 1] = 0.5f * (q[a][1] - q[a][2]);
    out[a * 3 + 2] = 0.5f * (q[a][1] + q[a][2]) + q[a][3];
  }
}

}  // namespace

void launch_winograd_kernel(const KernelContext& ctx, int64_t channels, int64_t out_channels,
                            const float* w, bool flipped, float* U) {
  const int64_t total = channels * out_channels;
  if (total <= 0) return;
  launch(ctx, winograd_kernel_transform, grid_for(total), kBlockThreads, 0, w, channels,
         out_channels, flipped, U);
}

void launch_winograd_slices_to_weights(const KernelContext& ctx, int64_t out_channels,
                                       int64_t channels, int64_t slices, const float* partial,
                                       float* dw) {
  const int64_t elements = out_channels * channels;
  if (elements <= 0) return;
  const unsigned blocks = unsigned((elements + kElementsPerBlock - 1) / kElementsPerBlock);
  launch(ctx, winograd_weight_gradient_kernel, blocks, 16 * kElementsPerBlock, 0, partial,
         elements, slices, dw);
}

}  // namespace trident::cuda
