// Layer bodies without parameters: pooling, activations, dropout, Flatten and LogSoftmax (the
// others: layers.cpp). Each forward/backward is one or a few Device ops.
#include <algorithm>

#include "trident/core/error.h"
#include "trident/models/layer_checks.h"
#include "trident/models/layers.h"

namespace trident {
using namespace layer_checks;

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
