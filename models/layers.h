// The layers networks are made of: Linear, Conv2d, BatchNorm1d/2d, MaxPool2d, AvgPool2d,
// GlobalAvgPool2d, the activations (one Activation layer over the UnaryOp family), Dropout,
// Dropout2d, Flatten, LogSoftmax. Shapes are batch first; images are NCHW. Sizes a layer can
// infer from its input (input features, channels) are left open and found by Network::build.
// Options are set by chained calls: Conv2d(64, 3).stride(2).padding(1).bias(false).
#pragma once
#include "trident/models/layer.h"

namespace trident {

// y[B, out] = x[B, in] W^T + b, W [out, in] as in PyTorch. An activation right after it whose
// backward needs only its output (ReLU, LeakyReLU, Tanh, Sigmoid) rides in the GEMM epilogue.
class Linear : public Layer {
 public:
  explicit Linear(int64_t out_features);
  Linear(int64_t in_features, int64_t out_features);  // PyTorch's order
  Linear& in_features(int64_t n);  // optional: checked against the input
  Linear& bias(bool on);
  std::string kind() const override { return "Linear"; }
  Shape setup(const Shape& input) override;
  Shape output_shape(const Shape& input) const override;
  std::vector<ParamSpec> parameter_specs() const override;
  void set_fused_activation(UnaryOp op, float alpha) {
    fused_ = op;
    fused_alpha_ = alpha;
  }
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;
  // backward() in its two halves, so that a data-parallel trainer can start summing dW and db
  // across replicas while dx is still being computed: first dW and db, then dx.
  void backward_parameters(const StepContext&, const Tensor& x, const Tensor& dy);
  void backward_input(const StepContext&, const Tensor& dy, const Tensor& dx);

 private:
  int64_t in_ = 0, out_;
  bool bias_ = true;
  UnaryOp fused_ = UnaryOp::identity;
  float fused_alpha_ = 0.0f;
};

// y[N, OC, OH, OW] = conv(x[N, C, H, W], W[OC, C, KH, KW]) + b, zero padding. Defaults: stride 1,
// no padding, with bias, as PyTorch's nn.Conv2d.
class Conv2d : public Layer {
 public:
  Conv2d(int64_t out_channels, int64_t kernel);
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0);  // PyTorch's order
  Conv2d& in_channels(int64_t n);  // optional: checked against the input
  Conv2d& kernel(int64_t kh, int64_t kw);
  Conv2d& stride(int64_t s) { return stride(s, s); }
  Conv2d& stride(int64_t sh, int64_t sw);
  Conv2d& padding(int64_t p) { return padding(p, p); }
  Conv2d& padding(int64_t ph, int64_t pw);
  Conv2d& bias(bool on);
  std::string kind() const override { return "Conv2d"; }
  Shape setup(const Shape& input) override;
  Shape output_shape(const Shape& input) const override;
  std::vector<ParamSpec> parameter_specs() const override;
  std::vector<ScratchSpec> scratch_specs(const Device& device, const Shape& input) const override;
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>& scratch) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>& scratch) override;
  Conv2dShape shape_for(const Shape& input) const;

 private:
  int64_t in_c_ = 0, out_c_, kh_, kw_, sh_ = 1, sw_ = 1, ph_ = 0, pw_ = 0;
  bool bias_ = true;
};

// Batch normalisation over the channel dimension (dim 1): BatchNorm2d for [N, C, H, W],
// BatchNorm1d for [N, C] or [N, C, L]. PyTorch's defaults: momentum 0.1, eps 1e-5, affine.
// Parameters weight, bias; buffers running_mean, running_var (num_batches_tracked is kept by
// the network: every training forward of a network runs every batch norm once).
class BatchNorm : public Layer {
 public:
  explicit BatchNorm(int spatial_dims);  // 1 or 2
  BatchNorm& num_features(int64_t channels);  // optional: checked against the input
  BatchNorm& momentum(float m);
  BatchNorm& eps(float e);
  BatchNorm& affine(bool on);
  std::string kind() const override { return dims_ == 2 ? "BatchNorm2d" : "BatchNorm1d"; }
  Shape setup(const Shape& input) override;
  Shape output_shape(const Shape& input) const override;
  std::vector<ParamSpec> parameter_specs() const override;
  std::vector<ParamSpec> buffer_specs() const override;
  std::vector<ScratchSpec> scratch_specs(const Device& device, const Shape& input) const override;
  // Set when a ReLU follows: the normalisation applies it (BatchNormShape::relu) and its
  // backward masks the gradient where the output was positive (recomputed from x, beta and the
  // saved statistics), so the ReLU layer passes through.
  void set_fused_relu(bool fused) { fused_relu_ = fused; }
  // Set by a Residual block whose body ends with this layer: the forward also adds the block's
  // shortcut (set_residual, before each forward) and applies the block's ReLU after the sum
  // (relu false: none), in one pass (Device::batchnorm_add_forward), so the block has no sum
  // pass of its own. The backward is unchanged: it is given the gradient of the sum.
  void set_fused_sum(bool on, bool relu) { fused_sum_ = on, sum_relu_ = relu; }
  // join: the residual is written by work queued beside (Device::queue_beside), which the
  // forward joins (join_last_beside) before it reads it.
  void set_residual(const Tensor& residual, bool join = false) {
    residual_ = residual, join_residual_ = join;
  }
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>& scratch) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>& scratch) override;

 private:
  BatchNormShape shape_for(const Shape& input) const;
  bool fused_relu_ = false;
  bool fused_sum_ = false, sum_relu_ = false;
  Tensor residual_;
  bool join_residual_ = false;
  int dims_;
  int64_t channels_ = 0;
  float momentum_ = 0.1f, eps_ = 1e-5f;
  bool affine_ = true;
};
struct BatchNorm1d : BatchNorm {
  BatchNorm1d() : BatchNorm(1) {}
};
struct BatchNorm2d : BatchNorm {
  BatchNorm2d() : BatchNorm(2) {}
};

// Max pooling (padding is -inf), windows past the edge dropped (floor). Stride defaults to the
// kernel, as in PyTorch. A ReLU right after it is fused into the pooling.
class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0);  // stride 0 = kernel
  MaxPool2d& kernel(int64_t kh, int64_t kw);
  MaxPool2d& stride(int64_t sh, int64_t sw);
  MaxPool2d& padding(int64_t p) { return padding(p, p); }
  MaxPool2d& padding(int64_t ph, int64_t pw);
  std::string kind() const override { return "MaxPool2d"; }
  // Set when a ReLU follows: the pooling applies it (Pool2dShape::relu) and its argmax masks the
  // gradient, so that ReLU layer does nothing.
  void set_fused_relu(bool fused) { fused_relu_ = fused; }
  Shape output_shape(const Shape& input) const override;
  std::vector<ScratchSpec> scratch_specs(const Device& device, const Shape& input) const override;
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>& scratch) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>& scratch) override;

 private:
  Pool2dShape shape_for(const Shape& input) const;
  int64_t kh_, kw_, sh_, sw_, ph_ = 0, pw_ = 0;
  bool fused_relu_ = false;
};

// Average pooling, padding counted in the divisor (PyTorch's count_include_pad=True).
class AvgPool2d : public Layer {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0);  // stride 0 = kernel
  AvgPool2d& kernel(int64_t kh, int64_t kw);
  AvgPool2d& stride(int64_t sh, int64_t sw);
  AvgPool2d& padding(int64_t p) { return padding(p, p); }
  AvgPool2d& padding(int64_t ph, int64_t pw);
  std::string kind() const override { return "AvgPool2d"; }
  Shape output_shape(const Shape& input) const override;
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;

 protected:
  virtual Pool2dShape shape_for(const Shape& input) const;
  int64_t kh_, kw_, sh_, sw_, ph_ = 0, pw_ = 0;
};

// [N, C, H, W] -> [N, C, 1, 1], the mean of each plane (PyTorch's AdaptiveAvgPool2d(1)).
class GlobalAvgPool2d : public AvgPool2d {
 public:
  GlobalAvgPool2d() : AvgPool2d(1) {}
  std::string kind() const override { return "GlobalAvgPool2d"; }

 protected:
  Pool2dShape shape_for(const Shape& input) const override;
};

// y = op(x) elementwise (core/op_types.h's UnaryOp family). Runs in place (output over input)
// when the op's backward needs only the output and the container allows it.
class Activation : public Layer {
 public:
  explicit Activation(UnaryOp op, float alpha = 0.0f);
  std::string kind() const override;
  UnaryOp op() const { return op_; }
  float alpha() const { return alpha_; }
  Shape output_shape(const Shape& input) const override { return input; }
  // Set when the layer before already applied it (a GEMM epilogue, a pooling); backward still
  // masks the gradient in place unless that layer's backward does it too.
  void set_passthrough(bool passthrough, bool masks_gradient = true);
  void allow_in_place(bool allowed) override { in_place_allowed_ = allowed; }
  bool output_aliases_input() const override;
  bool backward_reads_output() const override { return !unary_backward_needs_input(op_, alpha_); }
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;

 private:
  UnaryOp op_;
  float alpha_;
  bool passthrough_ = false, masks_gradient_ = true, in_place_allowed_ = true;
};
struct ReLU : Activation {
  ReLU() : Activation(UnaryOp::relu) {}
};
struct LeakyReLU : Activation {
  explicit LeakyReLU(float negative_slope = 0.01f) : Activation(UnaryOp::leaky_relu, negative_slope) {}
};
struct Tanh : Activation {
  Tanh() : Activation(UnaryOp::tanh) {}
};
struct Sigmoid : Activation {
  Sigmoid() : Activation(UnaryOp::sigmoid) {}
};
struct SiLU : Activation {
  SiLU() : Activation(UnaryOp::silu) {}
};
struct GELU : Activation {
  GELU() : Activation(UnaryOp::gelu) {}
};

// Inverted dropout, active in training only. per_channel = Dropout2d: one draw per (sample,
// channel) of an NCHW input.
class Dropout : public Layer {
 public:
  explicit Dropout(float p = 0.5f, bool per_channel = false);
  std::string kind() const override { return per_channel_ ? "Dropout2d" : "Dropout"; }
  Shape output_shape(const Shape& input) const override;
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;

 private:
  void apply(const StepContext& ctx, const Tensor& in, const Tensor& out) const;
  float p_;
  bool per_channel_;
};
struct Dropout2d : Dropout {
  explicit Dropout2d(float p = 0.5f) : Dropout(p, true) {}
};

// [N, d1, d2, ...] -> [N, d1*d2*...]; the output is the input's memory.
class Flatten : public Layer {
 public:
  std::string kind() const override { return "Flatten"; }
  Shape output_shape(const Shape& input) const override;
  bool output_aliases_input() const override { return true; }
  void forward(const StepContext&, const Tensor&, const Tensor&,
               const std::vector<Tensor>&) override {}
  void backward(const StepContext&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                const std::vector<Tensor>&) override {}
};

// y[B, C] = log_softmax over C.
class LogSoftmax : public Layer {
 public:
  std::string kind() const override { return "LogSoftmax"; }
  bool backward_reads_output() const override { return true; }
  Shape output_shape(const Shape& input) const override;
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;
};

}  // namespace trident
