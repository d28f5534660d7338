// The convolution slots: im2col over the whole batch and one GEMM per product (NCHW, rectangular
// kernels, strides and padding; kernels/opencl/im2col.cl and conv2d.cl).
//
// Workspace: col [CKK + 1, L] | product [OC, L] | partial [S (+1), OC, CKK + 1] (float)
// (| w32 [OC, CKK] float for 16-bit convolutions staged through float32), with CKK = C*KH*KW,
// L = N*OH*OW, columns j = n*OH*OW + oh*OW + ow (the "channel-major" layout) and col's last row
// all ones. In float16 and bfloat16 (s.dtype), x, w, y, dx and dy stay 16-bit, and where the GEMM
// engine takes all three 16-bit products (GemmEngine::takes_16bit: the tensor-core kernel on
// NVIDIA GPUs, or the own kernel by policy) so do col and product: w is multiplied as it is, the
// products accumulate in float, y and the columns of dx are rounded once each, as CUDA does.
// Elsewhere (CLBlast's products: it has no bfloat16, and its half GEMM accumulates in half) the
// columns and product are float, the GEMMs float32 ones (w converted once into w32), and col2im
// adds dx's columns before a single rounding, as the CPU's staged convolution.
// Forward:  col = im2col(x); y = W[OC, CKK] col[:CKK] + b, written in NCHW with the bias by the
//           own GEMM (one launch), or by CLBlast into product plus a conv_output_nchw pass.
//           The workspace then holds x's columns: the forward returns true.
// Backward: col = im2col(x) unless the front says the forward's columns are still there
//           (workspace_valid); product = dy in channel-major; partial = product col^T, whose
//           last column (the ones row's) is the bias gradient; dw and db = the sums of partial's
//           split-K slices (conv_grad_sum). With dx: col[:CKK] = W^T product (overwriting the
//           columns: the backward then returns false) and dx = col2im(col).
//           Stride 1 with padding up to the kernel's size - 1 (3x3 "same" layers: in 16 bits
//           unless TRIDENT_OPENCL_WINOGRAD=1, or with fewer than 16 channels; the others are
//           Winograd's),
//           where dy's columns fit the workspace's col and the own GEMM takes the product: dx
//           is a convolution of dy instead, as its forward is (no col2im, and a product shaped
//           as the forward's: OC rows against CKK rows there; H200, 28x28 32->32, float32:
//           32 x 200704 x 288 at 20.2k GFLOP/s against 288 x 200704 x 32 at 13.5k):
//           col[OC*KH*KW, N*H*W] = im2col(dy, padding KH-1-PH, KW-1-PW), wt[C, OC*KH*KW] = w
//           with its kernel flipped (conv_flip_weights, into the partial area), and
//           dx = wt col written in NCHW by the own GEMM.
// Float32 3x3 stride-1 layers with 16 or more channels each way (and 16-bit ones where
// TRIDENT_OPENCL_WINOGRAD=1): Winograd's F(2x2, 3x3) instead (ops_conv2d_winograd.cpp,
// OpenClDevice::winograd_conv).
// dW is a long-K product (K = L is the whole batch's pixels, M x N = OC x (CKK + 1) is small),
// which one GEMM runs on a handful of work-groups: it is split into S slices of L, run as one
// strided batched GEMM, and the slices are summed by conv_grad_sum.
#include <algorithm>

#include "trident/backends/opencl/conv_geometry.h"
#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/error.h"

namespace trident::opencl {
namespace {

struct ConvLayout {
  ConvGeometry g;
  size_t patch, taps, cols;   // CKK, CKK + 1 (the ones row), L
  size_t slices, slice_cols;  // dW split-K: S slices of slice_cols columns (+ a tail), or 0
  DType dtype;                // s.dtype
  bool act_columns = false;   // col and product of dtype (16-bit GEMMs), else float
  explicit ConvLayout(const Conv2dShape& s)
      : g(s), patch(g.patch()), taps(g.patch() + 1), cols(size_t(g.batch) * g.plane()),
        dtype(s.dtype) {
    // Slices of at least kSliceColumns, while the partial sums stay small. Each slice is one
    // work-group's K loop on a GPU: short slices give more work-groups and fewer latency-bound
    // rounds (the seed CNN's 115200-column conv1 gradient: 256 slices of 450).
    constexpr size_t kSliceColumns = 256, kMaxSlices = 256, kMaxPartialFloats = size_t(8) << 20;
    const size_t weights = size_t(g.out_channels) * taps;
    slices = std::min({cols / kSliceColumns, kMaxSlices, kMaxPartialFloats / weights});
    if (slices < 2) slices = 0;  // one GEMM is fine
    slice_cols = slices ? cols / slices : 0;
  }
  // Partial [dW | db] products: S slices plus one for the tail L - S * slice_cols when there is
  // one; a single one without split-K.
  size_t partial_rows() const {
    return slices == 0 ? 1 : slices + (cols > slices * slice_cols ? 1 : 0);
  }
  // Bytes of an element of col and product.
  size_t column_bytes() const { return act_columns ? dtype_size(dtype) : sizeof(float); }
  static size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }
  size_t product_offset() const { return round_up(taps * cols * column_bytes()); }
  size_t partial_offset() const {
    return product_offset() + round_up(size_t(g.out_channels) * cols * column_bytes());
  }
  size_t w32_offset() const {
    return partial_offset() + partial_rows() * g.out_channels * taps * sizeof(float);
  }
  size_t bytes() const {
    const bool w32 = dtype != DType::f32 && !act_columns;
    return w32_offset() + (w32 ? g.out_channels * patch * sizeof(float) : 0);
  }
  // The three products (memory left out: shapes and types only), for GemmEngine::takes_16bit.
  TiledGemm forward_product() const {
    TiledGemm t = TiledGemm::of(false, false, g.out_channels, cols, patch, 1.0f, {}, patch, {},
                                cols, 0.0f, {}, cols);
    t.ab_type = t.c_type = dtype;
    t.c_plane = g.plane();
    return t;
  }
  TiledGemm weight_product() const {  // the whole product, or its split-K slices
    TiledGemm t = TiledGemm::of(false, true, g.out_channels, taps, slices ? slice_cols : cols,
                                1.0f, {}, cols, {}, cols, 0.0f, {}, taps);
    t.ab_type = dtype;
    if (slices) {
      t.batch = partial_rows();
      const size_t done = slices * slice_cols;
      t.k_last = cols > done ? cols - done : slice_cols;
    }
    return t;
  }
  // The stride-1 data gradient as a convolution of dy (see the top): [C, N*H*W] = wt[C,
  // OC*KH*KW] col(dy)[OC*KH*KW, N*H*W], written in NCHW.
  TiledGemm input_product_as_conv() const {
    const size_t k = size_t(g.out_channels) * g.kernel_h * g.kernel_w;
    const size_t n = size_t(g.batch) * g.input_plane();
    TiledGemm t = TiledGemm::of(false, false, g.channels, n, k, 1.0f, {}, k, {}, n, 0.0f, {}, n);
    t.ab_type = act_columns ? dtype : DType::f32;
    t.c_type = dtype;
    t.c_plane = g.input_plane();
    return t;
  }
  // Whether input_product_as_conv() replaces im2col's adjoint: stride 1, dy's padding
  // KH-1-PH >= 0, its columns fit col's area and its type is the columns' (float32, or 16-bit
  // columns), and the own GEMM takes the product.
  bool input_gradient_as_conv(const GemmEngine& gemm) const {
    if (g.stride_h != 1 || g.stride_w != 1 || g.pad_h >= g.kernel_h || g.pad_w >= g.kernel_w)
      return false;
    if (dtype != DType::f32 && !act_columns) return false;
    const size_t rows = size_t(g.out_channels) * g.kernel_h * g.kernel_w;
    if (rows * g.batch * g.input_plane() > taps * cols) return false;
    return gemm.takes(input_product_as_conv());
  }
  TiledGemm input_product() const {
    TiledGemm t = TiledGemm::of(true, false, patch, cols, g.out_channels, 1.0f, {}, patch, {},
                                cols, 0.0f, {}, cols);
    t.ab_type = t.c_type = dtype;
    return t;
  }
};

// The layout of s on this device: act_columns where the engine takes all three 16-bit products.
ConvLayout conv_layout(const Conv2dShape& s, const GemmEngine& gemm) {
  ConvLayout L(s);
  L.act_columns = s.dtype != DType::f32 && gemm.takes_16bit(L.forward_product()) &&
                  gemm.takes_16bit(L.weight_product()) && gemm.takes_16bit(L.input_product());
  return L;
}

}  // namespace

size_t OpenClDevice::do_conv2d_workspace_bytes(const Conv2dShape& s) const {
  if (winograd_conv(s)) return winograd_workspace_bytes(s);
  return conv_layout(s, gemm_).bytes();
}

// The weights the float32 GEMMs multiply: w itself in float32, else its float32 copy in the
// workspace at w32_offset.
DeviceMemory OpenClDevice::conv_weights(const Tensor& w, const Tensor& workspace,
                                        size_t w32_offset) {
  if (w.dtype() == DType::f32) return w.memory();
  const Tensor w32 = workspace.reinterpret(DType::f32, {w.numel()}, w32_offset);
  do_convert(w, w32);
  return w32.memory();
}

bool OpenClDevice::do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                     const Tensor& b, const Tensor& y, const Tensor& workspace) {
  if (winograd_conv(s)) {
    winograd_forward(s, x, w, b, y, workspace);
    return false;
  }
  const ConvLayout L = conv_layout(s, gemm_);
  const ConvGeometry& d = L.g;
  const size_t e = L.column_bytes();
  const DeviceMemory col = workspace.memory(), product = col.at(L.product_offset());
  queue_.launch_typed(Kernel::im2col, s.dtype, LaunchRange::items(size_t(d.channels) * L.cols),
                      queue_.buffer(x, "x"), queue_.buffer(col, e, "workspace"), d.batch,
                      d.channels, d.height, d.width, d.kernel_h, d.kernel_w, d.stride_h,
                      d.stride_w, d.pad_h, d.pad_w, d.out_h, d.out_w, cl_int(1),
                      cl_int(L.act_columns));
  // The own GEMM writes y in NCHW with the bias added; CLBlast needs the product and a pass.
  const DeviceMemory weights =
      L.act_columns ? w.memory() : conv_weights(w, workspace, L.w32_offset());
  TiledGemm t = TiledGemm::of(false, false, d.out_channels, L.cols, L.patch, 1.0f, weights,
                              L.patch, col, L.cols, 0.0f, y.memory(), L.cols);
  t.ab_type = L.act_columns ? s.dtype : DType::f32;
  t.c_type = s.dtype;
  t.c_plane = d.plane();
  t.bias = b.memory();
  t.bias_kind = b.defined() ? 2 : 0;
  if (gemm_.tiled(t)) return true;
  if (L.act_columns)
    throw BackendError(queue_.label() + ": internal: the own GEMM refused a 16-bit convolution "
                       "it was checked to take");
  gemm_.plain(false, false, d.out_channels, L.cols, L.patch, 1.0f, weights, L.patch, col,
              L.cols, 0.0f, product, L.cols);
  queue_.launch_typed(Kernel::conv_output_nchw, s.dtype,
                      LaunchRange::items(d.out_channels * L.cols),
                      queue_.buffer(product, sizeof(float), "workspace"), queue_.buffer(y, "y"),
                      queue_.optional(b, "bias"), d.batch, d.out_channels, cl_uint(d.plane()));
  return true;
}

bool OpenClDevice::do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                      const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                      const Tensor& db, const Tensor& workspace,
                                      bool workspace_valid, bool weight_gradient_beside) {
  if (winograd_conv(s)) {
    winograd_backward(s, x, w, dy, dx, dw, db, workspace, weight_gradient_beside);
    return false;
  }
  // Below, in order (weight_gradient_beside aside): the data gradient overwrites the columns the
  // weight gradient reads.
  const ConvLayout L = conv_layout(s, gemm_);
  const ConvGeometry& d = L.g;
  const size_t e = L.column_bytes();
  const DType ab_type = L.act_columns ? s.dtype : DType::f32;
  const DeviceMemory col = workspace.memory(), product = col.at(L.product_offset());
  const DeviceMemory partial = col.at(L.partial_offset());
  if (!workspace_valid)
    queue_.launch_typed(Kernel::im2col, s.dtype, LaunchRange::items(size_t(d.channels) * L.cols),
                        queue_.buffer(x, "x"), queue_.buffer(col, e, "workspace"), d.batch,
                        d.channels, d.height, d.width, d.kernel_h, d.kernel_w, d.stride_h,
                        d.stride_w, d.pad_h, d.pad_w, d.out_h, d.out_w, cl_int(1),
                        cl_int(L.act_columns));
  queue_.launch_typed(Kernel::conv_grad_channel_major, s.dtype,
                      LaunchRange::items(d.out_channels * L.cols), queue_.buffer(dy, "dy"),
                      queue_.buffer(product, e, "workspace"), d.batch, d.out_channels,
                      cl_uint(d.plane()), cl_int(L.act_columns));
  // partial [rows, OC, taps] = product[OC, L] col[taps, L]^T, split over L when L is long.
  const size_t grads = size_t(d.out_channels) * L.taps;
  if (L.slices == 0) {
    if (L.act_columns) {
      GemmCall g;
      g.ab_type = ab_type, g.c_type = DType::f32, g.trans_b = true;
      g.m = d.out_channels, g.n = L.taps, g.k = L.cols;
      g.a = product, g.lda = L.cols, g.b = col, g.ldb = L.cols, g.c = partial, g.ldc = L.taps;
      if (!gemm_.gemm(g))
        throw BackendError(queue_.label() + ": internal: the GEMM engine refused a 16-bit "
                           "weight gradient it was checked to take");
    } else {
      gemm_.plain(false, true, d.out_channels, L.taps, L.cols, 1.0f, product, L.cols, col,
                  L.cols, 0.0f, partial, L.taps);
    }
  } else {
    const size_t done = L.slices * L.slice_cols;
    // The tail slice (L.cols - done columns) is the last batch entry.
    gemm_.strided_batched(false, true, d.out_channels, L.taps, L.slice_cols, 1.0f, product,
                          L.cols, L.slice_cols, col, L.cols, L.slice_cols, partial, L.taps, grads,
                          L.partial_rows(), L.cols > done ? L.cols - done : L.slice_cols,
                          ab_type);
  }
  queue_.launch(Kernel::conv_grad_sum, LaunchRange::items(grads),
                queue_.buffer(partial, sizeof(float), "workspace"), cl_uint(L.partial_rows()),
                d.out_channels, cl_uint(L.taps), queue_.buffer(dw, "dw"),
                queue_.optional(db, "db"));
  if (!dx.defined()) return true;  // the columns are untouched
  if (L.input_gradient_as_conv(gemm_)) {
    // dy's columns over x's positions, the flipped weights, and dx = wt col in NCHW.
    queue_.launch_typed(Kernel::im2col, s.dtype,
                        LaunchRange::items(size_t(d.out_channels) * d.batch * d.input_plane()),
                        queue_.buffer(dy, "dy"), queue_.buffer(col, e, "workspace"), d.batch,
                        d.out_channels, d.out_h, d.out_w, d.kernel_h, d.kernel_w, cl_uint(1),
                        cl_uint(1), d.kernel_h - 1 - d.pad_h, d.kernel_w - 1 - d.pad_w, d.height,
                        d.width, cl_int(0), cl_int(L.act_columns));
    const size_t kernel_taps = size_t(d.kernel_h) * d.kernel_w;
    queue_.launch_typed(Kernel::conv_flip_weights, s.dtype,
                        LaunchRange::items(size_t(d.out_channels) * d.channels * kernel_taps),
                        queue_.buffer(w, "w"),
                        queue_.buffer(partial, dtype_size(s.dtype), "workspace"), d.out_channels,
                        d.channels, cl_uint(kernel_taps));
    TiledGemm t = L.input_product_as_conv();
    t.a = partial, t.b = col, t.c = dx.memory();
    if (!gemm_.tiled(t))
      throw BackendError(queue_.label() + ": internal: the own GEMM refused a convolution's data "
                         "gradient it was checked to take");
    return false;
  }
  // col[CKK, L] = W[OC, CKK]^T product[OC, L], over the columns of x.
  if (L.act_columns) {
    GemmCall g;
    g.ab_type = g.c_type = s.dtype, g.trans_a = true;
    g.m = L.patch, g.n = L.cols, g.k = d.out_channels;
    g.a = w.memory(), g.lda = L.patch, g.b = product, g.ldb = L.cols, g.c = col, g.ldc = L.cols;
    if (!gemm_.gemm(g))
      throw BackendError(queue_.label() + ": internal: the GEMM engine refused a 16-bit data "
                         "gradient it was checked to take");
  } else {
    gemm_.plain(true, false, L.patch, L.cols, d.out_channels, 1.0f,
                conv_weights(w, workspace, L.w32_offset()), L.patch, product, L.cols, 0.0f, col,
                L.cols);
  }
  queue_.launch_typed(Kernel::col2im, s.dtype,
                      LaunchRange::items(size_t(d.batch) * d.channels * d.input_plane()),
                      queue_.buffer(col, e, "workspace"), queue_.buffer(dx, "dx"), d.batch,
                      d.channels, d.height, d.width, d.kernel_h, d.kernel_w, d.stride_h,
                      d.stride_w, d.pad_h, d.pad_w, d.out_h, d.out_w, cl_int(L.act_columns));
  return false;
}

}  // namespace trident::opencl
