// CUDA convolution helpers around the cuBLAS GEMMs (backends/cuda/cuda_conv.cpp): im2col over the
// whole batch (with the bias broadcast into y), col2im as a gather (no atomics), and the fixed
// order reduction of per-sample weight/bias gradients.
#include <string>

#include "trident/core/error.h"
#include "trident/kernels/cuda/cuda_kernels.h"
#include "trident/kernels/cuda/launch.cuh"

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

// Items [0, col_items): one per (n, c, oh, ow), writing its KH*KW patch values down the rows
// of col (consecutive threads write consecutive addresses); the (c == 0) items also write the
// ones row. Items past col_items broadcast the bias into y[n, oc, p].
__global__ void im2col_bias_fill_kernel(ConvDims d, const float* x, float* col, bool ones_row,
                                        int col_items, const float* bias, int y_items,
                                        float* y) {
  const int total = col_items + y_items;
  for (int i = int(first_index()); i < total; i += int(grid_step())) {
    if (i < col_items) {
      const int p = i % d.ohw, t = i / d.ohw, c = t % d.c, n = t / d.c;
      const int oh = p / d.ow, ow = p - oh * d.ow;
      const int h0 = oh * d.s - d.pad, w0 = ow * d.s - d.pad;
      const float* xc = x + (n * d.c + c) * d.h * d.w;
      float* out = col + (n * d.rows + c * d.kh * d.kw) * d.ohw + p;
      for (int kh = 0; kh < d.kh; ++kh) {
        const int h = h0 + kh;
        const bool row_inside = h >= 0 && h < d.h;
        for (int kw = 0; kw < d.kw; ++kw, out += d.ohw) {
          const int w = w0 + kw;
          *out = row_inside && w >= 0 && w < d.w ? xc[h * d.w + w] : 0.f;
        }
      }
      if (ones_row && c == 0) col[(n * d.rows + d.ckk) * d.ohw + p] = 1.f;
    } else {
      const int j = i - col_items;  // y[n, oc, p]
      y[j] = bias[(j / d.ohw) % d.oc];
    }
  }
}

// One thread per pixel of dx; adds in increasing (kh, kw), the order of the CPU's scatter. Only
// kernel offsets with (h + pad - kh) % stride == 0 reach a patch: kh steps by the stride while
// the output row oh = (h + pad - kh) / stride steps down by one.
__global__ void col2im_kernel(ConvDims d, const float* dcol, float* dx) {
  const int total = d.n * d.c * d.h * d.w;
  for (int i = int(first_index()); i < total; i += int(grid_step())) {
    const int w = i % d.w, t = i / d.w, h = t % d.h, t2 = t / d.h, c = t2 % d.c, n = t2 / d.c;
    const float* dcol_nc = dcol + (n * d.rows + c * d.kh * d.kw) * d.ohw;
    const int hp = h + d.pad, wp = w + d.pad;
    const int kw_first = wp % d.s, ow_first = wp / d.s;
    float sum = 0.f;
    for (int kh = hp % d.s, oh = hp / d.s; kh < d.kh && oh >= 0; kh += d.s, --oh) {
      if (oh >= d.oh) continue;
      for (int kw = kw_first, ow = ow_first; kw < d.kw && ow >= 0; kw += d.s, --ow) {
        if (ow >= d.ow) continue;
        sum += dcol_nc[(kh * d.kw + kw) * d.ohw + oh * d.ow + ow];
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
  const int col_items = col ? d.n * d.c * d.ohw : 0;
  const int y_items = bias ? d.n * d.oc * d.ohw : 0;
  if (col_items + y_items <= 0) return;
  im2col_bias_fill_kernel<<<grid_for(col_items + y_items), kBlockThreads, 0, stream>>>(
      d, x, col, ones_row, col_items, bias, y_items, y);
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
