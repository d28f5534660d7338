// Layer bodies: each forward/backward is one or a few Device ops on persistent buffers. The
// layers with parameters (Linear, Conv2d, BatchNorm); the others: layers_parameter_free.cpp.
#include "trident/models/layers.h"

#include "trident/core/error.h"
#include "trident/models/layer_checks.h"

namespace trident {
using namespace layer_checks;

// ---- Linear --------------------------------------------------------------------------------

Linear::Linear(int64_t out_features) : out_(out_features) {
  require_positive("Linear", "out_features", out_);
}

Linear::Linear(int64_t in, int64_t out) : Linear(out) { in_features(in); }

Linear& Linear::in_features(int64_t n) {
  require_positive("Linear", "in_features", n);
  in_ = n;
  return *this;
}

Linear& Linear::bias(bool on) {
  bias_ = on;
  return *this;
}

Shape Linear::setup(const Shape& input) {
  expect_rank(*this, input, 2, "[batch, features] (put a Flatten before it)");
  if (in_ == 0) in_ = input[1];
  return output_shape(input);
}

Shape Linear::output_shape(const Shape& input) const {
  expect_rank(*this, input, 2, "[batch, features] (put a Flatten before it)");
  if (input[1] != in_)
    fail(*this, "expects " + std::to_string(in_) + " input features, got " + shape_string(input));
  return {input[0], out_};
}

std::vector<ParamSpec> Linear::parameter_specs() const {
  const ParamInit init = ParamInit::uniform(fan_in_bound(in_));
  std::vector<ParamSpec> specs{{"weight", {out_, in_}, init, /*compute_copy=*/true}};
  if (bias_) specs.push_back({"bias", {out_}, init});
  return specs;
}

void Linear::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                     const std::vector<Tensor>&) {
  GemmArgs g;  // y[B, out] = x[B, in] * W[out, in]^T + b
  g.trans_b = true;
  g.m = x.dim(0); g.n = out_; g.k = in_;
  g.a = x;
  g.b = compute_params_[0];
  g.c = y;
  g.allow_tf32 = compute_.tf32;
  if (bias_) {
    g.bias = params_[1];
    g.bias_kind = BiasKind::per_column;
  }
  g.activation = fused_;
  g.activation_alpha = fused_alpha_;
  ctx.device->gemm(g);
}

void Linear::backward(const StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy,
                      const Tensor& dx, const std::vector<Tensor>&) {
  backward_parameters(ctx, x, dy);
  backward_input(ctx, dy, dx);
}

void Linear::backward_parameters(const StepContext& ctx, const Tensor& x, const Tensor& dy) {
  const int64_t batch = x.dim(0);
  GemmArgs dw;  // dW[out, in] = dy[B, out]^T x[B, in]
  dw.trans_a = true;
  dw.m = out_; dw.n = in_; dw.k = batch;
  dw.a = dy;
  dw.b = x;
  dw.c = grads_[0];  // float32 from 16-bit dy and x: the GEMM accumulates in float32
  dw.allow_tf32 = compute_.tf32;
  ctx.device->gemm(dw);
  if (bias_) ctx.device->sum_rows(dy, batch, out_, grads_[1], 0.0f);
}

void Linear::backward_input(const StepContext& ctx, const Tensor& dy, const Tensor& dx) {
  if (!dx.defined()) return;
  GemmArgs gx;  // dx[B, in] = dy[B, out] W[out, in]
  gx.m = dy.dim(0); gx.n = in_; gx.k = out_;
  gx.a = dy;
  gx.b = compute_params_[0];
  gx.c = dx;
  gx.allow_tf32 = compute_.tf32;
  ctx.device->gemm(gx);
}

// ---- Conv2d --------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t out_channels, int64_t kernel)
    : out_c_(out_channels), kh_(kernel), kw_(kernel) {
  require_positive("Conv2d", "out_channels", out_c_);
  require_positive("Conv2d", "kernel", kernel);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
               int64_t padding)
    : Conv2d(out_channels, kernel) {
  this->in_channels(in_channels);
  this->stride(stride);
  this->padding(padding);
}

Conv2d& Conv2d::in_channels(int64_t n) {
  require_positive("Conv2d", "in_channels", n);
  in_c_ = n;
  return *this;
}

Conv2d& Conv2d::kernel(int64_t kh, int64_t kw) {
  require_positive("Conv2d", "kernel height", kh);
  require_positive("Conv2d", "kernel width", kw);
  kh_ = kh;
  kw_ = kw;
  return *this;
}

Conv2d& Conv2d::stride(int64_t sh, int64_t sw) {
  require_positive("Conv2d", "stride", std::min(sh, sw));
  sh_ = sh;
  sw_ = sw;
  return *this;
}

Conv2d& Conv2d::padding(int64_t ph, int64_t pw) {
  if (ph < 0 || pw < 0) throw ShapeError("Conv2d: padding must be >= 0");
  ph_ = ph;
  pw_ = pw;
  return *this;
}

Conv2d& Conv2d::bias(bool on) {
  bias_ = on;
  return *this;
}

Shape Conv2d::setup(const Shape& input) {
  expect_rank(*this, input, 4, "[N, C, H, W]");
  if (in_c_ == 0) in_c_ = input[1];
  return output_shape(input);
}

Conv2dShape Conv2d::shape_for(const Shape& input) const {
  expect_rank(*this, input, 4, "[N, C, H, W]");
  if (input[1] != in_c_)
    fail(*this, "expects " + std::to_string(in_c_) + " input channels, got " +
                    shape_string(input));
  Conv2dShape s;
  s.batch = input[0]; s.in_channels = in_c_; s.height = input[2]; s.width = input[3];
  s.out_channels = out_c_; s.kernel_h = kh_; s.kernel_w = kw_;
  s.stride_h = sh_; s.stride_w = sw_; s.pad_h = ph_; s.pad_w = pw_;
  s.dtype = compute_.dtype;
  s.allow_tf32 = compute_.tf32;
  if (s.height + 2 * ph_ < kh_ || s.width + 2 * pw_ < kw_)
    fail(*this, "the " + std::to_string(kh_) + "x" + std::to_string(kw_) +
                    " kernel is larger than the padded input " + shape_string(input));
  return s;
}

Shape Conv2d::output_shape(const Shape& input) const {
  const Conv2dShape s = shape_for(input);
  return {s.batch, out_c_, s.out_height(), s.out_width()};
}

std::vector<ParamSpec> Conv2d::parameter_specs() const {
  const ParamInit init = ParamInit::uniform(fan_in_bound(in_c_ * kh_ * kw_));
  std::vector<ParamSpec> specs{{"weight", {out_c_, in_c_, kh_, kw_}, init, /*compute_copy=*/true}};
  if (bias_) specs.push_back({"bias", {out_c_}, init});
  return specs;
}

std::vector<ScratchSpec> Conv2d::scratch_specs(const Device& device, const Shape& input) const {
  // The workspace (im2col columns ...) is sized by the backend, which knows its algorithm.
  const size_t bytes = device.conv2d_workspace_bytes(shape_for(input));
  if (bytes == 0) return {};
  return {{{static_cast<int64_t>(bytes)}, DType::u8}};
}

void Conv2d::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                     const std::vector<Tensor>& scratch) {
  ctx.device->conv2d_forward(shape_for(x.shape()), x, compute_params_[0],
                             bias_ ? params_[1] : Tensor(), y,
                             scratch.empty() ? Tensor() : scratch[0]);
}

void Conv2d::backward(const StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy,
                      const Tensor& dx, const std::vector<Tensor>& scratch) {
  ctx.device->conv2d_backward(shape_for(x.shape()), x, compute_params_[0], dy, dx, grads_[0],
                              bias_ ? grads_[1] : Tensor(),
                              scratch.empty() ? Tensor() : scratch[0], ctx.beside);
}

// ---- BatchNorm -----------------------------------------------------------------------------

BatchNorm::BatchNorm(int spatial_dims) : dims_(spatial_dims) {
  if (dims_ != 1 && dims_ != 2) throw ShapeError("BatchNorm: spatial_dims must be 1 or 2");
}

BatchNorm& BatchNorm::num_features(int64_t channels) {
  require_positive("BatchNorm", "num_features", channels);
  channels_ = channels;
  return *this;
}

BatchNorm& BatchNorm::momentum(float m) {
  if (!(m >= 0.0f && m <= 1.0f)) throw ShapeError("BatchNorm: momentum must be in [0, 1]");
  momentum_ = m;
  return *this;
}

BatchNorm& BatchNorm::eps(float e) {
  if (!(e > 0.0f)) throw ShapeError("BatchNorm: eps must be positive");
  eps_ = e;
  return *this;
}

BatchNorm& BatchNorm::affine(bool on) {
  affine_ = on;
  return *this;
}

BatchNormShape BatchNorm::shape_for(const Shape& input) const {
  if (dims_ == 2) expect_rank(*this, input, 4, "[N, C, H, W]");
  if (dims_ == 1 && input.size() != 2 && input.size() != 3)
    fail(*this, "expects [N, C] or [N, C, L], got " + shape_string(input));
  if (input[1] != channels_)
    fail(*this, "expects " + std::to_string(channels_) + " channels, got " + shape_string(input));
  BatchNormShape s;
  s.outer = input[0];
  s.channels = channels_;
  s.inner = 1;
  for (size_t i = 2; i < input.size(); ++i) s.inner *= input[i];
  s.momentum = momentum_;
  s.eps = eps_;
  s.relu = fused_relu_;
  return s;
}

Shape BatchNorm::setup(const Shape& input) {
  if (input.size() >= 2 && channels_ == 0) channels_ = input[1];
  return output_shape(input);
}

Shape BatchNorm::output_shape(const Shape& input) const {
  shape_for(input);
  return input;
}

std::vector<ParamSpec> BatchNorm::parameter_specs() const {
  if (!affine_) return {};
  return {{"weight", {channels_}, ParamInit::constant(1.0f)},
          {"bias", {channels_}, ParamInit::constant(0.0f)}};
}

std::vector<ParamSpec> BatchNorm::buffer_specs() const {
  return {{"running_mean", {channels_}, ParamInit::constant(0.0f)},
          {"running_var", {channels_}, ParamInit::constant(1.0f)}};
}

std::vector<ScratchSpec> BatchNorm::scratch_specs(const Device&, const Shape&) const {
  if (inference_only_) return {};  // only a training forward saves batch statistics
  return {{{channels_}, DType::f32}, {{channels_}, DType::f32}};  // save_mean, save_invstd
}

void BatchNorm::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                        const std::vector<Tensor>& scratch) {
  const BatchNormShape s = shape_for(x.shape());
  if (ctx.training && s.outer * s.inner <= 1)
    fail(*this, "training needs more than one value per channel, got input " +
                    shape_string(x.shape()) + " (use a batch of 2 or more)");
  if (ctx.training && inference_only_) fail(*this, "built for inference, cannot train");
  const Tensor gamma = affine_ ? params_[0] : Tensor(), beta = affine_ ? params_[1] : Tensor();
  const Tensor save_mean = scratch.empty() ? Tensor() : scratch[0];
  const Tensor save_invstd = scratch.empty() ? Tensor() : scratch[1];
  if (!fused_sum_) {
    ctx.device->batchnorm_forward(s, ctx.training, x, gamma, beta, buffers_[0], buffers_[1], y,
                                  save_mean, save_invstd);
    return;
  }
  if (!residual_.defined()) fail(*this, "ends a residual block, whose shortcut was not given");
  if (join_residual_) ctx.device->join_last_beside();
  BatchNormShape with_sum = s;
  with_sum.relu = sum_relu_;
  ctx.device->batchnorm_add_forward(with_sum, ctx.training, x, residual_, gamma, beta,
                                    buffers_[0], buffers_[1], y, save_mean, save_invstd);
}

void BatchNorm::backward(const StepContext& ctx, const Tensor& x, const Tensor& /*y*/,
                         const Tensor& dy, const Tensor& dx, const std::vector<Tensor>& scratch) {
  const BatchNormShape s = shape_for(x.shape());
  if (!dx.defined() && !affine_) return;
  // dx is needed for the parameter gradients' sake only if there are any: the op writes both.
  Tensor dx_target = dx;
  if (!dx_target.defined()) dx_target = dy;  // dgamma/dbeta only: dx may go over dy
  ctx.device->batchnorm_backward(s, x, dy, affine_ ? params_[0] : Tensor(), scratch[0],
                                 scratch[1], dx_target, affine_ ? grads_[0] : Tensor(),
                                 affine_ ? grads_[1] : Tensor(),
                                 fused_relu_ && affine_ ? params_[1] : Tensor());
}

}  // namespace trident
