// CUDA classification head: log-softmax forward/backward (one warp per row), NLL loss (one
// block, fixed-order sum), NLL gradient, and the count of correct predictions.
#include <climits>
#include <cmath>

#include "trident/kernels/cuda/cuda_kernels.h"
#include "trident/kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

constexpr int kWarpsPerBlock = kBlockThreads / 32;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {  // fmaxf: NaN lanes are ignored
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ int warp_min(int v) {
  for (int offset = 16; offset > 0; offset /= 2) v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ int64_t first_warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}
__device__ __forceinline__ int64_t warp_row_step() {
  return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
}

// max + log(sum exp(xr - max)) of one row, computed by its warp (every lane gets it); the
// log-sum in double, as on the CPU.
__device__ __forceinline__ double warp_row_log_sum_exp(const float* xr, int64_t cols, int lane) {
  float max = -INFINITY;
  for (int64_t c = lane; c < cols; c += 32) max = fmaxf(max, xr[c]);
  max = warp_max(max);
  float sum = 0.f;
  for (int64_t c = lane; c < cols; c += 32) sum += expf(xr[c] - max);
  sum = warp_sum(sum);
  return static_cast<double>(max) + log(static_cast<double>(sum));
}

// y[r, :] = x[r, :] - logsumexp(x[r, :]).
__global__ void log_softmax_forward_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const double lse = warp_row_log_sum_exp(xr, cols, lane);
    for (int64_t c = lane; c < cols; c += 32)
      yr[c] = static_cast<float>(static_cast<double>(xr[c]) - lse);
  }
}

// dx = dy - exp(y) * sum(dy[r, :]).
__global__ void log_softmax_backward_kernel(const float* y, const float* dy, float* dx,
                                            int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    double total = 0.0;
    for (int64_t c = lane; c < cols; c += 32) total += dyr[c];
    total = warp_sum(total);
    for (int64_t c = lane; c < cols; c += 32)
      dxr[c] = static_cast<float>(static_cast<double>(dyr[c]) -
                                  static_cast<double>(expf(yr[c])) * total);
  }
}

// One block: loss[0] = (accumulate ? loss[0] : 0) + mean of -logp[r, labels[r]]. A label outside
// [0, cols) contributes NaN (the GPU cannot throw; the NaN loss shows the bad data).
__global__ void nll_loss_forward_kernel(const float* logp, const int32_t* labels, int64_t rows,
                                        int64_t cols, float* loss, bool accumulate) {
  __shared__ double partial[kBlockThreads];
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kBlockThreads) {
    const int32_t label = labels[r];
    acc -= (label >= 0 && label < cols) ? static_cast<double>(logp[r * cols + label]) : NAN;
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kBlockThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double mean = rows > 0 ? partial[0] / static_cast<double>(rows) : 0.0;
    loss[0] = static_cast<float>((accumulate ? static_cast<double>(loss[0]) : 0.0) + mean);
  }
}

__global__ void nll_loss_backward_kernel(const int32_t* labels, int64_t rows, int64_t cols,
                                         float scale, float* dlogp) {
  const int64_t total = rows * cols;
  for (int64_t i = first_index(); i < total; i += grid_step()) {
    const int64_t r = i / cols, c = i - r * cols;
    dlogp[i] = c == labels[r] ? -scale : 0.f;
  }
}

// The fused training head: y = log_softmax(x), dx = grad_scale * (exp(y) - onehot(label)), one
// warp per row. With one block (with_loss) it also adds the NLL mean to loss[0]: each warp sums
// its rows in double, then the warps' sums are added in warp order (deterministic).
__global__ void log_softmax_nll_kernel(const float* x, const int32_t* labels, int64_t rows,
                                       int64_t cols, float grad_scale, float* y, float* loss,
                                       bool accumulate, float* dx, bool with_loss) {
  __shared__ double warp_loss[32];
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  double nll = 0.0;  // this lane's sum of -y[r, label] over this warp's rows
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32;
  for (int64_t r = first_row; r < rows; r += static_cast<int64_t>(gridDim.x) * warps) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float* dxr = dx + r * cols;
    const int32_t label = labels[r];
    const double lse = warp_row_log_sum_exp(xr, cols, lane);
    for (int64_t c = lane; c < cols; c += 32) {
      const float v = static_cast<float>(static_cast<double>(xr[c]) - lse);
      yr[c] = v;
      dxr[c] = grad_scale * (expf(v) - (c == label ? 1.f : 0.f));
      if (c == label) nll -= static_cast<double>(v);
    }
    // A label outside [0, cols) gives a NaN loss, as nll_loss_forward (the GPU cannot throw).
    if (lane == 0 && (label < 0 || label >= cols)) nll = NAN;
  }
  if (!with_loss) return;
  nll = warp_sum(nll);
  if (lane == 0) warp_loss[threadIdx.x / 32] = nll;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < warps; ++w) total += warp_loss[w];
    const double mean = rows > 0 ? total / static_cast<double>(rows) : 0.0;
    loss[0] = static_cast<float>((accumulate ? static_cast<double>(loss[0]) : 0.0) + mean);
  }
}

// The CPU's rule: best starts at column 0 and moves on a strictly greater score. So a NaN in
// column 0 wins; otherwise NaNs never win and the first maximal (non-NaN) column does.
__global__ void count_correct_kernel(const float* scores, const int32_t* labels, int64_t rows,
                                     int64_t cols, float* correct) {
  __shared__ int block_hits;
  if (threadIdx.x == 0) block_hits = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const float* row = scores + r * cols;
    int best = 0;
    if (!isnan(row[0])) {
      float max = -INFINITY;
      for (int64_t c = lane; c < cols; c += 32) max = fmaxf(max, row[c]);
      max = warp_max(max);
      int first = INT_MAX;
      for (int64_t c = lane; c < cols; c += 32)
        if (row[c] == max) { first = static_cast<int>(c); break; }
      best = warp_min(first);
    }
    if (lane == 0 && best == labels[r]) atomicAdd(&block_hits, 1);
  }
  __syncthreads();
  // Whole numbers below 2^24 add exactly in any order: the count stays deterministic.
  if (threadIdx.x == 0 && block_hits > 0) atomicAdd(correct, static_cast<float>(block_hits));
}

unsigned warp_row_grid(int64_t rows) { return grid_for(rows, kWarpsPerBlock); }

}  // namespace

void launch_log_softmax_forward(cudaStream_t stream, const float* x, float* y, int64_t rows,
                                int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  log_softmax_forward_kernel<<<warp_row_grid(rows), kBlockThreads, 0, stream>>>(x, y, rows, cols);
}

void launch_log_softmax_backward(cudaStream_t stream, const float* y, const float* dy, float* dx,
                                 int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  log_softmax_backward_kernel<<<warp_row_grid(rows), kBlockThreads, 0, stream>>>(y, dy, dx, rows,
                                                                                 cols);
}

void launch_nll_loss_forward(cudaStream_t stream, const float* logp, const int32_t* labels,
                             int64_t rows, int64_t cols, float* loss, bool accumulate) {
  nll_loss_forward_kernel<<<1, kBlockThreads, 0, stream>>>(logp, labels, rows, cols, loss,
                                                           accumulate);
}

void launch_nll_loss_backward(cudaStream_t stream, const int32_t* labels, int64_t rows,
                              int64_t cols, float scale, float* dlogp) {
  if (rows <= 0 || cols <= 0) return;
  nll_loss_backward_kernel<<<grid_for(rows * cols), kBlockThreads, 0, stream>>>(labels, rows,
                                                                                cols, scale,
                                                                                dlogp);
}

void launch_log_softmax_nll(cudaStream_t stream, const float* x, const int32_t* labels,
                            int64_t rows, int64_t cols, float grad_scale, float* y, float* loss,
                            bool accumulate, float* dx) {
  // A head of up to kOneBlockRows rows runs as one block of 32 warps that also sums the loss:
  // one launch. Larger ones spread their rows over the GPU; the loss is then the NLL kernel's.
  constexpr int64_t kOneBlockRows = 2048;
  if (rows <= kOneBlockRows || cols <= 0) {
    log_softmax_nll_kernel<<<1, 1024, 0, stream>>>(x, labels, rows, cols, grad_scale, y, loss,
                                                   accumulate, dx, true);
    return;
  }
  log_softmax_nll_kernel<<<warp_row_grid(rows), kBlockThreads, 0, stream>>>(
      x, labels, rows, cols, grad_scale, y, loss, accumulate, dx, false);
  launch_nll_loss_forward(stream, y, labels, rows, cols, loss, accumulate);
}

void launch_count_correct(cudaStream_t stream, const float* scores, const int32_t* labels,
                          int64_t rows, int64_t cols, float* correct) {
  if (rows <= 0 || cols <= 0) return;
  count_correct_kernel<<<warp_row_grid(rows), kBlockThreads, 0, stream>>>(scores, labels, rows,
                                                                          cols, correct);
}

}  // namespace trident::cuda
