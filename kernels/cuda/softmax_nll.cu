// CUDA classification head: a warp per row everywhere (rows are short: one warp covers a row of
// up to 32 classes per step). Scores, log-probabilities and their gradients are AnyFloat (each
// f32, f16 or bf16, read into float32, rounded once when written): the head is a few thousand
// values, so one kernel serves every mix of types (16-bit logits, a float32 gradient, ...). The losses are summed per warp in double, then over the grid in a
// fixed order by the last block to finish (launch.cuh's grid_sum_last): one launch, any rows,
// deterministic.
#include <climits>
#include <cmath>

#include "trident/kernels/cuda/float_types.cuh"
#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/softmax_nll.h"

namespace trident::cuda {
namespace {

constexpr int kWarpsPerBlock = kBlockThreads / 32;
constexpr int64_t kMaxLossBlocks = 1024;  // within ReduceScratch::partial_words

__device__ __forceinline__ int64_t first_warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}
__device__ __forceinline__ int64_t warp_row_step() {
  return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
}

__device__ __forceinline__ bool label_ok(int32_t label, int64_t cols) {
  return label >= 0 && label < cols;
}

// max + log(sum exp(xr - max)) of one row, computed by its warp (every lane gets it); the
// log-sum in double, as on the CPU.
__device__ __forceinline__ double warp_row_log_sum_exp(AnyFloat xr, int64_t cols, int lane) {
  float max = -INFINITY;
  for (int64_t c = lane; c < cols; c += 32) max = fmaxf(max, xr.load(c));
  max = warp_max(max);
  float sum = 0.f;
  for (int64_t c = lane; c < cols; c += 32) sum += expf(xr.load(c) - max);
  sum = warp_sum(sum);
  return static_cast<double>(max) + log(static_cast<double>(sum));
}

// The losses' common end: lane 0 of each warp holds the sum over its rows; the block that
// finishes last adds total / per_row / rows (0 for no rows) to loss[0].
__device__ __forceinline__ void finish_mean_loss(double warp_value, const ReduceScratch& scratch,
                                                 float* loss, bool accumulate, double per_row,
                                                 int64_t rows) {
  __shared__ double warp_values[kWarpsPerBlock];
  if (threadIdx.x % 32 == 0) warp_values[threadIdx.x / 32] = warp_value;
  __syncthreads();
  double block_value = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kWarpsPerBlock; ++w) block_value += warp_values[w];
  double total = 0.0;
  if (grid_sum_last(block_value, scratch, &total) && threadIdx.x == 0) {
    const double mean = rows > 0 ? total / per_row / static_cast<double>(rows) : 0.0;
    loss[0] = static_cast<float>((accumulate ? static_cast<double>(loss[0]) : 0.0) + mean);
  }
}

__global__ void log_softmax_forward_kernel(AnyFloat x, AnyFloat y, int64_t rows, int64_t cols) {
  wait_for_prior_grids();
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const AnyFloat xr = x.offset(r * cols), yr = y.offset(r * cols);
    const double lse = warp_row_log_sum_exp(xr, cols, lane);
    for (int64_t c = lane; c < cols; c += 32)
      yr.store(c, static_cast<float>(static_cast<double>(xr.load(c)) - lse));
  }
}

// The row's sum of dy is complete (warp_sum) before any lane writes: dx may be dy.
__global__ void log_softmax_backward_kernel(AnyFloat y, AnyFloat dy, AnyFloat dx, int64_t rows,
                                            int64_t cols) {
  wait_for_prior_grids();
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const AnyFloat yr = y.offset(r * cols), dyr = dy.offset(r * cols), dxr = dx.offset(r * cols);
    double total = 0.0;
    for (int64_t c = lane; c < cols; c += 32) total += dyr.load(c);
    total = warp_sum(total);
    for (int64_t c = lane; c < cols; c += 32)
      dxr.store(c, static_cast<float>(static_cast<double>(dyr.load(c)) -
                                      static_cast<double>(expf(yr.load(c))) * total));
  }
}

// -(1 - e) * logp[label] - e * mean(logp[r, :]) per row (label checked by the caller).
__global__ void nll_loss_forward_kernel(AnyFloat logp, const int32_t* labels, int64_t rows,
                                        int64_t cols, float* loss, bool accumulate,
                                        float smoothing, ReduceScratch scratch, int32_t* error) {
  wait_for_prior_grids();
  const int lane = threadIdx.x % 32;
  double warp_total = 0.0;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const int32_t label = labels[r];
    if (!label_ok(label, cols)) {  // the same for the whole warp
      if (lane == 0) raise_error(error, DeviceErrorCode::label, label);
      continue;
    }
    const AnyFloat row = logp.offset(r * cols);
    double row_sum = 0.0;
    if (smoothing > 0.f) {
      for (int64_t c = lane; c < cols; c += 32) row_sum += row.load(c);
      row_sum = warp_sum(row_sum);
    }
    if (lane == 0)
      warp_total += -(1.0 - double(smoothing)) * double(row.load(label)) -
                    double(smoothing) * row_sum / double(cols);
  }
  finish_mean_loss(warp_total, scratch, loss, accumulate, 1.0, rows);
}

template <typename I>
__global__ void nll_loss_backward_kernel(const int32_t* labels, I total, I cols,
                                         Divider<I> by_cols, float on, float off, AnyFloat dlogp,
                                         int32_t* error) {
  wait_for_prior_grids();
  for (I i = first_index<I>(); i < total; i += grid_step<I>()) {
    const I r = by_cols.div(i), c = i - r * cols;
    const int32_t label = labels[r];
    if (!label_ok(label, cols)) {
      dlogp.store(i, 0.f);
      if (c == 0) raise_error(error, DeviceErrorCode::label, label);
      continue;
    }
    dlogp.store(i, c == label ? on : off);
  }
}

// The fused training head: y = log_softmax(x), dx = grad_scale * (exp(y) - t), and the NLL of y.
// t[c] is `on` at the label and `off` elsewhere.
__global__ void log_softmax_nll_kernel(AnyFloat x, const int32_t* labels, int64_t rows,
                                       int64_t cols, float grad_scale, float smoothing, float on,
                                       float off, AnyFloat y, float* loss, bool accumulate,
                                       AnyFloat dx, ReduceScratch scratch, int32_t* error) {
  wait_for_prior_grids();
  const int lane = threadIdx.x % 32;
  double warp_total = 0.0;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const AnyFloat xr = x.offset(r * cols), yr = y.offset(r * cols), dxr = dx.offset(r * cols);
    const int32_t label = labels[r];
    const bool ok = label_ok(label, cols);
    const double lse = warp_row_log_sum_exp(xr, cols, lane);
    double y_sum = 0.0;
    float y_label = 0.f;
    for (int64_t c = lane; c < cols; c += 32) {
      const float v = static_cast<float>(static_cast<double>(xr.load(c)) - lse);
      yr.store(c, v);  // the gradient below uses v unrounded, as the CPU's float32 staging does
      dxr.store(c, ok ? grad_scale * (expf(v) - (c == label ? on : off)) : 0.f);
      y_sum += v;
      if (c == label) y_label = v;
    }
    if (!ok) {
      if (lane == 0) raise_error(error, DeviceErrorCode::label, label);
      continue;
    }
    y_label = __shfl_sync(0xffffffffu, y_label, label % 32);  // the lane that holds the label
    if (smoothing > 0.f) y_sum = warp_sum(y_sum);
    if (lane == 0)
      warp_total += -(1.0 - double(smoothing)) * double(y_label) -
                    double(smoothing) * y_sum / double(cols);
  }
  finish_mean_loss(warp_total, scratch, loss, accumulate, 1.0, rows);
}

__global__ void mse_loss_kernel(AnyFloat x, const int32_t* labels, int64_t rows, int64_t cols,
                                float k, float* loss, bool accumulate, AnyFloat dx,
                                ReduceScratch scratch, int32_t* error) {
  wait_for_prior_grids();
  const int lane = threadIdx.x % 32;
  double warp_total = 0.0;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const AnyFloat xr = x.offset(r * cols);
    const int32_t label = labels[r];
    const bool ok = label_ok(label, cols);
    double squares = 0.0;
    for (int64_t c = lane; c < cols; c += 32) {
      const float d = xr.load(c) - (c == label ? 1.f : 0.f);
      squares += double(d) * double(d);
      if (dx) dx.store(r * cols + c, ok ? k * d : 0.f);
    }
    if (!ok) {
      if (lane == 0) raise_error(error, DeviceErrorCode::label, label);
      continue;
    }
    squares = warp_sum(squares);
    if (lane == 0) warp_total += squares;
  }
  finish_mean_loss(warp_total, scratch, loss, accumulate, double(cols), rows);
}

// The CPU's rule: best starts at column 0 and moves on a strictly greater score. So a NaN in
// column 0 wins; otherwise NaNs never win and the first maximal (non-NaN) column does.
__global__ void count_correct_kernel(AnyFloat scores, const int32_t* labels, int64_t rows,
                                     int64_t cols, float* correct, int32_t* error) {
  wait_for_prior_grids();
  __shared__ int block_hits;
  if (threadIdx.x == 0) block_hits = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (int64_t r = first_warp_row(); r < rows; r += warp_row_step()) {
    const AnyFloat row = scores.offset(r * cols);
    const int32_t label = labels[r];
    if (!label_ok(label, cols)) {
      if (lane == 0) raise_error(error, DeviceErrorCode::label, label);
      continue;
    }
    int64_t best = 0;
    if (!isnan(row.load(0))) {
      float max = -INFINITY;
      for (int64_t c = lane; c < cols; c += 32) max = fmaxf(max, row.load(c));
      max = warp_max(max);
      int first = INT_MAX;
      for (int64_t c = lane; c < cols; c += 32)
        if (row.load(c) == max) {
          first = static_cast<int>(c);
          break;
        }
      best = warp_min(first);
    }
    if (lane == 0 && best == label) atomicAdd(&block_hits, 1);
  }
  __syncthreads();
  // Whole numbers below 2^24 add exactly in any order: the count stays deterministic.
  if (threadIdx.x == 0 && block_hits > 0) atomicAdd(correct, static_cast<float>(block_hits));
}

unsigned warp_row_grid(int64_t rows) { return grid_for(rows, kWarpsPerBlock); }

unsigned loss_grid(int64_t rows) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxLossBlocks ? kMaxLossBlocks : blocks));
}

}  // namespace

void launch_log_softmax_forward(const KernelContext& ctx, FloatData x, FloatData y, int64_t rows,
                                int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  launch(ctx, log_softmax_forward_kernel, warp_row_grid(rows), kBlockThreads, 0, x, y, rows,
         cols);
}

void launch_log_softmax_backward(const KernelContext& ctx, FloatData y, FloatData dy,
                                 FloatData dx, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  launch(ctx, log_softmax_backward_kernel, warp_row_grid(rows), kBlockThreads, 0, y, dy, dx, rows,
         cols);
}

void launch_nll_loss_forward(const KernelContext& ctx, FloatData logp, const int32_t* labels,
                             int64_t rows, int64_t cols, float* loss, bool accumulate,
                             float smoothing) {
  launch(ctx, nll_loss_forward_kernel, loss_grid(rows), kBlockThreads, 0, logp, labels, rows,
         cols, loss, accumulate, smoothing, ctx.scratch, ctx.error_flag);
}

void launch_nll_loss_backward(const KernelContext& ctx, const int32_t* labels, int64_t rows,
                              int64_t cols, float scale, float smoothing, FloatData dlogp) {
  const int64_t total = rows * cols;
  if (total <= 0) return;
  // The CPU's constants, rounded the same way.
  const float off = -scale * (smoothing / float(cols));
  const float on = off - scale * (1.0f - smoothing);
  if (fits_int32(total))
    launch(ctx, nll_loss_backward_kernel<int32_t>, grid_for(total), kBlockThreads, 0, labels,
           int32_t(total), int32_t(cols), Divider<int32_t>(cols), on, off, dlogp, ctx.error_flag);
  else
    launch(ctx, nll_loss_backward_kernel<int64_t>, grid_for(total), kBlockThreads, 0, labels,
           total, cols, Divider<int64_t>(cols), on, off, dlogp, ctx.error_flag);
}

void launch_log_softmax_nll(const KernelContext& ctx, FloatData x, const int32_t* labels,
                            int64_t rows, int64_t cols, float grad_scale, float smoothing,
                            FloatData y, float* loss, bool accumulate, FloatData dx) {
  const float off = smoothing / float(cols), on = off + (1.0f - smoothing);
  launch(ctx, log_softmax_nll_kernel, loss_grid(rows), kBlockThreads, 0, x, labels, rows, cols,
         grad_scale, smoothing, on, off, y, loss, accumulate, dx, ctx.scratch, ctx.error_flag);
}

void launch_mse_loss(const KernelContext& ctx, FloatData x, const int32_t* labels, int64_t rows,
                     int64_t cols, float grad_scale, float* loss, bool accumulate, FloatData dx) {
  const float k = 2.0f * grad_scale / float(cols);
  launch(ctx, mse_loss_kernel, loss_grid(rows), kBlockThreads, 0, x, labels, rows, cols, k, loss,
         accumulate, dx, ctx.scratch, ctx.error_flag);
}

void launch_count_correct(const KernelContext& ctx, FloatData scores, const int32_t* labels,
                          int64_t rows, int64_t cols, float* correct) {
  if (rows <= 0 || cols <= 0) return;
  launch(ctx, count_correct_kernel, warp_row_grid(rows), kBlockThreads, 0, scores, labels, rows,
         cols, correct, ctx.error_flag);
}

}  // namespace trident::cuda
