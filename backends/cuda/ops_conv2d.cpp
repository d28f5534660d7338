// CudaDevice's convolution slots: im2col over a chunk of the batch, then cuBLAS GEMMs; and
// one-sample im2col/col2im. CKK = C*KH*KW, P = OH*OW; the whole batch is one chunk unless the
// workspace would pass 1 GiB. x, w, y, dx, dy and col are of s.dtype (16-bit: tensor-core GEMMs
// with float32 accumulation); dw_part, dw and db are float32 (the weight gradient is summed in
// float32). col gets a row of ones (row CKK), so that the weight gradient's product also gives
// the bias gradient.
//
// Batched (the default): col_n [CKK + 1, P] per sample, strided-batched GEMMs over the samples
// that read and write NCHW in place.
//   Forward:  y = b (in the im2col launch); y_n[OC, P] += W[OC, CKK] col_n[CKK, P]. With one
//             chunk the workspace then holds the columns of x, and the forward says so.
//   Backward: col_n as the forward left it when workspace_valid, else im2col again;
//             dw_part_n^T[CKK + 1, OC] = col_n dy_n^T (the transposed product: cuBLAS picks far
//             faster kernels for it; its last row is the per-sample bias gradient); dw, db =
//             sums over n (fixed order); then, if dx is wanted, dcol_n[CKK, P] = W^T dy_n over
//             col (the columns are gone) and dx = col2im(dcol).
//   Data gradient as a convolution (dx_as_conv: stride 1 with padding below the kernel's size,
//             the ResNet's 3x3 layers, where dy's columns fit col's area and dx the folded t,
//             and dy's zero border does not add more than a quarter to the multiply-adds):
//             dx is a convolution of dy with the flipped kernel instead, a product shaped as
//             the forward's (C rows against OC*KH*KW: cuBLAS's float32 kernels run it far
//             faster than W^T dy with its K = OC), and col2im goes:
//               colt_n[OC*KH*KW, H*W] = im2col(dy_n, padding KH-1-PH, KW-1-PW) over col;
//               wt[C, OC*KH*KW] = w with its kernel flipped (in the workspace's last area);
//               dx_n[C, H*W] = wt colt_n (folded: t[C, n H*W] = wt colt, dx = samples_first(t)).
//             ResNet fp32 step on an H200: 3.266 -> 3.088 ms with its 28x28 layers, 3.038
//             with the folded 14x14 and 7x7 ones too (their col2im took 95 us a step); its
//             float32 3x3 layers have since moved to Winograd (below), leaving this path to
//             16-bit layers with TRIDENT_CUDA_IMPLICIT_CONV=0 and thinner float32 ones.
// Pointwise (1x1, stride 1, no padding): col_n is x_n itself, so there is no im2col, dx_n =
// W^T dy_n directly, and db comes from channel_sums.
// Folded (small images: P <= 256 and CKK >= 128, e.g. the ResNet's 14x14 and 7x7 layers): the
// samples' columns side by side, col[CKK + 1, n P], so that forward and dx are each one large
// product instead of a batch of small ones, at the price of a transpose of y and of dy:
//   t[OC, n P] = W col;  y = samples_first(t) + b;  dyt = channels_first(dy);  dcol = W^T dyt;
//   the weight gradient batched as above over the folded columns, or for P <= 64 one product
//   too, straight into dw: dw[OC, CKK] = dyt col^T (K = n P; db from dy's channel sums).
// Chosen from cuBLAS alone on an H100 at batch 256 (bench/cuda_conv_gemm_layouts.cu,
// bench/results/h100_conv_gemm_layouts.txt): e.g. bf16, the 7x7 128->128 layer's three GEMMs
// 0.084 ms folded against 0.247 batched (fp32 0.330 against 0.418); the 14x14 64->64 layer's
// forward and dx 0.053 against 0.117, its weight gradient 0.062 transposed-batched, 0.095
// batched, 0.120 as one product; at 28x28 and for the 1x1 shortcuts batched stays best.
// Workspace: col, then dw_part (samples x OC x (CKK + 1) floats; none when the weight gradient
// is one product), then (folded) t, OC x n P elements, also holding dyt.
//
// Winograd (CudaDevice::winograd_conv: float32 without TF32, 3x3 at stride 1, 16 or more
// channels each way): backends/cuda/ops_conv2d_winograd.cpp.
//
// Direct (CudaDevice::direct_conv: at most 4 input channels, C * KH * KW <= 32, not float32 with
// TF32 allowed): the forward without columns (kernels/cuda/direct_conv.h), the backward as above
// (the forward leaves no columns, so it makes them).
//
// Implicit (CudaDevice::implicit_conv: channels multiples of 32, 16-bit or float32 with
// allow_tf32; stride 1, not pointwise, at least 100 output positions; or, 16-bit only, strided,
// 1x1 at any size or at least 100 output positions; or, 16-bit on the warpgroup-multiply kernels,
// channels in 64s and a patch of at most kShortPatch, any size): no columns at all;
// kernels/cuda/implicit_conv.h gathers the patches from x and dy in NHWC into shared memory for
// the forward, the data gradient (the flipped kernel over dy; strided, in stride x stride phases
// of dx's positions, each its own stride-1 product) and the weight gradient (float32
// partials over slices of the positions, summed in a fixed order); db by channel_sums. The
// workspace then holds x in NHWC, which the backward reuses. 16-bit forward and data-gradient
// products with up to 64 output channels, and 16-bit 3x3 weight gradients, copy each block's
// input rows once for all taps (kernels/cuda/halo_conv.h).
#include <algorithm>
#include <type_traits>

#include "trident/backends/cuda/cublas_gemm.h"
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/channel.h"
#include "trident/kernels/cuda/conv2d.h"
#include "trident/kernels/cuda/direct_conv.h"
#include "trident/kernels/cuda/im2col.h"
#include "trident/kernels/cuda/implicit_conv.h"

namespace trident::cuda {
namespace {

constexpr int64_t kChunkBytes = int64_t(1) << 30;  // 1 GiB of workspace per chunk at most
// The longest patch (C*KH*KW) a small-plane 16-bit convolution takes to the warpgroup kernels.
constexpr int64_t kShortPatch = 1152;

size_t round_bytes(int64_t bytes) { return size_t((bytes + 255) / 256 * 256); }

struct ConvPlan {
  int64_t ckk, p, oc, in_size, out_size;  // in_size / out_size: one sample of x / y
  int64_t element;     // bytes of an element of s.dtype
  bool pointwise;
  bool folded;         // the samples' columns side by side (see the top of the file)
  bool folded_dw;      // ... and the weight gradient as one product too (P <= 64)
  int64_t rows;        // rows of a sample's col: CKK + 1 (the ones row); 0 when pointwise
  int64_t dw_columns;  // CKK + 1, or CKK when pointwise (db then comes from channel_sums)
  int64_t chunk;       // samples per pass
  bool dx_as_conv;     // the data gradient as a convolution of dy (see the top of the file)
  size_t col_bytes, dw_part_bytes, t_bytes, flip_bytes;

  explicit ConvPlan(const Conv2dShape& s)
      : ckk(s.patch_size()),
        p(s.out_height() * s.out_width()),
        oc(s.out_channels),
        in_size(s.in_channels * s.height * s.width),
        out_size(s.out_channels * s.out_height() * s.out_width()),
        element(int64_t(dtype_size(s.dtype))),
        pointwise(s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
                  s.pad_h == 0 && s.pad_w == 0),
        folded(!pointwise && p <= 256 && ckk >= 128),
        folded_dw(folded && p <= 64),
        rows(pointwise ? 0 : ckk + 1),
        dw_columns(pointwise ? ckk : ckk + 1) {
    const int64_t dw_bytes = oc * dw_columns * int64_t(sizeof(float));
    const int64_t per_sample =
        rows * p * element + (folded ? oc * p * element : 0) + (folded_dw ? 0 : dw_bytes);
    chunk = std::min(s.batch, std::max<int64_t>(1, kChunkBytes / per_sample));
    col_bytes = round_bytes(chunk * rows * p * element);
    dw_part_bytes = folded_dw ? 0 : round_bytes(chunk * dw_bytes);
    t_bytes = folded ? round_bytes(chunk * oc * p * element) : 0;
    // Stride 1 and dy's padding KH-1-PH >= 0; at most a quarter more multiply-adds than W^T dy
    // (C*OC*KH*KW*H*W against CKK*OC*P: a convolution without padding reads dy's padding of
    // KH-1, e.g. 2.25x for 5x5 over 12x12); dy's columns fit col's area, and the folded
    // product's output t's.
    const int64_t taps = s.kernel_h * s.kernel_w, plane = s.height * s.width;
    dx_as_conv = !pointwise && s.stride_h == 1 && s.stride_w == 1 && s.pad_h < s.kernel_h &&
                 s.pad_w < s.kernel_w && 4 * plane <= 5 * p &&
                 chunk * oc * taps * plane * element <= int64_t(col_bytes) &&
                 (!folded || chunk * s.in_channels * plane * element <= int64_t(t_bytes));
    flip_bytes = dx_as_conv ? round_bytes(s.in_channels * oc * taps * element) : 0;
  }
  size_t workspace_bytes() const { return col_bytes + dw_part_bytes + t_bytes + flip_bytes; }
  // Sample n of a tensor of s.dtype whose samples are `size` elements apart.
  template <typename T>
  T* sample(T* base, int64_t n, int64_t size) const {
    using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
    return reinterpret_cast<T*>(reinterpret_cast<Byte*>(base) + n * size * element);
  }
  bool one_chunk(const Conv2dShape& s) const { return chunk >= s.batch; }
};

}  // namespace

bool CudaDevice::implicit_conv(const Conv2dShape& s) const {
  if (!implicit_conv_ || !implicit_conv_fits(s)) return false;
  const bool one_by_one = s.kernel_h == 1 && s.kernel_w == 1;
  if (s.stride_h > 1 || s.stride_w > 1) {
    // Strided: 16-bit only (ResNet tf32 on an H100: 2.316 -> 2.36 ms a step with its stride-2
    // layers here). A 1x1 kernel (a projection shortcut) at any size: cuBLAS's data gradient
    // goes through col2im, whose dx is 3/4 zeros at stride 2; ResNet bf16 1.132 -> 1.102 ms
    // with these and the 14x14 stride-2 3x3 layer here (1.111 with the 7x7 one as well).
    if (s.dtype == DType::f32) return false;
    if (one_by_one) return true;
  } else if (one_by_one && s.pad_h == 0 && s.pad_w == 0) {
    return false;  // pointwise: cuBLAS reads x in place
  }
  // Small planes (the built-in ResNet's 7x7 layers) where the warpgroup-multiply kernels take
  // every product of the layer (16-bit, channels in 64s both ways) and the patch is short: ResNet
  // on an H200, one binary, alternating, bf16 0.978 -> 0.966 ms a step, fp16 1.015 -> 1.001. Longer
  // patches stay on cuBLAS: ResNet-9's 8x8 and 4x4 layers (K = 2304 and 4608) took it 5.22 ->
  // 5.66 ms on these kernels.
  if (warpgroup_mma_ && s.dtype != DType::f32 && s.in_channels % 64 == 0 &&
      s.out_channels % 64 == 0 && s.patch_size() <= kShortPatch)
    return true;
  // Elsewhere, where it pays (ResNet bf16 on an H200, whole steps): images of 100 positions or
  // more (the 28x28 and 14x14 layers; at 7x7 the folded cuBLAS products beat the mma.sync kernels,
  // in TF32 too: H100, 2.62 against 2.50 ms with every size on them).
  return s.out_height() * s.out_width() >= 100;
}

bool CudaDevice::direct_conv(const Conv2dShape& s) const {
  // Not where TF32 is allowed: cuBLAS's TF32 GEMM is as quick there (ResNet tf32 on an H100:
  // 2.299 ms a step on cuBLAS, 2.307 direct), and float32 exactly is not what was asked for.
  return direct_conv_ && direct_conv_fits(s) && !(s.dtype == DType::f32 && s.allow_tf32);
}

size_t CudaDevice::do_conv2d_workspace_bytes(const Conv2dShape& s) const {
  if (s.batch == 0) return 0;
  if (implicit_conv(s))
    return implicit_conv_workspace(info_.compute_units, s, warpgroup_mma_).bytes;
  if (winograd_conv(s)) return winograd_workspace_bytes(s);
  const ConvPlan plan(s);
  return plan.workspace_bytes();
}

bool CudaDevice::do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                   const Tensor& b, const Tensor& y, const Tensor& workspace) {
  const KernelContext ctx = kernel_context();
  const float* bias = device_ptr<const float>(b);
  if (direct_conv(s)) {
    launch_direct_conv_forward(ctx, s, device_ptr<const void>(x), device_ptr<const void>(w),
                               bias, device_ptr<void>(y));
    check_launch("direct_conv_forward");
    return false;  // no columns in the workspace: the backward makes them
  }
  if (implicit_conv(s)) {
    launch_implicit_conv_forward(ctx, s, device_ptr<const void>(x), device_ptr<const void>(w),
                                 bias, device_ptr<void>(y), device_ptr<char>(workspace));
    check_launch("implicit_conv_forward");
    return true;
  }
  if (winograd_conv(s)) {
    winograd_forward(s, x, w, b, y, workspace);
    return false;  // nothing for the backward
  }
  const ConvPlan plan(s);
  void* col = device_ptr<void>(workspace);
  void* t = device_ptr<char>(workspace) + plan.col_bytes + plan.dw_part_bytes;
  for (int64_t n0 = 0; n0 < s.batch; n0 += plan.chunk) {
    const int64_t samples = std::min(plan.chunk, s.batch - n0);
    const void* x_n = plan.sample(device_ptr<const void>(x), n0, plan.in_size);
    void* y_n = plan.sample(device_ptr<void>(y), n0, plan.out_size);
    if (plan.folded) {  // t = W col, then y = t + b in NCHW
      launch_im2col(ctx, s, samples, x_n, col, plan.rows, true, nullptr, nullptr, true);
      check_launch("im2col");
      GemmCall g;  // t[OC, nP] = W[OC, CKK] col[CKK, nP]
      g.ab_type = g.c_type = s.dtype, g.tf32 = s.allow_tf32;
      g.m = plan.oc, g.n = samples * plan.p, g.k = plan.ckk;
      g.a = device_ptr<const void>(w), g.lda = plan.ckk;
      g.b = col, g.ldb = samples * plan.p;
      g.c = t, g.ldc = samples * plan.p;
      gemm().gemm(g);
      launch_samples_first(ctx, s.dtype, t, bias, samples, plan.oc, plan.p, y_n);
      check_launch("samples_first");
      continue;
    }
    // y = bias (and the columns with their ones row), so that the GEMM adds into y.
    launch_im2col(ctx, s, samples, plan.pointwise ? nullptr : x_n,
                  plan.pointwise ? nullptr : col, plan.rows, true, bias, y_n);
    check_launch("im2col");
    GemmCall g;  // y_n[OC, P] (+)= W[OC, CKK] col_n[CKK, P]
    g.ab_type = g.c_type = s.dtype, g.tf32 = s.allow_tf32;
    g.m = plan.oc, g.n = plan.p, g.k = plan.ckk;
    g.a = device_ptr<const void>(w), g.lda = plan.ckk, g.stride_a = 0;
    g.b = plan.pointwise ? x_n : col, g.ldb = plan.p;
    g.stride_b = plan.pointwise ? plan.in_size : plan.rows * plan.p;
    g.c = y_n, g.ldc = plan.p, g.stride_c = plan.out_size;
    g.beta = bias ? 1.0f : 0.0f;
    g.batch = samples;
    gemm().gemm(g);
  }
  return !plan.pointwise && plan.one_chunk(s);
}

bool CudaDevice::do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                    const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                    const Tensor& db, const Tensor& workspace,
                                    bool workspace_valid, bool weight_gradient_beside) {
  const KernelContext ctx = kernel_context();
  if (implicit_conv(s)) {
    // Beside: dw and db on the side stream, forked once dy (and x) are in NHWC; dx goes on.
    const KernelContext weight_ctx = weight_gradient_beside ? side_kernel_context() : ctx;
    std::function<void()> fork;
    if (weight_gradient_beside) fork = [this] { fork_work_beside(); };
    launch_implicit_conv_backward(ctx, weight_ctx, fork, s, device_ptr<const void>(x),
                                  device_ptr<const void>(w), device_ptr<const void>(dy),
                                  device_ptr<void>(dx), device_ptr<float>(dw),
                                  device_ptr<char>(workspace), workspace_valid);
    check_launch("implicit_conv_backward");
    if (db.defined()) {
      launch_channel_sums(weight_ctx, s.dtype, device_ptr<const void>(dy), nullptr,
                          device_ptr<float>(db), s.batch, s.out_channels,
                          s.out_height() * s.out_width(), 0.0f);
      check_launch("channel_sums");
    }
    return true;
  }
  if (winograd_conv(s)) {
    winograd_backward(s, x, w, dy, dx, dw, db, workspace, weight_gradient_beside);
    return false;
  }
  const ConvPlan plan(s);
  void* col = device_ptr<void>(workspace);
  float* dw_part = reinterpret_cast<float*>(device_ptr<char>(workspace) + plan.col_bytes);
  void* t = device_ptr<char>(workspace) + plan.col_bytes + plan.dw_part_bytes;
  // Valid only after a forward that kept the columns: one chunk, not pointwise.
  const bool reuse = workspace_valid && plan.one_chunk(s) && !plan.pointwise;
  void* flipped = device_ptr<char>(workspace) + plan.workspace_bytes() - plan.flip_bytes;
  if (plan.dx_as_conv && dx.defined()) {  // the kernel of dx = conv(dy, wt), for every chunk
    launch_conv_flip_weights(ctx, int(plan.element), device_ptr<const void>(w), plan.oc,
                             s.in_channels, s.kernel_h * s.kernel_w, flipped);
    check_launch("conv_flip_weights");
  }
  for (int64_t n0 = 0; n0 < s.batch; n0 += plan.chunk) {
    const int64_t samples = std::min(plan.chunk, s.batch - n0);
    const void* x_n = plan.sample(device_ptr<const void>(x), n0, plan.in_size);
    const void* dy_n = plan.sample(device_ptr<const void>(dy), n0, plan.out_size);
    if (!plan.pointwise && !reuse) {
      launch_im2col(ctx, s, samples, x_n, col, plan.rows, true, nullptr, nullptr, plan.folded);
      check_launch("im2col");
    }
    const int64_t np = samples * plan.p;
    if (plan.folded) {  // dyt[OC, nP]: the folded weight gradient and dx read it
      launch_channels_first(ctx, s.dtype, dy_n, samples, plan.oc, plan.p, t);
      check_launch("channels_first");
    }
    if (plan.folded_dw) {
      // dw[OC, CKK] (+)= dyt[OC, nP] col[CKK, nP]^T straight into dw, and db from dy's channel
      // sums: with the ones row as a 1153rd column (7x7 128->128), cuBLAS chose an align-1
      // kernel (51 us on an H100, bf16); 1152 columns take an aligned one (ResNet step bf16
      // 1.434 -> 1.374 ms, fp32 3.732 -> 3.702).
      GemmCall gw;
      gw.ab_type = s.dtype, gw.c_type = DType::f32, gw.tf32 = s.allow_tf32;
      gw.trans_b = true;
      gw.m = plan.oc, gw.n = plan.ckk, gw.k = np;
      gw.a = t, gw.lda = np;
      gw.b = col, gw.ldb = np;
      gw.c = device_ptr<float>(dw), gw.ldc = plan.ckk;
      gw.beta = n0 > 0 ? 1.0f : 0.0f;
      gemm().gemm(gw);
      if (db.defined())
        launch_channel_sums(ctx, s.dtype, dy_n, nullptr, device_ptr<float>(db), samples, plan.oc,
                            plan.p, n0 > 0 ? 1.0f : 0.0f);
    } else {
      // dw_part_n^T[dw_columns, OC] = col_n[dw_columns, P] dy_n[OC, P]^T: the transposed
      // product, for which cuBLAS picks far faster kernels than for dw_part_n itself (bf16,
      // 28x28 32->32: 0.053 ms against 0.147 on an H100).
      GemmCall gw;
      gw.ab_type = s.dtype, gw.c_type = DType::f32, gw.tf32 = s.allow_tf32;
      gw.trans_b = true;
      gw.m = plan.dw_columns, gw.n = plan.oc, gw.k = plan.p;
      gw.a = plan.pointwise ? x_n : col;
      gw.lda = plan.pointwise ? plan.p : plan.folded ? np : plan.p;
      gw.stride_a = plan.pointwise ? plan.in_size : plan.folded ? plan.p : plan.rows * plan.p;
      gw.b = dy_n, gw.ldb = plan.p, gw.stride_b = plan.out_size;
      gw.c = dw_part, gw.ldc = plan.oc, gw.stride_c = plan.dw_columns * plan.oc;
      gw.batch = samples;
      gemm().gemm(gw);
      launch_conv_grad_reduce(ctx, dw_part, samples, plan.oc, plan.ckk, !plan.pointwise, true,
                              device_ptr<float>(dw), device_ptr<float>(db), n0 > 0);
    }
    check_launch("conv_grad_reduce");
    if (!dx.defined()) continue;
    void* dx_n = plan.sample(device_ptr<void>(dx), n0, plan.in_size);
    if (plan.dx_as_conv) {
      const int64_t rows = plan.oc * s.kernel_h * s.kernel_w, plane = s.height * s.width;
      launch_im2col(ctx, input_gradient_shape(s), samples, dy_n, col, rows, false, nullptr,
                    nullptr, plan.folded);
      check_launch("im2col");
      GemmCall gc;  // dx_n[C, H*W] (folded: t[C, n H*W]) = wt[C, OC*KH*KW] colt_n
      gc.ab_type = gc.c_type = s.dtype, gc.tf32 = s.allow_tf32;
      gc.m = s.in_channels, gc.k = rows;
      gc.a = flipped, gc.lda = rows;
      if (plan.folded) {
        gc.n = samples * plane;
        gc.b = col, gc.ldb = gc.n;
        gc.c = t, gc.ldc = gc.n;
      } else {
        gc.n = plane;
        gc.b = col, gc.ldb = plane, gc.stride_b = rows * plane;
        gc.c = dx_n, gc.ldc = plane, gc.stride_c = plan.in_size;
        gc.batch = samples;
      }
      gemm().gemm(gc);
      if (plan.folded) {
        launch_samples_first(ctx, s.dtype, t, nullptr, samples, s.in_channels, plane, dx_n);
        check_launch("samples_first");
      }
      continue;
    }
    GemmCall gx;  // dcol_n[CKK, P] = W[OC, CKK]^T dy_n[OC, P]: into dx_n, or over col_n
    gx.ab_type = gx.c_type = s.dtype, gx.tf32 = s.allow_tf32;
    gx.trans_a = true;
    gx.a = device_ptr<const void>(w), gx.lda = plan.ckk;
    if (plan.folded) {  // one product: dcol[CKK, nP] = W^T dyt[OC, nP]
      gx.m = plan.ckk, gx.n = np, gx.k = plan.oc;
      gx.b = t, gx.ldb = np;
      gx.c = col, gx.ldc = np;
    } else {
      gx.m = plan.ckk, gx.n = plan.p, gx.k = plan.oc;
      gx.b = dy_n, gx.ldb = plan.p, gx.stride_b = plan.out_size;
      gx.c = plan.pointwise ? dx_n : col, gx.ldc = plan.p;
      gx.stride_c = plan.pointwise ? plan.in_size : plan.rows * plan.p;
      gx.batch = samples;
    }
    gemm().gemm(gx);
    if (plan.pointwise) continue;
    launch_col2im(ctx, s, samples, col, plan.rows, dx_n, plan.folded);
    check_launch("col2im");
  }
  if (plan.pointwise && db.defined()) {
    launch_channel_sums(ctx, s.dtype, device_ptr<const void>(dy), nullptr,
                        device_ptr<float>(db), s.batch, plan.oc, plan.p, 0.0f);
    check_launch("channel_sums");
  }
  return !plan.pointwise && plan.one_chunk(s) && !dx.defined();
}

void CudaDevice::do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  launch_im2col(kernel_context(), s, 1, device_ptr<const void>(x), device_ptr<void>(col),
                s.patch_size(), false, nullptr, nullptr);
  check_launch("im2col");
}

void CudaDevice::do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  launch_col2im(kernel_context(), s, 1, device_ptr<const void>(col), s.patch_size(),
                device_ptr<void>(dx));
  check_launch("col2im");
}

}  // namespace trident::cuda
