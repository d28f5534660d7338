// The Layer interface networks are built from: shape inference, parameters and buffers, forward
// and backward, all expressed through Device ops so that a layer never knows which backend runs
// it. Containers (Sequential, Residual) are layers whose children are layers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/tensor.h"
#include "trident/models/precision.h"

namespace trident {

// What a forward or backward call needs besides tensors (made by the Trainer or the Predictor).
struct StepContext {
  Device* device = nullptr;
  Tensor step_state;         // i32 [kStepStateCount] on the device (see core/op_types.h)
  bool training = true;      // dropout active, batch norm on batch statistics
  uint64_t seed = 0;         // the run's seed (dropout keys)
  int64_t sample_offset = 0; // index of this batch's first sample in the global batch, so that
                             // N replicas draw the same dropout masks as one device would
  // The caller knows that the network's compute-type weights (16-bit runs) already equal its
  // float32 masters, so that a forward need not convert them (the Trainer, whose optimizer
  // writes them with each update: see Network::compute_parameters). Default: convert.
  bool compute_parameters_current = false;
  // Layers may queue independent work on the device's side queue: a Residual's projection
  // shortcut beside its body where that queue runs every op (Device::side_queue_runs_every_op),
  // a convolution's weight gradient beside the backward below it where the device has one and
  // its backend forks it (conv2d_backward). The network joins before backward returns. False: everything in order (TrainOptions::overlap, TRIDENT_OVERLAP=0).
  bool beside = true;
};

// How a parameter starts: uniform(-bound, bound) (PyTorch's default for Linear and Conv2d
// weights and biases: bound = 1 / sqrt(fan_in)) or a constant (batch norm: 1 and 0).
struct ParamInit {
  enum class Kind : uint8_t { uniform, constant } kind = Kind::uniform;
  float value = 0.0f;  // the bound, or the constant
  static ParamInit uniform(float bound) { return {Kind::uniform, bound}; }
  static ParamInit constant(float value) { return {Kind::constant, value}; }
};

// One tensor a layer owns, named as PyTorch names it within the module ("weight", "running_var").
struct ParamSpec {
  std::string name;
  Shape shape;
  ParamInit init;
  // A GEMM or convolution operand (a weight matrix or kernel): under bf16 / fp16 the layer reads
  // a copy in the compute type, refreshed from the float32 master before each forward. Biases
  // and normalisation parameters stay float32.
  bool compute_copy = false;
};

// Per-batch-shape scratch a layer needs (argmax indices, the convolution workspace ...).
struct ScratchSpec {
  Shape shape;
  DType dtype = DType::f32;
};

class Layer {
 public:
  Layer() = default;
  Layer(const Layer&) = default;
  Layer(Layer&&) = default;
  Layer& operator=(const Layer&) = default;
  Layer& operator=(Layer&&) = default;
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;  // "Linear", "Conv2d", ...
  const std::string& name() const { return name_; }
  void set_name(const std::string& name) { name_ = name; }
  // A stream id unique in the network, for Philox draws (dropout masks).
  void set_index(uint32_t index) { index_ = index; }
  // Set by Network::build for a network built for inference: no backward and no training
  // forward will run, so the layer asks for no scratch that only they use (bound without
  // gradients).
  void set_inference_only(bool on) { inference_only_ = on; }
  bool inference_only() const { return inference_only_; }

  // Called once by Network::build with the input shape (batch first, batch 1): infers what the
  // constructor left open (input features, channels), checks the shape, returns the output
  // shape. ShapeError (naming the layer) if the input does not fit.
  virtual Shape setup(const Shape& input) { return output_shape(input); }
  // The output shape for an input shape of any batch size (after setup).
  virtual Shape output_shape(const Shape& input) const = 0;
  // Trainable parameters and non-trainable buffers (batch norm's running statistics), in
  // PyTorch's state-dict order within the module. Valid after setup().
  virtual std::vector<ParamSpec> parameter_specs() const { return {}; }
  virtual std::vector<ParamSpec> buffer_specs() const { return {}; }
  // Views into the network's flat parameter, gradient and buffer storage, in spec order.
  virtual void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& buffers) {
    params_ = params;
    grads_ = grads;
    buffers_ = buffers;
    compute_params_ = params;
  }
  // The tensors the layer computes with, in spec order: the compute-type copy of each
  // compute_copy parameter under bf16 / fp16, the float32 parameter otherwise.
  void bind_compute(const std::vector<Tensor>& compute_params) { compute_params_ = compute_params; }
  // The activation type and TF32 permission (models/precision.h); set before setup() by the
  // network, passed down by containers. Activations, input and output gradients are this type.
  virtual void set_compute(const ComputeSpec& spec) { compute_ = spec; }
  const ComputeSpec& compute() const { return compute_; }
  virtual std::vector<ScratchSpec> scratch_specs(const Device& /*device*/,
                                                 const Shape& /*input*/) const {
    return {};
  }
  // Children of a container, with the name each contributes to a parameter's path ("" for a
  // child whose parameters sit directly in this layer's namespace).
  virtual std::vector<std::pair<std::string, Layer*>> children() { return {}; }
  // True when the output is the input itself (a reshape, an in-place activation, an activation
  // fused into the layer before).
  virtual bool output_aliases_input() const { return false; }
  // Whether this layer may write its output over its input (an in-place activation); the
  // container clears it when the input is needed elsewhere (the first layer of a block).
  virtual void allow_in_place(bool allowed) { (void)allowed; }
  // Whether backward reads the forward output y (an activation computing its derivative from
  // y, LogSoftmax): then y must stay as forward left it until backward.
  virtual bool backward_reads_output() const { return false; }

  // y = layer(x).
  virtual void forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                       const std::vector<Tensor>& scratch) = 0;
  // Parameter gradients (overwritten) and dx, unless dx is undefined (nothing below needs it).
  virtual void backward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                        const Tensor& dy, const Tensor& dx,
                        const std::vector<Tensor>& scratch) = 0;

 protected:
  std::string name_;
  uint32_t index_ = 0;
  ComputeSpec compute_;
  bool inference_only_ = false;
  std::vector<Tensor> params_, grads_, buffers_, compute_params_;
};

}  // namespace trident
