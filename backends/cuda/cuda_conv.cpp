// Convolution on CUDA: im2col over the whole batch, then strided-batched cuBLAS GEMMs, one
// matrix per sample, that read and write NCHW in place.
//
// Workspace: col [N, CKK + 1, P] then dw_part [N, OC, CKK + 1]  (CKK = C*KH*KW, P = OH*OW).
// Forward:  y = b (broadcast, in the im2col launch); y_n[OC, P] += W[OC, CKK] col_n[CKK, P];
//           col_n gets a row of ones, for the backward.
// Backward: col_n as the forward left it (after_forward), else im2col again, ones included; dw_part_n[OC, CKK+1] = dy_n[OC, P] col_n^T, whose last
//           column is the per-sample bias gradient; dw, db = sums over n (fixed order);
//           dcol_n[CKK, P] = W^T dy_n (over col, which is free again); dx = col2im(dcol).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/core/error.h"
#include "trident/kernels/cuda/cuda_kernels.h"

namespace trident::cuda {
namespace {

size_t round_floats(size_t floats) { return (floats + 63) / 64 * 64; }  // 256-byte regions

struct ConvLayout {
  int64_t ckk, p, oc, n;
  size_t col_floats, dw_part_floats;
  explicit ConvLayout(const Conv2dShape& s)
      : ckk(s.in_channels * s.kernel_h * s.kernel_w),
        p(s.out_height() * s.out_width()),
        oc(s.out_channels),
        n(s.batch),
        col_floats(round_floats(conv2d_col_floats(s))),
        dw_part_floats(round_floats(size_t(s.batch * s.out_channels * (ckk + 1)))) {}
};

void check_shape(const Conv2dShape& s) {
  if (s.stride < 1 || s.padding < 0 || s.kernel_h < 1 || s.kernel_w < 1 || s.batch < 0 ||
      s.in_channels < 1 || s.out_channels < 0 || s.out_height() < 1 || s.out_width() < 1)
    throw ShapeError("CUDA conv2d: bad shape (" + std::to_string(s.in_channels) +
                     " channels, kernel " + std::to_string(s.kernel_h) + "x" +
                     std::to_string(s.kernel_w) + ", stride " + std::to_string(s.stride) +
                     ", padding " + std::to_string(s.padding) + " on " +
                     std::to_string(s.height) + "x" + std::to_string(s.width) + ")");
  check_conv2d_fits(s);
}

}  // namespace

size_t CudaDevice::conv2d_workspace_bytes(const Conv2dShape& s) const {
  check_shape(s);
  const ConvLayout L(s);
  return (L.col_floats + L.dw_part_floats) * sizeof(float);
}

void CudaDevice::conv2d_forward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                                DeviceMemory b, DeviceMemory y, DeviceMemory workspace) {
  check_shape(s);
  const ConvLayout L(s);
  if (L.n == 0 || L.oc == 0) return;
  if (!workspace)
    throw ShapeError(info_.id() + ": conv2d_forward needs conv2d_workspace_bytes() of workspace");
  float* col = device_ptr<float>(workspace);
  float* out = device_ptr<float>(y);
  const float* bias = device_ptr<const float>(b);
  make_current();
  // The ones row is for a backward that reuses these columns (after_forward).
  launch_im2col_bias_fill(stream_, s, device_ptr<const float>(x), col, true, bias, out);
  check_launch("im2col_bias_fill");
  sgemm(false, false, L.oc, L.p, L.ckk, 1.0f, device_ptr<const float>(w), L.ckk, 0, col, L.p,
        (L.ckk + 1) * L.p, bias ? 1.0f : 0.0f, out, L.p, L.oc * L.p, L.n);
}

void CudaDevice::conv2d_backward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w,
                                 DeviceMemory dy, DeviceMemory dx, DeviceMemory dw,
                                 DeviceMemory db, DeviceMemory workspace, bool after_forward) {
  check_shape(s);
  const ConvLayout L(s);
  if (L.n == 0 || L.oc == 0) {  // nothing flows: every gradient is zero
    fill(dw, L.oc * L.ckk, 0.0f);
    if (db) fill(db, L.oc, 0.0f);
    if (dx) fill(dx, s.batch * s.in_channels * s.height * s.width, 0.0f);
    return;
  }
  if (!workspace)
    throw ShapeError(info_.id() + ": conv2d_backward needs conv2d_workspace_bytes() of workspace");
  float* col = device_ptr<float>(workspace);
  float* dw_part = col + L.col_floats;
  const float* grad_out = device_ptr<const float>(dy);
  make_current();
  if (!after_forward) {  // else col (with its ones row) is still the forward's
    launch_im2col_bias_fill(stream_, s, device_ptr<const float>(x), col, true, nullptr, nullptr);
    check_launch("im2col_bias_fill");
  }
  // dw_part_n[OC, CKK+1] = dy_n[OC, P] * col_n^T (col_n stored [CKK+1, P]).
  sgemm(false, true, L.oc, L.ckk + 1, L.p, 1.0f, grad_out, L.p, L.oc * L.p, col, L.p,
        (L.ckk + 1) * L.p, 0.0f, dw_part, L.ckk + 1, L.oc * (L.ckk + 1), L.n);
  launch_conv_grad_reduce(stream_, s, dw_part, device_ptr<float>(dw), device_ptr<float>(db));
  check_launch("conv_grad_reduce");
  if (!dx) return;
  // dcol_n[CKK, P] = W^T[CKK, OC] * dy_n[OC, P], written over col_n's patch rows.
  sgemm(true, false, L.ckk, L.p, L.oc, 1.0f, device_ptr<const float>(w), L.ckk, 0, grad_out, L.p,
        L.oc * L.p, 0.0f, col, L.p, (L.ckk + 1) * L.p, L.n);
  launch_col2im(stream_, s, col, device_ptr<float>(dx));
  check_launch("col2im");
}

}  // namespace trident::cuda
