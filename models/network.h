// Network: an ordered stack of layers with its parameters in one flat device buffer (so that the
// optimizer and the all-reduce each touch one buffer) and persistent activation buffers per batch
// size (so that a step allocates nothing and can be captured and replayed).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trident/models/layer.h"

namespace trident {

class Linear;

// A range of the flat parameter (and gradient) buffer, in floats: [begin, end).
struct ParameterRange {
  int64_t begin = 0, end = 0;
  int64_t count() const { return end - begin; }
  size_t bytes() const { return static_cast<size_t>(end - begin) * sizeof(float); }
};

struct NamedParameter {
  std::string name;   // "conv1.weight", as PyTorch names the same model's state dict
  Shape shape;
  int64_t offset = 0; // in floats, within the flat buffer
  float init_bound = 0.0f;
};

class Network {
 public:
  explicit Network(std::string model_name) : model_name_(std::move(model_name)) {}
  Network(Network&&) = default;
  Network& operator=(Network&&) = default;

  // Appends a layer; parameter names are "<name>.weight" / "<name>.bias".
  template <typename L, typename... Args>
  L& add(const std::string& name, Args&&... args) {
    auto layer = std::make_unique<L>(std::forward<Args>(args)...);
    L& ref = *layer;
    layer->set_name(name.empty() ? std::to_string(layers_.size()) : name);
    layer->set_index(static_cast<uint32_t>(layers_.size()));
    layers_.push_back(std::move(layer));
    return ref;
  }

  // Checks every layer's shapes for samples of sample_shape (no batch dim), fuses Linear+ReLU,
  // allocates the flat parameter and gradient buffers on `device`, and initialises the weights
  // from `seed` with Philox on the host (identical on every backend).
  void build(Device& device, const Shape& sample_shape, uint64_t seed);

  const std::string& model_name() const { return model_name_; }
  Device& device() const { return *device_; }
  const Shape& sample_shape() const { return sample_shape_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  const std::vector<NamedParameter>& named_parameters() const { return named_; }
  int64_t parameter_count() const { return parameter_count_; }
  const Tensor& parameters() const { return params_; }  // flat [parameter_count]
  Tensor& parameters() { return params_; }  // writable: loading weights, tests
  const Tensor& gradients() const { return grads_; }    // same layout as parameters()
  std::string summary() const;

  // The buffer a batch of `batch` samples is gathered into before forward().
  const Tensor& input_buffer(int64_t batch);
  // Runs the layers on input ([batch, sample_shape...]); returns the output (persistent buffer).
  const Tensor& forward(const StepContext& ctx, const Tensor& input);
  // The buffer the loss writes d(loss)/d(output) into, for the last forward's batch size.
  const Tensor& output_gradient();
  // Whether the last layer is a LogSoftmax (with a layer before it): forward_nll can fuse it.
  bool ends_with_log_softmax() const;
  // A training forward with the NLL loss: forward() plus loss[0] (+)= the batch's mean NLL of
  // the output against labels (int32 [B]) and d(scale * loss)/d(output) through the LogSoftmax.
  // On a model ending in LogSoftmax the softmax, the loss and both gradients are one device op
  // (Device::log_softmax_nll) that writes the LogSoftmax's input gradient, and the backward
  // that follows starts below the LogSoftmax. Returns the output (the log-probabilities).
  const Tensor& forward_nll(const StepContext& ctx, const Tensor& input, const Tensor& labels,
                            const Tensor& loss, bool accumulate, float scale = 1.0f);
  // Backward through every layer for the last forward; fills gradients(). It is
  // backward_layer(ctx, i) for i = layer_count() - 1 down to 0.
  void backward(const StepContext& ctx);

  // Layer by layer, for data parallelism that sums finished gradients while backward goes on.
  // Parameters are laid out in layer order, so backward finishes the buffer's tail first.
  size_t layer_count() const { return layers_.size(); }
  // Where layer i's parameters (and their gradients) lie in the flat buffers; empty (begin ==
  // end, at the layer's place in the order) for a layer without parameters.
  ParameterRange layer_parameters(size_t i) const;
  // Backward through layer i of the last forward, in two halves: first its parameter gradients,
  // then the gradient of its input (which layer i - 1's backward reads; skipped where no layer
  // below i has parameters). Layers that cannot be split (Conv2d is one backend call) do
  // everything in the first half. The layers above i must have finished both halves.
  void backward_layer_parameters(const StepContext& ctx, size_t i);
  void backward_layer_input(const StepContext& ctx, size_t i);
  void backward_layer(const StepContext& ctx, size_t i) {
    backward_layer_parameters(ctx, i);
    backward_layer_input(ctx, i);
  }

 private:
  struct Buffers {                         // everything one batch size needs
    Tensor input;
    std::vector<Tensor> activations;       // [i] = output of layer i
    std::vector<Tensor> activation_grads;  // [i] = d loss / d output of layer i
    std::vector<std::vector<Tensor>> scratch;
  };
  Buffers& buffers_for(int64_t batch);
  Shape batch_shape(int64_t batch) const;
  void check_backward_layer(size_t i) const;

  std::string model_name_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<NamedParameter> named_;
  std::vector<ParameterRange> layer_ranges_;  // [i] = layer i's parameters
  std::vector<Linear*> split_backward_;       // [i] = layer i when it is a Linear, else null
  // The first layer with parameters: nothing needs the input gradient of it or of any layer
  // below it, so their backward computes parameter gradients only (or nothing).
  size_t first_parameter_layer_ = 0;
  Device* device_ = nullptr;
  Shape sample_shape_;
  int64_t parameter_count_ = 0;
  Tensor params_, grads_;
  std::map<int64_t, Buffers> buffers_;
  // forward() through layers [0, count) of `input`'s batch; returns the last output.
  const Tensor& forward_layers(const StepContext& ctx, const Tensor& input, size_t count);

  Tensor last_input_;
  Buffers* last_ = nullptr;
  bool head_fused_ = false;  // the last forward was forward_nll's fused head: skip its backward
};

// Host-side initial values of every parameter, laid out as the flat buffer (Philox uniform).
std::vector<float> initial_parameters(const std::vector<NamedParameter>& params, int64_t count,
                                      uint64_t seed);

}  // namespace trident
