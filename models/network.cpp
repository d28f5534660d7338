// Network: shape checking, parameter layout and initialisation, buffer management, forward/backward.
#include "trident/models/network.h"

#include <sstream>

#include "trident/core/error.h"
#include "trident/core/philox.h"
#include "trident/models/layers.h"
#include "trident/models/loss.h"

namespace trident {

std::vector<float> initial_parameters(const std::vector<NamedParameter>& params, int64_t count,
                                      uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(count));
  for (size_t p = 0; p < params.size(); ++p) {
    const int64_t n = shape_numel(params[p].shape);
    const float bound = params[p].init_bound;
    for (int64_t i = 0; i < n; ++i) {
      // Stream 0x80000000 + p keeps initialisation apart from every dropout stream.
      const float u = philox_uniform(seed, 0x80000000u + static_cast<uint32_t>(p), 0xFFFFFFFFu,
                                     static_cast<uint64_t>(i));
      values[static_cast<size_t>(params[p].offset + i)] = (2.0f * u - 1.0f) * bound;
    }
  }
  return values;
}

Shape Network::batch_shape(int64_t batch) const {
  Shape s{batch};
  s.insert(s.end(), sample_shape_.begin(), sample_shape_.end());
  return s;
}

void Network::build(Device& device, const Shape& sample_shape, uint64_t seed) {
  if (layers_.empty()) throw ShapeError("model '" + model_name_ + "' has no layers");
  device_ = &device;
  sample_shape_ = sample_shape;
  // Fuse each Linear followed by a ReLU into the GEMM epilogue (the ReLU layer still masks the
  // gradient), and each MaxPool2d followed by a ReLU into the pooling (whose argmax masks it).
  for (size_t i = 0; i + 1 < layers_.size(); ++i) {
    auto* relu = dynamic_cast<ReLU*>(layers_[i + 1].get());
    if (!relu) continue;
    if (auto* linear = dynamic_cast<Linear*>(layers_[i].get())) {
      linear->set_fused_relu(true);
      relu->set_passthrough(true);
    } else if (auto* pool = dynamic_cast<MaxPool2d*>(layers_[i].get())) {
      pool->set_fused_relu(true);
      relu->set_passthrough(true, false);
    }
  }
  // Check the shapes through the stack once, with a batch of 1, and lay out the parameters.
  Shape shape = batch_shape(1);
  named_.clear();
  layer_ranges_.clear();
  split_backward_.clear();
  parameter_count_ = 0;
  for (auto& layer : layers_) {
    split_backward_.push_back(dynamic_cast<Linear*>(layer.get()));
    ParameterRange range{parameter_count_, parameter_count_};
    try {
      shape = layer->output_shape(shape);
    } catch (const ShapeError& e) {
      throw ShapeError("model '" + model_name_ + "', layer '" + layer->name() + "': " + e.what());
    }
    for (const ParamSpec& spec : layer->parameter_specs()) {
      named_.push_back({layer->name() + "." + spec.name, spec.shape, parameter_count_,
                        spec.init_bound});
      parameter_count_ += shape_numel(spec.shape);
    }
    range.end = parameter_count_;
    layer_ranges_.push_back(range);
  }
  first_parameter_layer_ = layers_.size();
  for (size_t i = 0; i < layers_.size() && first_parameter_layer_ == layers_.size(); ++i)
    if (layer_ranges_[i].count() > 0) first_parameter_layer_ = i;
  params_ = Tensor::from_host(device, {parameter_count_},
                              initial_parameters(named_, parameter_count_, seed));
  grads_ = Tensor::zeros(device, {parameter_count_});
  size_t next = 0;
  for (auto& layer : layers_) {
    std::vector<Tensor> p, g;
    for (size_t k = 0; k < layer->parameter_specs().size(); ++k, ++next) {
      p.push_back(params_.view(named_[next].offset, named_[next].shape));
      g.push_back(grads_.view(named_[next].offset, named_[next].shape));
    }
    layer->bind(p, g);
  }
  buffers_.clear();
  last_ = nullptr;
}

Network::Buffers& Network::buffers_for(int64_t batch) {
  if (!device_) throw Error("Network::build() must be called before use");
  auto found = buffers_.find(batch);
  if (found != buffers_.end()) return found->second;
  Buffers b;
  Shape shape = batch_shape(batch);
  b.input = Tensor::empty(*device_, shape);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = *layers_[i];
    const Shape out = layer.output_shape(shape);
    std::vector<Tensor> scratch;
    for (const ScratchSpec& s : layer.scratch_specs(*device_, shape))
      scratch.push_back(Tensor::empty(*device_, s.shape, s.dtype));
    b.scratch.push_back(std::move(scratch));
    // An aliasing layer's output (and output gradient) is its input's memory, reshaped.
    const bool alias = layer.output_aliases_input();
    const Tensor& in = i == 0 ? b.input : b.activations[i - 1];
    b.activations.push_back(alias ? in.reshape(out) : Tensor::empty(*device_, out));
    b.activation_grads.push_back(alias && i > 0 ? b.activation_grads[i - 1].reshape(out)
                                                : Tensor::empty(*device_, out));
    shape = out;
  }
  return buffers_.emplace(batch, std::move(b)).first->second;
}

const Tensor& Network::input_buffer(int64_t batch) { return buffers_for(batch).input; }

const Tensor& Network::forward(const StepContext& ctx, const Tensor& input) {
  return forward_layers(ctx, input, layers_.size());
}

bool Network::ends_with_log_softmax() const {
  return layers_.size() >= 2 && dynamic_cast<const LogSoftmax*>(layers_.back().get()) != nullptr;
}

const Tensor& Network::forward_nll(const StepContext& ctx, const Tensor& input,
                                   const Tensor& labels, const Tensor& loss, bool accumulate,
                                   float scale) {
  const int64_t batch = input.dim(0);
  if (labels.shape() != Shape{batch} || labels.dtype() != DType::i32)
    throw ShapeError("model '" + model_name_ + "': the NLL loss needs int32 labels [" +
                     std::to_string(batch) + "], got " + shape_string(labels.shape()));
  if (!ends_with_log_softmax()) {  // the loss and its gradient as separate ops
    const Tensor& out = forward(ctx, input);
    NLLLoss nll;
    nll.forward(ctx, out, labels, loss, accumulate);
    nll.backward(ctx, out, labels, output_gradient(), scale);
    return out;
  }
  const size_t head = layers_.size() - 1;
  const Tensor& logits = forward_layers(ctx, input, head);
  Buffers& b = *last_;
  ctx.device->log_softmax_nll(logits.memory(), labels.memory(), logits.dim(0), logits.dim(1),
                              scale / static_cast<float>(batch), b.activations[head].memory(),
                              loss.memory(), accumulate, b.activation_grads[head - 1].memory());
  head_fused_ = true;
  return b.activations[head];
}

const Tensor& Network::forward_layers(const StepContext& ctx, const Tensor& input, size_t count) {
  if (input.shape() != batch_shape(input.dim(0)))
    throw ShapeError("model '" + model_name_ + "' expects input " +
                     shape_string(batch_shape(input.dim(0))) + ", got " +
                     shape_string(input.shape()));
  Buffers& b = buffers_for(input.dim(0));
  last_ = &b;
  last_input_ = input;
  head_fused_ = false;
  const Tensor* x = &input;
  for (size_t i = 0; i < count; ++i) {
    Tensor y = b.activations[i];
    if (layers_[i]->output_aliases_input() && x != &b.activations[i])
      y = x->reshape(b.activations[i].shape());  // alias whatever the input really is
    b.activations[i] = y;
    layers_[i]->forward(ctx, *x, b.activations[i], b.scratch[i]);
    x = &b.activations[i];
  }
  return *x;
}

const Tensor& Network::output_gradient() {
  if (!last_) throw Error("output_gradient() before forward()");
  return last_->activation_grads.back();
}

void Network::backward(const StepContext& ctx) {
  for (size_t i = layers_.size(); i-- > 0;) backward_layer(ctx, i);
}

ParameterRange Network::layer_parameters(size_t i) const {
  if (i >= layer_ranges_.size())
    throw Error("model '" + model_name_ + "' has " + std::to_string(layer_ranges_.size()) +
                " built layers, no layer " + std::to_string(i));
  return layer_ranges_[i];
}

void Network::check_backward_layer(size_t i) const {
  if (!last_) throw Error("backward() before forward()");
  if (i >= layers_.size())
    throw Error("model '" + model_name_ + "' has " + std::to_string(layers_.size()) +
                " layers, no layer " + std::to_string(i) + " to run backward through");
}

void Network::backward_layer_parameters(const StepContext& ctx, size_t i) {
  check_backward_layer(i);
  if (head_fused_ && i + 1 == layers_.size()) return;  // forward_nll wrote its input gradient
  Buffers& b = *last_;
  const Tensor& x = i == 0 ? last_input_ : b.activations[i - 1];
  if (Linear* linear = split_backward_[i]) {
    linear->backward_parameters(ctx, x, b.activation_grads[i]);
    return;
  }
  if (i < first_parameter_layer_) return;  // no parameters here or below: no gradient needed
  // The first layer with parameters needs no input gradient. For an aliasing layer dx is dy's
  // memory: a passthrough ReLU masks it in place, Flatten has nothing to do.
  const Tensor dx = i == first_parameter_layer_ ? Tensor() : b.activation_grads[i - 1];
  layers_[i]->backward(ctx, x, b.activations[i], b.activation_grads[i], dx, b.scratch[i]);
}

void Network::backward_layer_input(const StepContext& ctx, size_t i) {
  check_backward_layer(i);
  Linear* linear = split_backward_[i];
  // Done by the first half, or no input gradient needed.
  if (!linear || i <= first_parameter_layer_) return;
  linear->backward_input(ctx, last_->activation_grads[i], last_->activation_grads[i - 1]);
}

std::string Network::summary() const {
  std::ostringstream out;
  out << model_name_ << ": " << layers_.size() << " layers, " << parameter_count_
      << " parameters\n";
  Shape shape = batch_shape(1);
  for (const auto& layer : layers_) {
    shape = layer->output_shape(shape);
    out << "  " << layer->name() << " (" << layer->kind() << ") -> " << shape_string(shape)
        << "\n";
  }
  return out.str();
}

}  // namespace trident
