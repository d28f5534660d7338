// CudaDevice's float32 convolutions by Winograd's F(2x2, 3x3) (kernels/cuda/winograd.h): 3x3
// kernels at stride 1 with padding 0-2, 16 or more channels each way, float32 without TF32
// (16-bit and TF32 convolutions run on tensor cores: implicit_conv); 2.25x fewer multiply-adds
// than im2col's products, and no patch matrix:
//   forward:  U = transform(w); y = launch_winograd_conv(x, U) + b
//   backward: dw = launch_winograd_weight_gradient_fused(x, dy) (per-slice sums, then their sum
//             in order and the inverse transform); db = channel sums of dy;
//             dx = launch_winograd_conv(dy, transform(flipped w)) with padding 2 - P.
// Workspace: U, then the weight gradient's per-slice sums. Nothing is kept from the forward
// for the backward. ResNet fp32 step on an H200: 3.04 ms with im2col + cuBLAS, 2.50 with the
// fused forward and data gradient (the weight gradient's transforms through global memory and
// cuBLAS between them), 2.41 with the fused weight gradient as well, 2.18 with each thread's
// fill addresses worked out once (session 36).
#include <algorithm>

#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/channel.h"
#include "trident/kernels/cuda/winograd.h"

namespace trident::cuda {
namespace {

size_t area_bytes(int64_t floats) { return size_t((floats * 4 + 255) / 256 * 256); }

struct WinogradPlan {
  size_t u_bytes, partial_bytes;
  explicit WinogradPlan(const Conv2dShape& s)
      : u_bytes(area_bytes(16 * s.in_channels * s.out_channels)),
        partial_bytes(area_bytes(winograd_slices(s).partial_elements(s))) {}
  size_t bytes() const { return u_bytes + partial_bytes; }
  float* u(char* ws) const { return reinterpret_cast<float*>(ws); }
  float* partial(char* ws) const { return reinterpret_cast<float*>(ws + u_bytes); }
};

}  // namespace

bool CudaDevice::winograd_conv(const Conv2dShape& s) const {
  return winograd_conv_ && s.dtype == DType::f32 && !s.allow_tf32 && !tf32_ &&
         winograd_tiles_fit(s);
}

size_t CudaDevice::winograd_workspace_bytes(const Conv2dShape& s) const {
  return WinogradPlan(s).bytes();
}

void CudaDevice::winograd_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                  const Tensor& b, const Tensor& y, const Tensor& workspace) {
  const KernelContext ctx = kernel_context();
  const WinogradPlan plan(s);
  float* U = plan.u(device_ptr<char>(workspace));
  launch_winograd_kernel(ctx, s.in_channels, s.out_channels, device_ptr<const float>(w), false,
                         U);
  check_launch("winograd_kernel");
  launch_winograd_conv(ctx, s, device_ptr<const float>(x), U, device_ptr<const float>(b),
                       device_ptr<float>(y));
  check_launch("winograd_conv");
}

void CudaDevice::winograd_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                   const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                   const Tensor& db, const Tensor& workspace,
                                   bool weight_gradient_beside) {
  const KernelContext ctx = kernel_context();
  const WinogradPlan plan(s);
  char* ws = device_ptr<char>(workspace);
  // Beside: dw and db on the side stream (they read x and dy, which nothing writes before the
  // join, and the workspace's partials, apart from the U the data gradient writes).
  KernelContext weight_ctx = ctx;
  if (weight_gradient_beside) {
    fork_work_beside();
    weight_ctx = side_kernel_context();
  }
  launch_winograd_weight_gradient_fused(weight_ctx, s, device_ptr<const float>(x),
                                        device_ptr<const float>(dy), plan.partial(ws),
                                        device_ptr<float>(dw));
  check_launch("winograd_weight_gradient");
  if (db.defined()) {
    launch_channel_sums(weight_ctx, DType::f32, device_ptr<const void>(dy), nullptr,
                        device_ptr<float>(db), s.batch, s.out_channels,
                        s.out_height() * s.out_width(), 0.0f);
    check_launch("channel_sums");
  }
  if (!dx.defined()) return;
  // The data gradient's channels are the forward's output ones, its outputs the input ones.
  float* U = plan.u(ws);
  launch_winograd_kernel(ctx, s.out_channels, s.in_channels, device_ptr<const float>(w), true, U);
  check_launch("winograd_kernel");
  launch_winograd_conv(ctx, input_gradient_shape(s), device_ptr<const float>(dy), U, nullptr,
                       device_ptr<float>(dx));
  check_launch("winograd_conv");
}

}  // namespace trident::cuda
