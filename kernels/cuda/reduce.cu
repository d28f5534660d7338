// CUDA column sums (bias gradients): one block per 32 columns, 32 row lanes per column, summed
// in a fixed tree, so the result is deterministic.
#include "trident/kernels/cuda/cuda_kernels.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = 32;

// Block (32 columns, 32 row lanes); lane ty sums rows ty, ty + 32, ... of its column.
__global__ void sum_rows_kernel(const float* dy, int64_t rows, int64_t cols, float* db,
                                float beta) {
  __shared__ float partial[kRowLanes][kColumnsPerBlock + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumnsPerBlock + tx;
  float acc = 0.f;
  if (col < cols) {
#pragma unroll 4
    for (int64_t r = ty; r < rows; r += kRowLanes) acc += dy[r * cols + col];
  }
  partial[ty][tx] = acc;
  __syncthreads();
  for (int half = kRowLanes / 2; half > 0; half /= 2) {
    if (ty < half) partial[ty][tx] += partial[ty + half][tx];
    __syncthreads();
  }
  if (ty == 0 && col < cols) {
    const float total = partial[0][tx];
    db[col] = beta == 0.f ? total : beta * db[col] + total;
  }
}

}  // namespace

void launch_sum_rows(cudaStream_t stream, const float* dy, int64_t rows, int64_t cols, float* db,
                     float beta) {
  if (cols <= 0) return;
  const unsigned blocks = static_cast<unsigned>((cols + kColumnsPerBlock - 1) / kColumnsPerBlock);
  sum_rows_kernel<<<blocks, dim3(kColumnsPerBlock, kRowLanes), 0, stream>>>(dy, rows, cols, db,
                                                                            beta);
}

}  // namespace trident::cuda
