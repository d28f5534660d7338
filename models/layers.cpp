// Layer bodies: each forward/backward is one or a few Device ops on persistent buffers.
#include "trident/models/layers.h"

#include <cmath>

#include "trident/core/error.h"

namespace trident {
namespace {

[[noreturn]] void fail(const Layer& layer, const std::string& problem) {
  throw ShapeError(layer.kind() + " '" + layer.name() + "': " + problem);
}

void expect_rank(const Layer& layer, const Shape& input, size_t rank, const char* what) {
  if (input.size() != rank)
    fail(layer, std::string("expects ") + what + ", got " + shape_string(input));
}

void require_positive(const char* layer, const char* what, int64_t value) {
  if (value < 1)
    throw ShapeError(std::string(layer) + ": " + what + " must be at least 1, got " +
                     std::to_string(value));
}

float fan_in_bound(int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

}  // namespace

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
                              scratch.empty() ? Tensor() : scratch[0]);
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
  ctx.device->batchnorm_forward(s, ctx.training, x, affine_ ? params_[0] : Tensor(),
                                affine_ ? params_[1] : Tensor(), buffers_[0], buffers_[1], y,
                                scratch.empty() ? Tensor() : scratch[0],
                                scratch.empty() ? Tensor() : scratch[1]);
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

// ---- pooling -------------------------------------------------------------------------------

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride)
    : kh_(kernel), kw_(kernel), sh_(stride == 0 ? kernel : stride), sw_(sh_) {
  require_positive("MaxPool2d", "kernel", kernel);
  require_positive("MaxPool2d", "stride", sh_);
}

MaxPool2d& MaxPool2d::kernel(int64_t kh, int64_t kw) {
  require_positive("MaxPool2d", "kernel", std::min(kh, kw));
  kh_ = kh;
  kw_ = kw;
  return *this;
}

MaxPool2d& MaxPool2d::stride(int64_t sh, int64_t sw) {
  require_positive("MaxPool2d", "stride", std::min(sh, sw));
  sh_ = sh;
  sw_ = sw;
  return *this;
}

MaxPool2d& MaxPool2d::padding(int64_t ph, int64_t pw) {
  if (ph < 0 || pw < 0) throw ShapeError("MaxPool2d: padding must be >= 0");
  ph_ = ph;
  pw_ = pw;
  return *this;
}

Pool2dShape MaxPool2d::shape_for(const Shape& input) const {
  expect_rank(*this, input, 4, "[N, C, H, W]");
  if (2 * ph_ > kh_ || 2 * pw_ > kw_) fail(*this, "padding must be at most half the kernel");
  if (input[2] + 2 * ph_ < kh_ || input[3] + 2 * pw_ < kw_)
    fail(*this, "input " + shape_string(input) + " is smaller than the window");
  Pool2dShape s;
  s.batch = input[0]; s.channels = input[1]; s.height = input[2]; s.width = input[3];
  s.kernel_h = kh_; s.kernel_w = kw_; s.stride_h = sh_; s.stride_w = sw_;
  s.pad_h = ph_; s.pad_w = pw_;
  s.relu = fused_relu_;
  return s;
}

Shape MaxPool2d::output_shape(const Shape& input) const {
  const Pool2dShape s = shape_for(input);
  return {s.batch, s.channels, s.out_height(), s.out_width()};
}

std::vector<ScratchSpec> MaxPool2d::scratch_specs(const Device&, const Shape& input) const {
  return {{output_shape(input), DType::i32}};  // argmax of each window
}

void MaxPool2d::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                        const std::vector<Tensor>& scratch) {
  ctx.device->maxpool2d_forward(shape_for(x.shape()), x, y, scratch[0]);
}

void MaxPool2d::backward(const StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy,
                         const Tensor& dx, const std::vector<Tensor>& scratch) {
  if (dx.defined()) ctx.device->maxpool2d_backward(shape_for(x.shape()), dy, scratch[0], dx);
}

AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride)
    : kh_(kernel), kw_(kernel), sh_(stride == 0 ? kernel : stride), sw_(sh_) {
  require_positive("AvgPool2d", "kernel", kernel);
  require_positive("AvgPool2d", "stride", sh_);
}

AvgPool2d& AvgPool2d::kernel(int64_t kh, int64_t kw) {
  require_positive("AvgPool2d", "kernel", std::min(kh, kw));
  kh_ = kh;
  kw_ = kw;
  return *this;
}

AvgPool2d& AvgPool2d::stride(int64_t sh, int64_t sw) {
  require_positive("AvgPool2d", "stride", std::min(sh, sw));
  sh_ = sh;
  sw_ = sw;
  return *this;
}

AvgPool2d& AvgPool2d::padding(int64_t ph, int64_t pw) {
  if (ph < 0 || pw < 0) throw ShapeError("AvgPool2d: padding must be >= 0");
  ph_ = ph;
  pw_ = pw;
  return *this;
}

Pool2dShape AvgPool2d::shape_for(const Shape& input) const {
  expect_rank(*this, input, 4, "[N, C, H, W]");
  if (2 * ph_ > kh_ || 2 * pw_ > kw_) fail(*this, "padding must be at most half the kernel");
  if (input[2] + 2 * ph_ < kh_ || input[3] + 2 * pw_ < kw_)
    fail(*this, "input " + shape_string(input) + " is smaller than the window");
  Pool2dShape s;
  s.batch = input[0]; s.channels = input[1]; s.height = input[2]; s.width = input[3];
  s.kernel_h = kh_; s.kernel_w = kw_; s.stride_h = sh_; s.stride_w = sw_;
  s.pad_h = ph_; s.pad_w = pw_;
  return s;
}

Pool2dShape GlobalAvgPool2d::shape_for(const Shape& input) const {
  expect_rank(*this, input, 4, "[N, C, H, W]");
  Pool2dShape s;
  s.batch = input[0]; s.channels = input[1]; s.height = input[2]; s.width = input[3];
  s.kernel_h = input[2]; s.kernel_w = input[3]; s.stride_h = 1; s.stride_w = 1;
  return s;
}

Shape AvgPool2d::output_shape(const Shape& input) const {
  const Pool2dShape s = shape_for(input);
  return {s.batch, s.channels, s.out_height(), s.out_width()};
}

void AvgPool2d::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                        const std::vector<Tensor>&) {
  ctx.device->avgpool2d_forward(shape_for(x.shape()), x, y);
}

void AvgPool2d::backward(const StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy,
                         const Tensor& dx, const std::vector<Tensor>&) {
  if (dx.defined()) ctx.device->avgpool2d_backward(shape_for(x.shape()), dy, dx);
}

// ---- Activation ----------------------------------------------------------------------------

Activation::Activation(UnaryOp op, float alpha) : op_(op), alpha_(alpha) {}

std::string Activation::kind() const { return unary_module_name(op_); }

void Activation::set_passthrough(bool passthrough, bool masks_gradient) {
  passthrough_ = passthrough;
  masks_gradient_ = !passthrough || masks_gradient;
}

bool Activation::output_aliases_input() const {
  return passthrough_ || (in_place_allowed_ && !unary_backward_needs_input(op_, alpha_));
}

void Activation::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                         const std::vector<Tensor>&) {
  if (!passthrough_) ctx.device->unary_forward(op_, x, y, alpha_);
}

void Activation::backward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                          const Tensor& dy, const Tensor& dx, const std::vector<Tensor>&) {
  if (!dx.defined() || !masks_gradient_) return;
  const bool from_x = unary_backward_needs_input(op_, alpha_);
  ctx.device->unary_backward(op_, from_x ? x : Tensor(), from_x ? Tensor() : y, dy, dx, alpha_);
}

// ---- Dropout / Dropout2d -------------------------------------------------------------------

Dropout::Dropout(float p, bool per_channel) : p_(p), per_channel_(per_channel) {
  if (!(p >= 0.0f && p <= 1.0f)) throw ShapeError("Dropout probability must be in [0, 1]");
}

Shape Dropout::output_shape(const Shape& input) const {
  if (per_channel_) expect_rank(*this, input, 4, "[N, C, H, W]");
  if (input.size() < 2) expect_rank(*this, input, 2, "[batch, features]");
  return input;
}

void Dropout::apply(const StepContext& ctx, const Tensor& in, const Tensor& out) const {
  const Shape& s = in.shape();
  const int64_t per_sample = in.numel() / s[0];
  const int64_t group = per_channel_ ? s[2] * s[3] : 1;
  const int64_t groups_per_sample = per_sample / group;
  ctx.device->dropout(in, out, group, ctx.sample_offset * groups_per_sample, p_, ctx.seed, index_,
                      ctx.step_state);
}

void Dropout::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                      const std::vector<Tensor>&) {
  if (ctx.training)
    apply(ctx, x, y);
  else
    y.copy_from(x);
}

void Dropout::backward(const StepContext& ctx, const Tensor&, const Tensor&, const Tensor& dy,
                       const Tensor& dx, const std::vector<Tensor>&) {
  if (dx.defined()) apply(ctx, dy, dx);  // the same mask, drawn again from the same counters
}

// ---- Flatten, LogSoftmax -------------------------------------------------------------------

Shape Flatten::output_shape(const Shape& input) const {
  if (input.empty()) throw ShapeError("Flatten needs a batch dimension");
  int64_t features = 1;
  for (size_t i = 1; i < input.size(); ++i) features *= input[i];
  return {input[0], features};
}

Shape LogSoftmax::output_shape(const Shape& input) const {
  expect_rank(*this, input, 2, "[batch, classes]");
  return input;
}

void LogSoftmax::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                         const std::vector<Tensor>&) {
  ctx.device->log_softmax_forward(x, y);
}

void LogSoftmax::backward(const StepContext& ctx, const Tensor&, const Tensor& y,
                          const Tensor& dy, const Tensor& dx, const std::vector<Tensor>&) {
  if (dx.defined()) ctx.device->log_softmax_backward(y, dy, dx);
}

}  // namespace trident
