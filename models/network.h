// Network: a model as a value. A root Sequential of layers (containers included) with its
// parameters in one flat device buffer (so that the optimizer and the all-reduce each touch one
// buffer), its non-trainable buffers (batch-norm statistics) in another, parameter names as
// PyTorch's state dict has them, and the loss head fused into the last layers where it can be.
//
//   Network net("small_cnn");
//   net.add("conv1", Conv2d(16, 3).padding(1));   // input channels inferred at build
//   net.add("bn1", BatchNorm2d());
//   net.add("relu1", ReLU());
//   net.add("pool", GlobalAvgPool2d());
//   net.add("flatten", Flatten());
//   net.add("fc", Linear(10));                    // input features inferred at build
//
// Networks are trained by the Trainer and run by the Predictor; both make the StepContext the
// low-level calls below take.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/models/layer.h"
#include "trident/models/sequential.h"

namespace trident {

// A range of the flat parameter (and gradient) buffer, in floats: [begin, end).
struct ParameterRange {
  int64_t begin = 0, end = 0;
  int64_t count() const { return end - begin; }
  size_t bytes() const { return static_cast<size_t>(end - begin) * sizeof(float); }
};

// One tensor of the state dict: "layer1.0.conv1.weight", its shape, where it lies in its flat
// buffer (in floats) and how it starts.
struct NamedParameter {
  std::string name;
  Shape shape;
  int64_t offset = 0;
  ParamInit init;
};

// One entry of the state dict in PyTorch's order (modules in pre-order; per module its
// parameters, then its buffers, then a batch norm's num_batches_tracked counter).
struct StateEntry {
  enum class Kind : uint8_t { parameter, buffer, counter } kind;
  std::string name;
  size_t index = 0;  // into named_parameters() or named_buffers() (counters: unused)
};

// The loss a training step computes on the network's output.
enum class LossKind : uint8_t {
  cross_entropy,  // on logits (log-softmax + NLL fused); also right after a LogSoftmax layer
  nll,            // on log-probabilities: the model ends in LogSoftmax
  mse,            // mean squared error against the one-hot labels
};
struct LossSpec {
  LossKind kind = LossKind::cross_entropy;
  float label_smoothing = 0.0f;  // cross-entropy and NLL only, in [0, 1)
};
LossKind parse_loss(const std::string& name);  // "cross_entropy", "nll", "mse"
const char* loss_name(LossKind kind);

class Network {
 public:
  explicit Network(std::string model_name = "model") : model_name_(std::move(model_name)) {}
  Network(Network&&) = default;
  Network& operator=(Network&&) = default;

  // Appends a layer (moved in); parameter names are "<name>.weight" and so on, containers
  // adding their children's names ("layer1.0.conv1.weight").
  template <typename L>
  L& add(const std::string& name, L layer) {
    if (built()) throw ShapeError("model '" + model_name_ + "': add() after build()");
    return root_.add(name, std::move(layer));
  }

  // Infers and checks every layer's shapes for samples of sample_shape (no batch dimension),
  // fuses activations, allocates the flat parameter, gradient and buffer storage on `device`,
  // and initialises the parameters from `seed` with Philox on the host (identical on every
  // backend): PyTorch's default distributions (uniform(+-1/sqrt(fan_in)) for Linear and Conv2d,
  // 1 and 0 for batch norm). Under a bf16 / fp16 precision (set_precision) the weights of
  // GEMMs and convolutions get a compute-type copy as well; UsageError when the device cannot
  // hold the precision's type. training = false builds for inference only (the Predictor): no
  // gradient buffer, and no layer keeps what only a backward reads (batch-norm batch statistics,
  // a residual shortcut's input gradient); forward_loss(), backward() and a training forward
  // then throw.
  void build(Device& device, const Shape& sample_shape, uint64_t seed, bool training = true);
  bool built() const { return device_ != nullptr; }
  bool trainable() const { return trainable_; }  // built with training = true
  // The precision policy (models/precision.h), before build(): activations, input and output in
  // compute_dtype(). Default fp32.
  void set_precision(Precision precision);
  Precision precision() const { return precision_; }
  DType compute_dtype() const { return trident::compute_dtype(precision_); }

  const std::string& model_name() const { return model_name_; }
  Device& device() const;
  const Shape& sample_shape() const { return sample_shape_; }
  const Shape& output_sample_shape() const { return output_shape_; }  // e.g. [10]
  Sequential& root() { return root_; }
  const std::vector<NamedParameter>& named_parameters() const { return named_; }
  const std::vector<NamedParameter>& named_buffers() const { return named_buffers_; }
  const std::vector<StateEntry>& state_entries() const { return state_entries_; }
  int64_t parameter_count() const { return parameter_count_; }
  const Tensor& parameters() const { return params_; }  // flat [parameter_count]
  const Tensor& gradients() const { return grads_; }    // same layout (undefined: inference)
  const Tensor& buffers() const { return buffers_; }    // flat running statistics (may be empty)
  // The compute-type copy of parameters() in a 16-bit run (undefined in fp32 and tf32): what the
  // layers multiply with. A forward converts it from the masters first unless its StepContext
  // says it is current (compute_parameters_current); refresh_compute_parameters converts now.
  const Tensor& compute_parameters() const { return compute_params_; }
  void refresh_compute_parameters(const StepContext& ctx);
  // PyTorch's batch-norm counters: one per batch norm, all equal to the training forwards run
  // (set by the Trainer from its step count; read and written with the state dict).
  const std::vector<std::string>& batchnorm_names() const { return batchnorm_names_; }
  int64_t batches_tracked() const { return batches_tracked_; }
  void set_batches_tracked(int64_t count) { batches_tracked_ = count; }
  // One line per layer: its name, kind and, once built, the shape of one sample it outputs.
  std::string summary() const;

  // ---- low level: the steps a Trainer or Predictor runs -----------------------------------
  // The buffer a batch of `batch` samples is gathered into before forward() (compute_dtype()).
  const Tensor& input_buffer(int64_t batch);
  // Runs the layers on input ([batch, sample_shape...], compute_dtype()); returns the output
  // (a persistent buffer of compute_dtype()).
  const Tensor& forward(const StepContext& ctx, const Tensor& input);
  // Whether the last layer is a LogSoftmax with a layer before it (the loss can fuse it).
  bool ends_with_log_softmax() const;
  // A training forward with a loss: forward(), then loss[0] (+)= the batch's mean loss and the
  // gradient of scale * that mean with respect to the output, ready for backward(). A
  // LogSoftmax at the end and cross-entropy / NLL become one op (Device::log_softmax_nll).
  // labels: int32 [batch]. loss_scale (f32 [1] on the device, optional): the gradient is
  // multiplied by it as well, in float32 before it is rounded to the compute type (fp16 loss
  // scaling; the loss itself is not scaled). Returns the output.
  const Tensor& forward_loss(const StepContext& ctx, const Tensor& input, const Tensor& labels,
                             const LossSpec& loss_spec, const Tensor& loss, bool accumulate,
                             float scale = 1.0f, const Tensor& loss_scale = Tensor());
  // loss[0] (+)= the mean loss of `output` (the last forward's) against labels, no gradients.
  void evaluate_loss(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                     const LossSpec& loss_spec, const Tensor& loss, bool accumulate);
  // Backward through every layer for the last forward_loss; fills gradients().
  void backward(const StepContext& ctx);

  // Layer by layer (top level), for data parallelism that sums finished gradients while
  // backward goes on. Parameters lie in layer order, so backward finishes the buffer's tail first.
  size_t layer_count() const { return root_.size(); }
  // Where top-level layer i's parameters (and gradients) lie in the flat buffers; empty
  // (begin == end, at the layer's place in the order) for a layer without parameters.
  ParameterRange layer_parameters(size_t i) const;
  // Backward through top-level layer i, in two halves (see Sequential); the layers above i must
  // have finished both halves.
  void backward_layer_parameters(const StepContext& ctx, size_t i);
  void backward_layer_input(const StepContext& ctx, size_t i);

 private:
  void check_loss(const LossSpec& spec, const Tensor& output) const;
  void require_trainable(const char* what) const;
  // Checks the input, then runs the first `count` top-level layers; returns the last output.
  const Tensor& run(const StepContext& ctx, const Tensor& input, size_t count);
  // The cross-entropy head's log-probabilities for a batch size (logits models).
  const Tensor& log_probs(int64_t batch);
  // float32 [batch, classes]: the head's gradient before loss scaling (fp16).
  const Tensor& head_gradient(int64_t batch);

  std::string model_name_;
  Sequential root_;
  std::vector<NamedParameter> named_, named_buffers_;
  std::vector<StateEntry> state_entries_;
  std::vector<ParameterRange> layer_ranges_;  // [i] = top-level layer i's parameters
  std::vector<std::string> batchnorm_names_;
  int64_t batches_tracked_ = 0;
  Device* device_ = nullptr;
  Shape sample_shape_, output_shape_;
  int64_t parameter_count_ = 0;
  Tensor params_, grads_, buffers_;
  Tensor compute_params_;  // the compute-type copy (bf16 / fp16), same layout as params_
  Precision precision_ = Precision::fp32;
  std::map<int64_t, Tensor> inputs_, log_probs_, head_gradients_;
  Tensor last_input_;
  bool head_fused_ = false;  // the last forward fused the final LogSoftmax: skip its backward
  bool have_forward_ = false;
  bool trainable_ = true;
};

// Host-side initial values laid out as a flat buffer (Philox uniform or constants).
std::vector<float> initial_values(const std::vector<NamedParameter>& tensors, int64_t count,
                                  uint64_t seed);

}  // namespace trident
