// CUDA weight-gradient reduction of the batched convolution: column sums of dw_part viewed as
// [samples, OC * columns], one block per 32 columns with 32 sample lanes summed in a fixed tree.
#include "trident/kernels/cuda/conv2d.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

constexpr int kColumnsPerBlock = 32;
constexpr int kSampleLanes = 32;

__global__ void conv_grad_reduce_kernel(const float* dw_part, int64_t samples,
                                        int64_t columns_total, int64_t columns, int64_t patch,
                                        int64_t out_channels, bool transposed, float* dw,
                                        float* db, bool accumulate) {
  __shared__ float partial[kSampleLanes][kColumnsPerBlock + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t column = int64_t(blockIdx.x) * kColumnsPerBlock + tx;
  float acc = 0.f;
  if (column < columns_total) {
#pragma unroll 4
    for (int64_t n = ty; n < samples; n += kSampleLanes) acc += dw_part[n * columns_total + column];
  }
  partial[ty][tx] = acc;
  __syncthreads();
  for (int half = kSampleLanes / 2; half > 0; half /= 2) {
    if (ty < half) partial[ty][tx] += partial[ty + half][tx];
    __syncthreads();
  }
  if (ty != 0 || column >= columns_total) return;
  // dw_part's element `column` of a sample is (oc, k), or (k, oc) when transposed.
  const int64_t oc = transposed ? column % out_channels : column / columns;
  const int64_t k = transposed ? column / out_channels : column - oc * columns;
  float* out = k < patch ? dw + oc * patch + k : (db ? db + oc : nullptr);
  if (out) *out = accumulate ? *out + partial[0][tx] : partial[0][tx];
}

}  // namespace

void launch_conv_grad_reduce(const KernelContext& ctx, const float* dw_part, int64_t samples,
                             int64_t out_channels, int64_t patch, bool bias_column,
                             bool transposed, float* dw, float* db, bool accumulate) {
  const int64_t columns = patch + (bias_column ? 1 : 0);
  const int64_t columns_total = out_channels * columns;
  if (columns_total <= 0) return;
  const int64_t blocks = (columns_total + kColumnsPerBlock - 1) / kColumnsPerBlock;
  conv_grad_reduce_kernel<<<unsigned(blocks), dim3(kColumnsPerBlock, kSampleLanes), 0,
                            ctx.stream>>>(dw_part, samples, columns_total, columns, patch,
                                          out_channels, transposed, dw,
                                          bias_column ? db : nullptr, accumulate);
}

}  // namespace trident::cuda
