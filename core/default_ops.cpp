// Defaults of the optional Device slots, composed of required ops only (see core/default_ops.h).
// They favour simplicity over speed: a backend that cares overrides the slot.
#include "trident/core/default_ops.h"

namespace trident {
namespace defaults {

void gemm_fused(Device& device, const GemmArgs& args) {
  GemmArgs plain = args;
  plain.bias = Tensor();
  plain.bias_kind = BiasKind::none;
  plain.activation = UnaryOp::identity;
  device.gemm(plain);
  // The epilogue row by row where C is strided; in one op where it is packed.
  const bool packed = args.ldc == args.n;
  const int64_t pieces = packed ? 1 : args.m;
  const int64_t rows = packed ? args.m : 1;
  for (int64_t r = 0; r < pieces; ++r) {
    const Tensor c = args.c.view(r * args.ldc, {rows * args.n});
    if (args.bias_kind == BiasKind::per_column)
      device.channel_affine(c, Tensor(), args.bias, c, rows, args.n, 1);
    else if (args.bias_kind == BiasKind::per_row)
      device.channel_affine(c, Tensor(), packed ? args.bias : args.bias.view(r, {1}), c, 1, rows,
                            args.n);
    if (args.activation != UnaryOp::identity)
      device.unary_forward(args.activation, c, c, args.activation_alpha);
  }
}

size_t conv2d_workspace_bytes(const Conv2dShape& s) {
  return static_cast<size_t>(s.patch_size() * s.out_height() * s.out_width()) *
         dtype_size(s.dtype);
}

namespace {

struct SampleViews {
  int64_t in_size, out_size, ckk, p;
  explicit SampleViews(const Conv2dShape& s)
      : in_size(s.in_channels * s.height * s.width),
        out_size(s.out_channels * s.out_height() * s.out_width()),
        ckk(s.patch_size()),
        p(s.out_height() * s.out_width()) {}
};

Tensor columns(const Tensor& workspace, const SampleViews& v, DType dtype) {
  return workspace.reinterpret(dtype, {v.ckk, v.p});
}

}  // namespace

void conv2d_forward(Device& device, const Conv2dShape& s, const Tensor& x, const Tensor& w,
                    const Tensor& b, const Tensor& y, const Tensor& workspace) {
  const SampleViews v(s);
  const Tensor col = columns(workspace, v, s.dtype);
  for (int64_t n = 0; n < s.batch; ++n) {
    device.im2col(s, x.view(n * v.in_size, {s.in_channels, s.height, s.width}), col);
    GemmArgs g;  // y_n[OC, P] = W[OC, CKK] col[CKK, P]
    g.allow_tf32 = s.allow_tf32;
    g.m = s.out_channels; g.n = v.p; g.k = v.ckk;
    g.a = w; g.b = col; g.c = y.view(n * v.out_size, {s.out_channels, v.p});
    device.gemm(g);
  }
  if (b.defined()) device.channel_affine(y, Tensor(), b, y, s.batch, s.out_channels, v.p);
}

void conv2d_backward(Device& device, const Conv2dShape& s, const Tensor& x, const Tensor& w,
                     const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                     const Tensor& workspace) {
  const SampleViews v(s);
  const Tensor col = columns(workspace, v, s.dtype);
  if (db.defined()) device.channel_sums(dy, Tensor(), db, s.batch, s.out_channels, v.p, 0.0f);
  for (int64_t n = 0; n < s.batch; ++n) {
    const Tensor dy_n = dy.view(n * v.out_size, {s.out_channels, v.p});
    device.im2col(s, x.view(n * v.in_size, {s.in_channels, s.height, s.width}), col);
    GemmArgs gw;  // dw[OC, CKK] (+)= dy_n[OC, P] col[CKK, P]^T
    gw.trans_b = true;
    gw.allow_tf32 = s.allow_tf32;
    gw.m = s.out_channels; gw.n = v.ckk; gw.k = v.p;
    gw.a = dy_n; gw.b = col; gw.c = dw;
    gw.beta = n == 0 ? 0.0f : 1.0f;
    device.gemm(gw);
    if (!dx.defined()) continue;
    GemmArgs gx;  // dcol[CKK, P] = W[OC, CKK]^T dy_n[OC, P], over the columns (read above)
    gx.trans_a = true;
    gx.allow_tf32 = s.allow_tf32;
    gx.m = v.ckk; gx.n = v.p; gx.k = s.out_channels;
    gx.a = w; gx.b = dy_n; gx.c = col;
    device.gemm(gx);
    device.col2im(s, col, dx.view(n * v.in_size, {s.in_channels, s.height, s.width}));
  }
}

void log_softmax_nll(Device& device, const Tensor& x, const Tensor& labels, float grad_scale,
                     float label_smoothing, const Tensor& y, const Tensor& loss, bool accumulate,
                     const Tensor& dx) {
  device.log_softmax_forward(x, y);
  device.nll_loss_forward(y, labels, loss, accumulate, label_smoothing);
  // dx = -grad_scale * t, then dx - exp(y) * sum(dx) = grad_scale * (exp(y) - t) (sum t = 1).
  device.nll_loss_backward(labels, dx, grad_scale, label_smoothing);
  device.log_softmax_backward(y, dx, dx);
}

void scale(Device& device, const Tensor& x, const Tensor& factor, const Tensor& y) {
  GemmArgs g;  // y[n, 1] = x[n, 1] factor[1, 1]
  g.m = x.numel(); g.n = 1; g.k = 1;
  g.a = x; g.b = factor; g.c = y;
  const bool in_place = y.memory().handle == x.memory().handle;  // the front allows only y == x
  if (x.dtype() != DType::f32 || y.dtype() != DType::f32 || in_place) {
    // A and B share one type (float32, factor's), and C may not overlap A: through scratch.
    const size_t mark = device.scratch_mark();
    const Tensor x32 = device.scratch(DType::f32, {x.numel()});
    device.convert(x, x32);
    g.a = x32;
    if (y.dtype() == DType::f32) {
      device.gemm(g);
    } else {
      g.c = device.scratch(DType::f32, {x.numel()});
      device.gemm(g);
      device.convert(g.c, y);
    }
    device.release_scratch(mark);
    return;
  }
  device.gemm(g);
}

}  // namespace defaults

// ---- the base slots ------------------------------------------------------------------------------

void Device::do_gemm_fused(const GemmArgs& args) { defaults::gemm_fused(*this, args); }

void Device::do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                                 UnaryOp activation, float alpha) {
  do_axpby(x, y, a, b);
  do_unary_forward(activation, y, y, alpha);
}

void Device::do_batchnorm_add_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                      const Tensor& residual, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean,
                                      const Tensor& running_var, const Tensor& y,
                                      const Tensor& save_mean, const Tensor& save_invstd) {
  BatchNormShape plain = s;
  plain.relu = false;
  do_batchnorm_forward(plain, training, x, gamma, beta, running_mean, running_var, y, save_mean,
                       save_invstd);
  if (s.relu)
    do_axpby_activation(residual, y, 1.0f, 1.0f, UnaryOp::relu, 0.0f);
  else
    do_axpby(residual, y, 1.0f, 1.0f);
}

void Device::do_unary_backward_sum(UnaryOp op, const Tensor& x, const Tensor& y,
                                   const Tensor& dy, const Tensor& dy_more, const Tensor& dx,
                                   float alpha) {
  // The front lets dx overlap dy only as the same memory.
  const bool in_place = dx.memory().handle == dy.memory().handle &&
                        dx.memory().offset == dy.memory().offset;
  if (!in_place) do_axpby(dy, dx, 1.0f, 0.0f);  // dx = dy
  do_axpby(dy_more, dx, 1.0f, 1.0f);
  do_unary_backward(op, x, y, dx, dx, alpha);
}

void Device::do_scale(const Tensor& x, const Tensor& factor, const Tensor& y) {
  defaults::scale(*this, x, factor, y);
}

void Device::do_sgd_update_with_copy(const Tensor& params, const Tensor& grads,
                                     const Tensor& momentum, const SgdParams& hp,
                                     const UpdateControl& control, const Tensor& step_state,
                                     const Tensor& compute_copy) {
  do_sgd_update(params, grads, momentum, hp, control, step_state);
  convert(params, compute_copy);
}

void Device::do_adam_update_with_copy(const Tensor& params, const Tensor& grads, const Tensor& m,
                                      const Tensor& v, const AdamParams& hp,
                                      const UpdateControl& control, const Tensor& step_state,
                                      const Tensor& compute_copy) {
  do_adam_update(params, grads, m, v, hp, control, step_state);
  convert(params, compute_copy);
}

size_t Device::do_conv2d_workspace_bytes(const Conv2dShape& s) const {
  return defaults::conv2d_workspace_bytes(s);
}

bool Device::do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                               const Tensor& b, const Tensor& y, const Tensor& workspace) {
  defaults::conv2d_forward(*this, s, x, w, b, y, workspace);
  return false;
}

bool Device::do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                const Tensor& db, const Tensor& workspace, bool, bool) {
  defaults::conv2d_backward(*this, s, x, w, dy, dx, dw, db, workspace);
  return false;
}

void Device::do_log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                                float label_smoothing, const Tensor& y, const Tensor& loss,
                                bool accumulate, const Tensor& dx) {
  defaults::log_softmax_nll(*this, x, labels, grad_scale, label_smoothing, y, loss, accumulate,
                            dx);
}

}  // namespace trident
