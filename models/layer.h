// The Layer interface the models are built from: shapes, parameters, forward and backward, all
// expressed through Device ops so that a layer never knows which backend runs it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/tensor.h"

namespace trident {

// What a forward or backward call needs besides tensors.
struct StepContext {
  Device* device = nullptr;
  DeviceMemory step_state;   // kStepStateBytes on the device (see core/device.h)
  bool training = true;      // dropout is active only when training
  uint64_t seed = 0;         // the run's seed (dropout keys)
  int64_t sample_offset = 0; // index of this batch's first sample in the global batch, so that
                             // N replicas draw the same dropout masks as one device would
};

// One parameter tensor a layer owns: its name suffix ("weight"), shape, and init bound.
struct ParamSpec {
  std::string name;
  Shape shape;
  float init_bound = 0.0f;  // uniform(-bound, bound), PyTorch's default for Linear / Conv2d
};

// Per-batch-shape scratch a layer needs (argmax indices, im2col workspace ...).
struct ScratchSpec {
  Shape shape;
  DType dtype = DType::f32;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;  // "Linear", "Conv2d", ...
  const std::string& name() const { return name_; }
  void set_name(const std::string& name) { name_ = name; }
  // Position among the model's layers; dropout layers use it as their Philox stream.
  void set_index(uint32_t index) { index_ = index; }

  // The output shape for an input shape (batch first); ShapeError if the input does not fit.
  virtual Shape output_shape(const Shape& input) const = 0;
  virtual std::vector<ParamSpec> parameter_specs() const { return {}; }
  // Views into the model's flat parameter and gradient buffers, in parameter_specs() order.
  virtual void bind(const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
    params_ = params;
    grads_ = grads;
  }
  virtual std::vector<ScratchSpec> scratch_specs(const Device& /*device*/, const Shape& /*input*/) const {
    return {};
  }
  // True when the output is the input itself (a reshape, or an activation fused into the layer before).
  virtual bool output_aliases_input() const { return false; }

  // y = layer(x).
  virtual void forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                       const std::vector<Tensor>& scratch) = 0;
  // Parameter gradients (overwritten) and dx, unless dx is undefined (the first layer).
  virtual void backward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                        const Tensor& dy, const Tensor& dx,
                        const std::vector<Tensor>& scratch) = 0;

 protected:
  std::string name_;
  uint32_t index_ = 0;
  std::vector<Tensor> params_, grads_;
};

}  // namespace trident
