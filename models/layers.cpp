// Layer bodies: each forward/backward is one or a few Device ops on persistent buffers.
#include "trident/models/layers.h"

#include <cmath>

#include "trident/core/error.h"

namespace trident {
namespace {

void expect_rank(const Layer& layer, const Shape& input, size_t rank, const char* what) {
  if (input.size() != rank)
    throw ShapeError(layer.kind() + " '" + layer.name() + "' expects " + what + ", got " +
                     shape_string(input));
}

bool same_place(DeviceMemory a, DeviceMemory b) {
  return a.handle == b.handle && a.offset == b.offset;
}

float fan_in_bound(int64_t fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); }

}  // namespace

// ---- Linear --------------------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features) : in_(in_features), out_(out_features) {
  if (in_ <= 0 || out_ <= 0) throw ShapeError("Linear needs positive feature counts");
}

Shape Linear::output_shape(const Shape& input) const {
  expect_rank(*this, input, 2, "[batch, features]");
  if (input[1] != in_)
    throw ShapeError("Linear '" + name() + "' expects " + std::to_string(in_) +
                     " input features, got " + shape_string(input));
  return {input[0], out_};
}

std::vector<ParamSpec> Linear::parameter_specs() const {
  return {{"weight", {out_, in_}, fan_in_bound(in_)}, {"bias", {out_}, fan_in_bound(in_)}};
}

void Linear::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                     const std::vector<Tensor>&) {
  GemmArgs g;  // y[B, out] = x[B, in] * W[out, in]^T + b
  g.trans_b = true;
  g.m = x.dim(0); g.n = out_; g.k = in_;
  g.a = x.memory(); g.lda = in_;
  g.b = params_[0].memory(); g.ldb = in_;
  g.c = y.memory(); g.ldc = out_;
  g.bias = params_[1].memory();
  g.bias_kind = BiasKind::per_column;
  g.relu = fused_relu_;
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
  dw.a = dy.memory(); dw.lda = out_;
  dw.b = x.memory(); dw.ldb = in_;
  dw.c = grads_[0].memory(); dw.ldc = in_;
  ctx.device->gemm(dw);
  ctx.device->sum_rows(dy.memory(), batch, out_, grads_[1].memory(), 0.0f);
}

void Linear::backward_input(const StepContext& ctx, const Tensor& dy, const Tensor& dx) {
  if (!dx.defined()) return;  // the first layer
  const int64_t batch = dy.dim(0);
  GemmArgs gx;  // dx[B, in] = dy[B, out] W[out, in]
  gx.m = batch; gx.n = in_; gx.k = out_;
  gx.a = dy.memory(); gx.lda = out_;
  gx.b = params_[0].memory(); gx.ldb = in_;
  gx.c = dx.memory(); gx.ldc = in_;
  ctx.device->gemm(gx);
}

// ---- Conv2d --------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
               int64_t padding)
    : in_c_(in_channels), out_c_(out_channels), kernel_(kernel), stride_(stride),
      padding_(padding) {
  if (in_c_ <= 0 || out_c_ <= 0 || kernel_ <= 0 || stride_ <= 0 || padding_ < 0)
    throw ShapeError("Conv2d needs positive channels, kernel and stride");
}

Conv2dShape Conv2d::shape_for(const Shape& input) const {
  expect_rank(*this, input, 4, "[N, C, H, W]");
  if (input[1] != in_c_)
    throw ShapeError("Conv2d '" + name() + "' expects " + std::to_string(in_c_) +
                     " input channels, got " + shape_string(input));
  Conv2dShape s;
  s.batch = input[0]; s.in_channels = in_c_; s.height = input[2]; s.width = input[3];
  s.out_channels = out_c_; s.kernel_h = s.kernel_w = kernel_; s.stride = stride_;
  s.padding = padding_;
  if (s.height + 2 * padding_ < kernel_ || s.width + 2 * padding_ < kernel_)
    throw ShapeError("Conv2d '" + name() + "': kernel " + std::to_string(kernel_) +
                     " is larger than the padded input " + shape_string(input));
  return s;
}

Shape Conv2d::output_shape(const Shape& input) const {
  const Conv2dShape s = shape_for(input);
  return {s.batch, out_c_, s.out_height(), s.out_width()};
}

std::vector<ParamSpec> Conv2d::parameter_specs() const {
  const float bound = fan_in_bound(in_c_ * kernel_ * kernel_);
  return {{"weight", {out_c_, in_c_, kernel_, kernel_}, bound}, {"bias", {out_c_}, bound}};
}

std::vector<ScratchSpec> Conv2d::scratch_specs(const Device& device, const Shape& input) const {
  // The workspace (im2col columns ...) is sized by the backend, which knows its algorithm.
  const size_t bytes = device.conv2d_workspace_bytes(shape_for(input));
  if (bytes == 0) return {};
  return {{{static_cast<int64_t>((bytes + 3) / 4)}, DType::f32}};
}

void Conv2d::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                     const std::vector<Tensor>& scratch) {
  const Conv2dShape s = shape_for(x.shape());
  const DeviceMemory workspace = scratch.empty() ? DeviceMemory{} : scratch[0].memory();
  ctx.device->conv2d_forward(s, x.memory(), params_[0].memory(), params_[1].memory(), y.memory(),
                             workspace);
  forward_input_ = x.memory();
  forward_workspace_ = workspace;
}

void Conv2d::backward(const StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy,
                      const Tensor& dx, const std::vector<Tensor>& scratch) {
  const Conv2dShape s = shape_for(x.shape());
  const DeviceMemory workspace = scratch.empty() ? DeviceMemory{} : scratch[0].memory();
  // The backend may reuse the forward's im2col columns when this backward follows the forward
  // of the same input into the same workspace (as Network runs them).
  const bool after_forward = workspace && same_place(workspace, forward_workspace_) &&
                             same_place(x.memory(), forward_input_);
  ctx.device->conv2d_backward(s, x.memory(), params_[0].memory(), dy.memory(),
                              dx.defined() ? dx.memory() : DeviceMemory{}, grads_[0].memory(),
                              grads_[1].memory(), workspace, after_forward);
}

// ---- MaxPool2d -----------------------------------------------------------------------------

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride)
    : kernel_(kernel), stride_(stride == 0 ? kernel : stride) {
  if (kernel_ <= 0 || stride_ <= 0) throw ShapeError("MaxPool2d needs a positive kernel");
}

Pool2dShape MaxPool2d::shape_for(const Shape& input) const {
  expect_rank(*this, input, 4, "[N, C, H, W]");
  if (input[2] < kernel_ || input[3] < kernel_)
    throw ShapeError("MaxPool2d '" + name() + "': input " + shape_string(input) +
                     " is smaller than the window");
  Pool2dShape s;
  s.batch = input[0]; s.channels = input[1]; s.height = input[2]; s.width = input[3];
  s.kernel = kernel_; s.stride = stride_;
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
  ctx.device->maxpool2d_forward(shape_for(x.shape()), x.memory(), y.memory(),
                                scratch[0].memory());
}

void MaxPool2d::backward(const StepContext& ctx, const Tensor& x, const Tensor&, const Tensor& dy,
                         const Tensor& dx, const std::vector<Tensor>& scratch) {
  if (!dx.defined()) return;
  ctx.device->maxpool2d_backward(shape_for(x.shape()), dy.memory(), scratch[0].memory(),
                                 dx.memory());
}

// ---- ReLU ----------------------------------------------------------------------------------

void ReLU::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                   const std::vector<Tensor>&) {
  if (!passthrough_) ctx.device->relu_forward(x.memory(), y.memory(), x.numel());
}

void ReLU::backward(const StepContext& ctx, const Tensor&, const Tensor& y, const Tensor& dy,
                    const Tensor& dx, const std::vector<Tensor>&) {
  if (dx.defined() && masks_gradient_)
    ctx.device->relu_backward(y.memory(), dy.memory(), dx.memory(), y.numel());
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
  ctx.device->dropout(in.memory(), out.memory(), in.numel(), group,
                      ctx.sample_offset * groups_per_sample, p_, ctx.seed, index_,
                      ctx.step_state);
}

void Dropout::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                      const std::vector<Tensor>&) {
  if (ctx.training)
    apply(ctx, x, y);
  else
    ctx.device->copy_on_device(y.memory(), x.memory(), x.bytes());
}

void Dropout::backward(const StepContext& ctx, const Tensor&, const Tensor&, const Tensor& dy,
                       const Tensor& dx, const std::vector<Tensor>&) {
  if (dx.defined()) apply(ctx, dy, dx);  // the same mask, drawn again from the same counters
}

// ---- Flatten -------------------------------------------------------------------------------

Shape Flatten::output_shape(const Shape& input) const {
  if (input.empty()) throw ShapeError("Flatten needs a batch dimension");
  int64_t features = 1;
  for (size_t i = 1; i < input.size(); ++i) features *= input[i];
  return {input[0], features};
}

void Flatten::backward(const StepContext&, const Tensor&, const Tensor&, const Tensor& /*dy*/,
                       const Tensor& /*dx*/, const std::vector<Tensor>&) {
  // dx is dy's memory (the Sequential aliases gradients of aliasing layers): nothing to move.
}

// ---- LogSoftmax ----------------------------------------------------------------------------

Shape LogSoftmax::output_shape(const Shape& input) const {
  expect_rank(*this, input, 2, "[batch, classes]");
  return input;
}

void LogSoftmax::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                         const std::vector<Tensor>&) {
  ctx.device->log_softmax_forward(x.memory(), y.memory(), x.dim(0), x.dim(1));
}

void LogSoftmax::backward(const StepContext& ctx, const Tensor&, const Tensor& y,
                          const Tensor& dy, const Tensor& dx, const std::vector<Tensor>&) {
  if (dx.defined())
    ctx.device->log_softmax_backward(y.memory(), dy.memory(), dx.memory(), y.dim(0), y.dim(1));
}

}  // namespace trident
