// CudaDevice's float32 convolutions by Winograd's F(2x2, 3x3) (kernels/cuda/winograd.h): 3x3
// kernels at stride 1 with padding 0-2, 16 or more channels each way, float32 without TF32
// (16-bit and TF32 convolutions run on tensor cores: implicit_conv); 2.25x fewer multiply-adds
// than im2col's products:
//   forward:  U = transform(w); y = launch_winograd_conv(x, U) + b (one fused kernel)
//   backward: V = transform(x); E = transform(dy); Mw = E V^T (cuBLAS, strided batch);
//             dw = inverse(sum of Mw over the groups); db = channel sums of dy;
//             dx = launch_winograd_conv(dy, transform(flipped w)) with padding 2 - P.
// Workspace: V, E, U, Mw. The forward leaves nothing for the backward (V would be 103 MB a
// 28x28 x 32-channel layer at batch 256 written for it; the backward makes it in 34 us).
#include <algorithm>

#include "trident/backends/cuda/cublas_gemm.h"
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/channel.h"
#include "trident/kernels/cuda/winograd.h"

namespace trident::cuda {
namespace {

constexpr int64_t kMinChannels = 16;  // below, the products are too thin to gain
// Beyond this the im2col path, which works in chunks of the batch, is used instead.
constexpr int64_t kMaxWorkspaceBytes = int64_t(2) << 30;

size_t area_bytes(int64_t floats) { return size_t((floats * 4 + 255) / 256 * 256); }

bool tiles_fit(const Conv2dShape& s) {
  return s.kernel_h == 3 && s.kernel_w == 3 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_h >= 0 && s.pad_h <= 2 && s.pad_w >= 0 && s.pad_w <= 2 &&
         s.in_channels >= kMinChannels && s.out_channels >= kMinChannels;
}

struct WinogradPlan {
  WinogradTiles tiles;  // of the weight gradient
  size_t v_bytes, e_bytes, u_bytes, mw_bytes;

  explicit WinogradPlan(const Conv2dShape& s)
      : tiles(s),
        v_bytes(area_bytes(tiles.domain_elements(tiles.C))),
        e_bytes(area_bytes(tiles.domain_elements(tiles.OC))),
        u_bytes(area_bytes(16 * s.in_channels * s.out_channels)),
        mw_bytes(area_bytes(tiles.weight_elements())) {}
  size_t bytes() const { return v_bytes + e_bytes + u_bytes + mw_bytes; }
  float* v(char* ws) const { return reinterpret_cast<float*>(ws); }
  float* e(char* ws) const { return reinterpret_cast<float*>(ws + v_bytes); }
  float* u(char* ws) const { return reinterpret_cast<float*>(ws + v_bytes + e_bytes); }
  float* mw(char* ws) const {
    return reinterpret_cast<float*>(ws + v_bytes + e_bytes + u_bytes);
  }
};

}  // namespace

bool CudaDevice::winograd_conv(const Conv2dShape& s) const {
  // The data gradient too (a stride-1 convolution of dy with padding 2 - P), where dy's zero
  // border adds at most a quarter to its work (4 H W <= 5 OH OW).
  return winograd_conv_ && s.dtype == DType::f32 && !s.allow_tf32 && !tf32_ && s.batch > 0 &&
         tiles_fit(s) && tiles_fit(input_gradient_shape(s)) &&
         4 * s.height * s.width <= 5 * s.out_height() * s.out_width() &&
         int64_t(WinogradPlan(s).bytes()) <= kMaxWorkspaceBytes;
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
                                   bool workspace_valid) {
  const KernelContext ctx = kernel_context();
  const WinogradPlan plan(s);
  const WinogradTiles& t = plan.tiles;
  char* ws = device_ptr<char>(workspace);
  if (!workspace_valid) {  // V, as an earlier backward leaves it
    launch_winograd_input(ctx, t, device_ptr<const float>(x), plan.v(ws));
    check_launch("winograd_input");
  }
  launch_winograd_gradient(ctx, t, device_ptr<const float>(dy), plan.e(ws));
  check_launch("winograd_gradient");
  GemmCall gw;  // Mw[g, xi][OC, C] = E[g, xi][OC, columns] V[g, xi][C, columns]^T
  gw.trans_b = true;
  gw.m = t.OC, gw.n = t.C, gw.k = t.columns;
  gw.a = plan.e(ws), gw.lda = t.columns, gw.stride_a = t.OC * t.columns;
  gw.b = plan.v(ws), gw.ldb = t.columns, gw.stride_b = t.C * t.columns;
  gw.c = plan.mw(ws), gw.ldc = t.C, gw.stride_c = t.OC * t.C;
  gw.batch = t.groups * 16;
  gemm_->gemm(gw);
  launch_winograd_weight_gradient(ctx, t, plan.mw(ws), device_ptr<float>(dw));
  check_launch("winograd_weight_gradient");
  if (db.defined()) {
    launch_channel_sums(ctx, DType::f32, device_ptr<const void>(dy), nullptr,
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
