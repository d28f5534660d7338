// The layers of the seed models: Linear, Conv2d, MaxPool2d, ReLU, Dropout, Dropout2d, Flatten,
// LogSoftmax. Shapes are batch first; images are NCHW.
#pragma once
#include "trident/models/layer.h"

namespace trident {

// y[B, out] = x[B, in] W^T + b, W [out, in] as in PyTorch. A ReLU right after it is fused into
// the GEMM's epilogue (set_fused_relu) and that ReLU layer then passes its input through.
class Linear : public Layer {
 public:
  Linear(int64_t in_features, int64_t out_features);
  std::string kind() const override { return "Linear"; }
  Shape output_shape(const Shape& input) const override;
  std::vector<ParamSpec> parameter_specs() const override;
  void set_fused_relu(bool fused) { fused_relu_ = fused; }
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;
  // backward() in its two halves, so that a data-parallel trainer can start summing dW and db
  // across replicas while dx is still being computed: first dW and db, then dx.
  void backward_parameters(const StepContext&, const Tensor& x, const Tensor& dy);
  void backward_input(const StepContext&, const Tensor& dy, const Tensor& dx);

 private:
  int64_t in_, out_;
  bool fused_relu_ = false;
};

// y[N, OC, OH, OW] = conv(x[N, C, H, W], W[OC, C, k, k]) + b; stride 1, no padding by default.
class Conv2d : public Layer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t padding = 0);
  std::string kind() const override { return "Conv2d"; }
  Shape output_shape(const Shape& input) const override;
  std::vector<ParamSpec> parameter_specs() const override;
  std::vector<ScratchSpec> scratch_specs(const Device& device, const Shape& input) const override;
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>& scratch) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>& scratch) override;

 private:
  Conv2dShape shape_for(const Shape& input) const;
  int64_t in_c_, out_c_, kernel_, stride_, padding_;
  DeviceMemory forward_input_, forward_workspace_;  // of the last forward (see backward)
};

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0);  // stride 0 = kernel, as in PyTorch
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
  int64_t kernel_, stride_;
  bool fused_relu_ = false;
};

class ReLU : public Layer {
 public:
  std::string kind() const override { return "ReLU"; }
  Shape output_shape(const Shape& input) const override { return input; }
  // Set when the layer before already applied the ReLU (a GEMM epilogue, a pooling); then
  // backward still masks the gradient in place unless that layer's backward does it too.
  void set_passthrough(bool passthrough, bool masks_gradient = true) {
    passthrough_ = passthrough;
    masks_gradient_ = !passthrough || masks_gradient;
  }
  bool output_aliases_input() const override { return passthrough_; }
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;

 private:
  bool passthrough_ = false, masks_gradient_ = true;
};

// Inverted dropout. per_channel = Dropout2d: one draw per (sample, channel) of an NCHW input.
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

// [N, d1, d2, ...] -> [N, d1*d2*...]; the output is the input's memory.
class Flatten : public Layer {
 public:
  std::string kind() const override { return "Flatten"; }
  Shape output_shape(const Shape& input) const override;
  bool output_aliases_input() const override { return true; }
  void forward(const StepContext&, const Tensor&, const Tensor&,
               const std::vector<Tensor>&) override {}
  void backward(const StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;
};

// y[B, C] = log_softmax over C.
class LogSoftmax : public Layer {
 public:
  std::string kind() const override { return "LogSoftmax"; }
  Shape output_shape(const Shape& input) const override;
  void forward(const StepContext&, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>&) override;
  void backward(const StepContext&, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>&) override;
};

}  // namespace trident
