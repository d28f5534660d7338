// Convolution (im2col + one CLBlast GEMM for the whole batch) and max pooling, NCHW.
//
// Workspace: col [C*KH*KW, L], product [OC, L], L = N*OH*OW (channel-major, see conv.cl), then
// the split-K partial sums of dW [S, OC, CKK].
// Forward:  col = im2col(x); y = nchw(W[OC, CKK] col) + b (one own-GEMM launch, or a CLBlast
//           product and a layout pass).
// Backward: col = im2col(x) (unless the forward's is still there, after_forward);
//           product = dy in channel-major; dW = product col^T; db = row sums of product; col = W^T product (col is free again); dx = col2im(col).
// dW is a long-K product (K = L is the whole batch's pixels, M x N = OC x CKK is small), which
// one GEMM runs on a handful of work-groups: it is split into S slices of L, run as one strided
// batched GEMM, and the S partial dW are summed by the sum_rows kernel.
#include <clblast.h>

#include <algorithm>

#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/error.h"

namespace trident::opencl {
namespace {

struct ConvDims {
  cl_uint batch, channels, height, width, out_channels, kernel_h, kernel_w, stride, pad;
  cl_uint out_h, out_w;
  size_t patch, cols;        // CKK and L
  size_t slices, slice_cols;  // dW split-K: S slices of slice_cols columns (+ a tail), or 0
  size_t taps() const { return patch + 1; }  // col's rows: the patch and the ones row
  // Partial [dW | db] sums: S slices plus one for the tail L - S * slice_cols when there is
  // one; a single one without split-K.
  size_t partial_rows() const {
    return slices == 0 ? 1 : slices + (cols > slices * slice_cols ? 1 : 0);
  }
};

ConvDims conv_dims(const Conv2dShape& s) {
  if (s.stride < 1 || s.padding < 0 || s.kernel_h < 1 || s.kernel_w < 1 || s.out_height() < 1 ||
      s.out_width() < 1)
    throw ShapeError("OpenCL conv2d: bad shape (kernel " + std::to_string(s.kernel_h) + "x" +
                     std::to_string(s.kernel_w) + ", stride " + std::to_string(s.stride) +
                     ", padding " + std::to_string(s.padding) + " on " +
                     std::to_string(s.height) + "x" + std::to_string(s.width) + ")");
  ConvDims d{};
  d.batch = checked_u32(s.batch, "batch");
  d.channels = checked_u32(s.in_channels, "in_channels");
  d.height = checked_u32(s.height, "height");
  d.width = checked_u32(s.width, "width");
  d.out_channels = checked_u32(s.out_channels, "out_channels");
  d.kernel_h = checked_u32(s.kernel_h, "kernel_h");
  d.kernel_w = checked_u32(s.kernel_w, "kernel_w");
  d.stride = checked_u32(s.stride, "stride");
  d.pad = checked_u32(s.padding, "padding");
  d.out_h = checked_u32(s.out_height(), "out_height");
  d.out_w = checked_u32(s.out_width(), "out_width");
  d.patch = size_t(d.channels) * d.kernel_h * d.kernel_w;
  d.cols = size_t(d.batch) * d.out_h * d.out_w;
  // Split K = L for dW into slices of at least kSliceColumns, while the partial sums stay small.
  // Each slice is one work-group's K loop on a GPU: short slices give more work-groups and fewer
  // latency-bound rounds (the seed CNN's 115200-column conv1 gradient: 256 slices of 450).
  constexpr size_t kSliceColumns = 256, kMaxSlices = 256, kMaxPartialFloats = size_t(8) << 20;
  const size_t weights = size_t(d.out_channels) * d.taps();
  d.slices = std::min({d.cols / kSliceColumns, kMaxSlices,
                       weights ? kMaxPartialFloats / weights : size_t(0)});
  if (d.slices < 2) d.slices = 0;  // one GEMM is fine
  d.slice_cols = d.slices ? d.cols / d.slices : 0;
  checked_u32(int64_t(d.taps() * d.cols), "conv im2col size");
  checked_u32(int64_t(size_t(d.out_channels) * d.cols), "conv output size");
  checked_u32(int64_t(size_t(d.batch) * d.channels * d.height * d.width), "conv input size");
  return d;
}

}  // namespace

size_t OpenClDevice::conv2d_workspace_bytes(const Conv2dShape& s) const {
  const ConvDims d = conv_dims(s);
  return ((d.taps() + d.out_channels) * d.cols + d.partial_rows() * d.out_channels * d.taps()) *
         sizeof(float);
}

void OpenClDevice::conv2d_forward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                                  DeviceMemory b, DeviceMemory y, DeviceMemory workspace) {
  const ConvDims d = conv_dims(s);
  if (d.cols == 0 || d.out_channels == 0) return;
  if (!workspace) throw ShapeError(label_ + ": conv2d_forward needs conv2d_workspace_bytes()");
  const DeviceMemory col = workspace, product = workspace.at(d.taps() * d.cols * sizeof(float));
  launch(Kernel::im2col, LaunchRange::items(size_t(d.channels) * d.cols), buffer(x, 4, "x"),
         buffer(col, 4, "workspace"), d.batch, d.channels, d.height, d.width, d.kernel_h,
         d.kernel_w, d.stride, d.pad, d.out_h, d.out_w);
  // The own GEMM writes y in NCHW with the bias added; CLBlast needs the product and a pass.
  TiledGemm t = tiled_args(false, false, d.out_channels, d.cols, d.patch, 1.0f, w, d.patch, col,
                           d.cols, 0.0f, y, d.cols);
  t.c_plane = size_t(d.out_h) * d.out_w;
  t.bias = b;
  t.bias_kind = b ? 2 : 0;
  if (tiled_gemm(t)) return;
  sgemm(false, false, d.out_channels, d.cols, d.patch, 1.0f, w, d.patch, col, d.cols, 0.0f,
        product, d.cols);
  launch(Kernel::conv_output_nchw, LaunchRange::items(d.out_channels * d.cols),
         buffer(product, 4, "workspace"), buffer(y, 4, "y"),
         b ? buffer(b, 4, "bias") : BufferArg{}, cl_int(bool(b)), d.batch, d.out_channels,
         cl_uint(d.out_h * d.out_w));
}

void OpenClDevice::conv2d_backward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                                   DeviceMemory dy, DeviceMemory dx, DeviceMemory dw,
                                   DeviceMemory db, DeviceMemory workspace,
                                   bool after_forward) {
  const ConvDims d = conv_dims(s);
  if (!workspace) throw ShapeError(label_ + ": conv2d_backward needs conv2d_workspace_bytes()");
  const DeviceMemory col = workspace, product = workspace.at(d.taps() * d.cols * sizeof(float));
  if (d.cols == 0) {  // an empty batch: every gradient is zero
    fill(dw, int64_t(d.out_channels * d.patch), 0.0f);
    if (db) fill(db, d.out_channels, 0.0f);
    return;
  }
  if (!after_forward)  // else col still holds the forward's im2col(x)
    launch(Kernel::im2col, LaunchRange::items(size_t(d.channels) * d.cols), buffer(x, 4, "x"),
           buffer(col, 4, "workspace"), d.batch, d.channels, d.height, d.width, d.kernel_h,
           d.kernel_w, d.stride, d.pad, d.out_h, d.out_w);
  launch(Kernel::conv_grad_channel_major, LaunchRange::items(d.out_channels * d.cols),
         buffer(dy, 4, "dy"), buffer(product, 4, "workspace"), d.batch, d.out_channels,
         cl_uint(d.out_h * d.out_w));
  // partial [rows, OC, CKK + 1] = product[OC, L] col[CKK + 1, L]^T, split over L when L is
  // long (see the top); then dw and db are its sums over rows.
  const size_t taps = d.taps(), grads = size_t(d.out_channels) * taps;
  const DeviceMemory partial = workspace.at((taps + d.out_channels) * d.cols * sizeof(float));
  if (d.slices == 0) {
    sgemm(false, true, d.out_channels, taps, d.cols, 1.0f, product, d.cols, col, d.cols, 0.0f,
          partial, taps);
  } else {
    const size_t done = d.slices * d.slice_cols;
    // The tail slice (d.cols - done columns) is the last batch entry.
    sgemm_strided_batched(false, true, d.out_channels, taps, d.slice_cols, 1.0f, product, d.cols,
                          d.slice_cols, col, d.cols, d.slice_cols, partial, taps, grads,
                          d.partial_rows(), d.cols > done ? d.cols - done : d.slice_cols);
  }
  launch(Kernel::conv_grad_sum, LaunchRange::items(grads), buffer(partial, 4, "workspace"),
         cl_uint(d.partial_rows()), d.out_channels, cl_uint(taps), buffer(dw, 4, "dw"),
         db ? buffer(db, 4, "db") : BufferArg{}, cl_int(bool(db)));
  if (!dx) return;
  // col[CKK, L] = W[OC, CKK]^T product[OC, L]
  sgemm(true, false, d.patch, d.cols, d.out_channels, 1.0f, w, d.patch, product, d.cols, 0.0f,
        col, d.cols);
  launch(Kernel::col2im, LaunchRange::items(size_t(d.batch) * d.channels * d.height * d.width),
         buffer(col, 4, "workspace"), buffer(dx, 4, "dx"), d.batch, d.channels, d.height,
         d.width, d.kernel_h, d.kernel_w, d.stride, d.pad, d.out_h, d.out_w);
}

void OpenClDevice::maxpool2d_forward(const Pool2dShape& s, DeviceMemory x, DeviceMemory y,
                                     DeviceMemory argmax) {
  if (s.kernel < 1 || s.stride < 1 || s.out_height() < 1 || s.out_width() < 1)
    throw ShapeError(label_ + ": maxpool2d with kernel " + std::to_string(s.kernel) +
                     ", stride " + std::to_string(s.stride) + " does not fit " +
                     std::to_string(s.height) + "x" + std::to_string(s.width));
  const cl_uint planes = checked_u32(s.batch * s.channels, "batch*channels");
  launch(Kernel::maxpool2d_forward,
         LaunchRange::items(checked_u32(planes * s.out_height() * s.out_width(), "pool output")),
         buffer(x, 4, "x"), buffer(y, 4, "y"), buffer(argmax, 4, "argmax"), planes,
         cl_uint(s.height), cl_uint(s.width), cl_uint(s.kernel), cl_uint(s.stride),
         cl_uint(s.out_height()), cl_uint(s.out_width()), cl_int(s.relu));
}

void OpenClDevice::maxpool2d_backward(const Pool2dShape& s, DeviceMemory dy, DeviceMemory argmax,
                                      DeviceMemory dx) {
  if (s.kernel < 1 || s.stride < 1 || s.out_height() < 1 || s.out_width() < 1)
    throw ShapeError(label_ + ": maxpool2d_backward with a shape that has no output");
  const cl_uint planes = checked_u32(s.batch * s.channels, "batch*channels");
  launch(Kernel::maxpool2d_backward,
         LaunchRange::items(checked_u32(planes * s.height * s.width, "pool input")),
         buffer(dy, 4, "dy"), buffer(argmax, 4, "argmax"), buffer(dx, 4, "dx"), planes,
         cl_uint(s.height), cl_uint(s.width), cl_uint(s.kernel), cl_uint(s.stride),
         cl_uint(s.out_height()), cl_uint(s.out_width()));
}

}  // namespace trident::opencl
