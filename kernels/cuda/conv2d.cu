// CUDA convolution helpers around the cuBLAS GEMMs (backends/cuda/cuda_conv.cpp): im2col over the
// whole batch (with the bias broadcast into y), col2im as a gather (no atomics), and the fixed
// order reduction of per-sample weight/bias gradients.
#include <string>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"

namespace trident::cuda {
namespace {

// 32-bit index arithmetic (checked by check_conv2d_fits): division is several times cheaper.
struct ConvDims {
  int n, c, h, w, oc, kh, kw, s, pad, oh, ow, ohw, ckk, rows;  // rows = ckk + 1
};

ConvDims dims_of(const Conv2dShape& s) {
  ConvDims d;
  d.n = int(s.batch); d.c = int(s.in_channels); d.h = int(s.height); d.w = int(s.width);
  d.oc = int(s.out_channels); d.kh = int(s.kernel_h); d.kw = int(s.kernel_w);
  d.s = int(s.stride); d.pad = int(s.padding);
  d.oh = int(s.out_height()); d.ow = int(s.out_width()); d.ohw = d.oh * d.ow;
  d.ckk = d.c * d.kh * d.kw; d.rows = d.ckk + 1;
  return d;
}

__global__ void im2col_bias_fill_kernel(ConvDims d, const float* x, float* col, int col_rows,
                                        int col_items, const float* bias, int y_items,
                                        float* y) {
  const int total = col_items + y_items;
  for (int i = int(first_index()); i < total; i += int(grid_step())) {
    if (i < col_items) {
      const int p = i % d.ohw, t = i / d.ohw, row = t % col_rows, n = t / col_rows;
      float v = 1.f;  // the ones row
      if (row < d.ckk) {
        const int kw = row % d.kw, t2 = row / d.kw, kh = t2 % d.kh, c = t2 / d.kh;
        const int h = (p / d.ow) * d.s - d.pad + kh, w = (p % d.ow) * d.s - d.pad + kw;
        v = (h >= 0 && h < d.h && w >= 0 && w < d.w) ? x[((n * d.c + c) * d.h + h) * d.w + w]
                                                     : 0.f;
      }
      col[(n * d.rows + row) * d.ohw + p] = v;
    } else {
      const int j = i - col_items;  // y[n, oc, p]
      y[j] = bias[(j / d.ohw) % d.oc];
    }
  }
}

// Adds, per pixel, in increasing (kh, kw): the order the CPU's scatter uses.
__global__ void col2im_kernel(ConvDims d, const float* dcol, float* dx) {
  const int total = d.n * d.c * d.h * d.w;
  for (int i = int(first_index()); i < total; i += int(grid_step())) {
    const int w = i % d.w, t = i / d.w, h = t % d.h, t2 = t / d.h, c = t2 % d.c, n = t2 / d.c;
    const float* dcol_nc = dcol + (n * d.rows + c * d.kh * d.kw) * d.ohw;
    float sum = 0.f;
    for (int kh = 0; kh < d.kh; ++kh) {
      const int hh = h + d.pad - kh;  // = oh * stride
      if (hh < 0) break;
      if (hh % d.s != 0 || hh / d.s >= d.oh) continue;
      for (int kw = 0; kw < d.kw; ++kw) {
        const int ww = w + d.pad - kw;
        if (ww < 0) break;
        if (ww % d.s != 0 || ww / d.s >= d.ow) continue;
        sum += dcol_nc[(kh * d.kw + kw) * d.ohw + (hh / d.s) * d.ow + ww / d.s];
      }
    }
    dx[i] = sum;
  }
}

constexpr int kColumnsPerBlock = 32;
constexpr int kSampleLanes = 32;

// Column sums of dw_part viewed as [N, OC * (CKK + 1)], as in reduce.cu's sum_rows, with the
// results split into dw and db.
__global__ void conv_grad_reduce_kernel(ConvDims d, const float* dw_part, float* dw, float* db) {
  __shared__ float partial[kSampleLanes][kColumnsPerBlock + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int cols = d.oc * d.rows;
  const int col = blockIdx.x * kColumnsPerBlock + tx;
  float acc = 0.f;
  if (col < cols) {
#pragma unroll 4
    for (int n = ty; n < d.n; n += kSampleLanes) acc += dw_part[int64_t(n) * cols + col];
  }
  partial[ty][tx] = acc;
  __syncthreads();
  for (int half = kSampleLanes / 2; half > 0; half /= 2) {
    if (ty < half) partial[ty][tx] += partial[ty + half][tx];
    __syncthreads();
  }
  if (ty == 0 && col < cols) {
    const int oc = col / d.rows, k = col % d.rows;
    if (k < d.ckk) dw[oc * d.ckk + k] = partial[0][tx];
    else if (db) db[oc] = partial[0][tx];
  }
}

}  // namespace

size_t conv2d_col_floats(const Conv2dShape& s) {
  const int64_t ckk = s.in_channels * s.kernel_h * s.kernel_w;
  return size_t(s.batch) * size_t(ckk + 1) * size_t(s.out_height() * s.out_width());
}

void check_conv2d_fits(const Conv2dShape& s) {
  const int64_t limit = int64_t(1) << 30;  // leaves room for one grid stride past the end
  const int64_t ohw = s.out_height() * s.out_width();
  const int64_t rows = s.in_channels * s.kernel_h * s.kernel_w + 1;
  const int64_t col = s.batch * rows * ohw, out = s.batch * s.out_channels * ohw;
  const int64_t in = s.batch * s.in_channels * s.height * s.width;
  if (col + out >= limit || in >= limit || s.out_channels * rows * s.batch >= limit)
    throw ShapeError("CUDA conv2d: batch " + std::to_string(s.batch) + " of " +
                     std::to_string(s.in_channels) + "x" + std::to_string(s.height) + "x" +
                     std::to_string(s.width) + " is too large for one call (patch matrix of " +
                     std::to_string(col) + " floats); use a smaller batch");
}

void launch_im2col_bias_fill(cudaStream_t stream, const Conv2dShape& s, const float* x,
                             float* col, bool ones_row, const float* bias, float* y) {
  const ConvDims d = dims_of(s);
  const int col_rows = ones_row ? d.rows : d.ckk;
  const int col_items = col ? d.n * col_rows * d.ohw : 0;
  const int y_items = bias ? d.n * d.oc * d.ohw : 0;
  if (col_items + y_items <= 0) return;
  im2col_bias_fill_kernel<<<grid_for(col_items + y_items), kBlockThreads, 0, stream>>>(
      d, x, col, col_rows, col_items, bias, y_items, y);
}

void launch_col2im(cudaStream_t stream, const Conv2dShape& s, const float* dcol, float* dx) {
  const ConvDims d = dims_of(s);
  const int64_t total = int64_t(d.n) * d.c * d.h * d.w;
  if (total <= 0) return;
  col2im_kernel<<<grid_for(total), kBlockThreads, 0, stream>>>(d, dcol, dx);
}

void launch_conv_grad_reduce(cudaStream_t stream, const Conv2dShape& s, const float* dw_part,
                             float* dw, float* db) {
  const ConvDims d = dims_of(s);
  const int cols = d.oc * d.rows;
  if (cols <= 0) return;
  const unsigned blocks = unsigned((cols + kColumnsPerBlock - 1) / kColumnsPerBlock);
  conv_grad_reduce_kernel<<<blocks, dim3(kColumnsPerBlock, kSampleLanes), 0, stream>>>(
      d, dw_part, dw, db);
}

}  // namespace trident::cuda
