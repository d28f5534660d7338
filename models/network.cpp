// Network: parameter naming and layout, initialisation, the loss head, forward and backward.
#include "trident/models/network.h"

#include <functional>
#include <sstream>

#include "trident/core/error.h"
#include "trident/core/philox.h"
#include "trident/models/layers.h"

namespace trident {

LossKind parse_loss(const std::string& name) {
  if (name == "cross_entropy" || name == "ce") return LossKind::cross_entropy;
  if (name == "nll") return LossKind::nll;
  if (name == "mse") return LossKind::mse;
  throw UsageError("unknown loss '" + name + "' (use cross_entropy, nll or mse)");
}

const char* loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::cross_entropy: return "cross_entropy";
    case LossKind::nll: return "nll";
    case LossKind::mse: return "mse";
  }
  return "?";
}

std::vector<float> initial_values(const std::vector<NamedParameter>& tensors, int64_t count,
                                  uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(count));
  for (size_t p = 0; p < tensors.size(); ++p) {
    const int64_t n = shape_numel(tensors[p].shape);
    const ParamInit& init = tensors[p].init;
    for (int64_t i = 0; i < n; ++i) {
      float v = init.value;
      if (init.kind == ParamInit::Kind::uniform) {
        // Stream 0x80000000 + p keeps initialisation apart from every dropout stream.
        const float u = philox_uniform(seed, 0x80000000u + static_cast<uint32_t>(p), 0xFFFFFFFFu,
                                       static_cast<uint64_t>(i));
        v = (2.0f * u - 1.0f) * init.value;
      }
      values[static_cast<size_t>(tensors[p].offset + i)] = v;
    }
  }
  return values;
}

namespace {

std::string join(const std::string& path, const std::string& name) {
  if (path.empty()) return name;
  if (name.empty()) return path;
  return path + "." + name;
}

// Visits every layer below `layer` in pre-order with its state-dict path.
void walk(Layer& layer, const std::string& path,
          const std::function<void(Layer&, const std::string&)>& visit) {
  visit(layer, path);
  for (auto& [name, child] : layer.children()) walk(*child, join(path, name), visit);
}

}  // namespace

Device& Network::device() const {
  if (!device_) throw Error("model '" + model_name_ + "': build() has not been called");
  return *device_;
}

void Network::require_trainable(const char* what) const {
  if (!trainable_)
    throw UsageError("model '" + model_name_ + "' was built for inference (build(..., training = "
                     "false): no gradient buffers), so it cannot run " + what +
                     "; build it with training = true to train it");
}

void Network::set_precision(Precision precision) {
  if (built()) throw UsageError("model '" + model_name_ + "': set_precision() after build()");
  precision_ = precision;
}

void Network::build(Device& device, const Shape& sample_shape, uint64_t seed, bool training) {
  const Precision precision = precision_;
  if (root_.empty()) throw ShapeError("model '" + model_name_ + "' has no layers");
  const DType dtype = trident::compute_dtype(precision);
  if (!device.supports(dtype))
    throw UsageError(device.info().id() + " (" + device.info().backend + ") cannot run precision " +
                     precision_name(precision) + ": it holds no " + dtype_name(dtype) +
                     " tensors; use fp32 or tf32 there");
  root_.set_compute(compute_spec(precision));
  Shape batch1{1};
  batch1.insert(batch1.end(), sample_shape.begin(), sample_shape.end());
  Shape out;
  try {
    out = root_.setup(batch1);
  } catch (const ShapeError& e) {
    throw ShapeError("model '" + model_name_ + "' on samples of shape " +
                     shape_string(sample_shape) + ", layer " + e.what());
  }
  output_shape_ = Shape(out.begin() + 1, out.end());
  sample_shape_ = sample_shape;

  // Lay out parameters and buffers in pre-order (PyTorch's state-dict order), and number the
  // layers (their Philox streams).
  named_.clear();
  named_buffers_.clear();
  state_entries_.clear();
  batchnorm_names_.clear();
  layer_ranges_.clear();
  parameter_count_ = 0;
  int64_t buffer_count = 0;
  uint32_t index = 0;
  for (auto& [top_name, top] : root_.children()) {
    ParameterRange range{parameter_count_, parameter_count_};
    walk(*top, top_name, [&](Layer& layer, const std::string& path) {
      layer.set_index(index++);
      layer.set_inference_only(!training);
      for (const ParamSpec& spec : layer.parameter_specs()) {
        state_entries_.push_back({StateEntry::Kind::parameter, join(path, spec.name), named_.size()});
        named_.push_back({join(path, spec.name), spec.shape, parameter_count_, spec.init});
        parameter_count_ += shape_numel(spec.shape);
      }
      for (const ParamSpec& spec : layer.buffer_specs()) {
        state_entries_.push_back(
            {StateEntry::Kind::buffer, join(path, spec.name), named_buffers_.size()});
        named_buffers_.push_back({join(path, spec.name), spec.shape, buffer_count, spec.init});
        buffer_count += shape_numel(spec.shape);
      }
      if (dynamic_cast<BatchNorm*>(&layer)) {
        batchnorm_names_.push_back(path);
        state_entries_.push_back({StateEntry::Kind::counter, join(path, "num_batches_tracked"), 0});
      }
    });
    range.end = parameter_count_;
    layer_ranges_.push_back(range);
  }
  device_ = &device;
  trainable_ = training;
  root_.set_inference_only(!training);
  params_ = Tensor::from_host(device, {parameter_count_},
                              initial_values(named_, parameter_count_, seed));
  grads_ = training ? Tensor::zeros(device, {parameter_count_}) : Tensor();
  buffers_ = buffer_count > 0 ? Tensor::from_host(device, {buffer_count},
                                                  initial_values(named_buffers_, buffer_count, 0))
                              : Tensor();
  compute_params_ =
      dtype == DType::f32 ? Tensor() : Tensor::empty(device, {parameter_count_}, dtype);
  size_t next_param = 0, next_buffer = 0;
  walk(root_, "", [&](Layer& layer, const std::string&) {
    std::vector<Tensor> p, g, b, c;
    for (const ParamSpec& spec : layer.parameter_specs()) {
      const NamedParameter& np = named_[next_param++];
      p.push_back(params_.view(np.offset, np.shape));
      if (training) g.push_back(grads_.view(np.offset, np.shape));
      c.push_back(spec.compute_copy && compute_params_.defined()
                      ? compute_params_.view(np.offset, np.shape)
                      : p.back());
    }
    for (size_t k = 0; k < layer.buffer_specs().size(); ++k, ++next_buffer)
      b.push_back(buffers_.view(named_buffers_[next_buffer].offset,
                                named_buffers_[next_buffer].shape));
    layer.bind(p, g, b);
    layer.bind_compute(c);
  });
  inputs_.clear();
  log_probs_.clear();
  head_gradients_.clear();
  have_forward_ = false;
  batches_tracked_ = 0;
}

const Tensor& Network::input_buffer(int64_t batch) {
  auto found = inputs_.find(batch);
  if (found != inputs_.end()) return found->second;
  Shape shape{batch};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  return inputs_[batch] = Tensor::empty(device(), shape, compute_dtype());
}

const Tensor& Network::forward(const StepContext& ctx, const Tensor& input) {
  return run(ctx, input, root_.size());
}

const Tensor& Network::run(const StepContext& ctx, const Tensor& input, size_t count) {
  if (!built()) throw Error("model '" + model_name_ + "': build() has not been called");
  Shape want{input.shape().empty() ? 0 : input.dim(0)};
  want.insert(want.end(), sample_shape_.begin(), sample_shape_.end());
  if (input.shape() != want)
    throw ShapeError("model '" + model_name_ + "' expects input " + shape_string(want) +
                     ", got " + shape_string(input.shape()));
  if (input.dtype() != compute_dtype())
    throw ShapeError("model '" + model_name_ + "' runs in " + precision_name(precision_) +
                     " and expects " + dtype_name(compute_dtype()) + " input, got " +
                     dtype_name(input.dtype()) + " (input_buffer() has the right type)");
  if (ctx.training) require_trainable("a training forward");
  // The compute-type weights follow the float32 masters the optimizer (or a load) changed.
  if (!ctx.compute_parameters_current) refresh_compute_parameters(ctx);
  last_input_ = input;
  head_fused_ = false;
  have_forward_ = true;
  return root_.forward_children(ctx, input, count);
}

void Network::refresh_compute_parameters(const StepContext& ctx) {
  if (compute_params_.defined()) ctx.device->convert(params_, compute_params_);
}

bool Network::ends_with_log_softmax() const {
  return root_.size() >= 2 && dynamic_cast<const LogSoftmax*>(&root_.layer(root_.size() - 1));
}

void Network::check_loss(const LossSpec& spec, const Tensor& output) const {
  if (output.shape().size() != 2)
    throw ShapeError("model '" + model_name_ + "': the " + loss_name(spec.kind) +
                     " loss needs an output of [batch, classes], the model gives " +
                     shape_string(output.shape()));
  if (spec.kind == LossKind::nll && !ends_with_log_softmax())
    throw UsageError("model '" + model_name_ + "': the nll loss needs log-probabilities (a "
                     "LogSoftmax last layer); use cross_entropy on logits");
  if (spec.kind == LossKind::mse && spec.label_smoothing != 0.0f)
    throw UsageError("label smoothing applies to cross_entropy and nll, not mse");
}

const Tensor& Network::log_probs(int64_t batch) {
  auto found = log_probs_.find(batch);
  if (found != log_probs_.end()) return found->second;
  Shape shape{batch};
  shape.insert(shape.end(), output_shape_.begin(), output_shape_.end());
  return log_probs_[batch] = Tensor::empty(device(), shape);
}

const Tensor& Network::head_gradient(int64_t batch) {
  auto found = head_gradients_.find(batch);
  if (found != head_gradients_.end()) return found->second;
  Shape shape{batch};
  shape.insert(shape.end(), output_shape_.begin(), output_shape_.end());
  return head_gradients_[batch] = Tensor::empty(device(), shape);
}

const Tensor& Network::forward_loss(const StepContext& ctx, const Tensor& input,
                                    const Tensor& labels, const LossSpec& spec, const Tensor& loss,
                                    bool accumulate, float scale, const Tensor& loss_scale) {
  require_trainable("forward_loss()");
  const int64_t batch = input.shape().empty() ? 0 : input.dim(0);
  if (labels.shape() != Shape{batch} || labels.dtype() != DType::i32)
    throw ShapeError("model '" + model_name_ + "': the loss needs int32 labels [" +
                     std::to_string(batch) + "], got " + shape_string(labels.shape()) + " " +
                     dtype_name(labels.dtype()));
  const float grad_scale = scale / static_cast<float>(batch);
  const size_t n = root_.size();
  if (spec.kind != LossKind::mse && ends_with_log_softmax()) {
    // The head's softmax, loss and both gradients in one op; backward starts below it.
    const Tensor& logits = run(ctx, input, n - 1);
    check_loss(spec, root_.child_output(n - 1));
    const Tensor& dlogits = root_.child_output_gradient(n - 2);
    const Tensor& head_dx = loss_scale.defined() ? head_gradient(batch) : dlogits;
    ctx.device->log_softmax_nll(logits, labels, grad_scale, spec.label_smoothing,
                                root_.child_output(n - 1), loss, accumulate, head_dx);
    if (loss_scale.defined()) ctx.device->scale(head_dx, loss_scale, dlogits);
    head_fused_ = true;
    return root_.child_output(n - 1);
  }
  const Tensor& out = forward(ctx, input);
  check_loss(spec, out);
  const Tensor& dout = root_.child_output_gradient(n - 1);
  const Tensor& head_dx = loss_scale.defined() ? head_gradient(batch) : dout;
  if (spec.kind == LossKind::mse)
    ctx.device->mse_loss(out, labels, grad_scale, loss, accumulate, head_dx);
  else
    ctx.device->log_softmax_nll(out, labels, grad_scale, spec.label_smoothing,
                                log_probs(batch), loss, accumulate, head_dx);
  if (loss_scale.defined()) ctx.device->scale(head_dx, loss_scale, dout);
  return out;
}

void Network::evaluate_loss(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                            const LossSpec& spec, const Tensor& loss, bool accumulate) {
  check_loss(spec, output);
  if (spec.kind == LossKind::mse) {
    ctx.device->mse_loss(output, labels, 1.0f, loss, accumulate, Tensor());
  } else if (ends_with_log_softmax()) {
    ctx.device->nll_loss_forward(output, labels, loss, accumulate, spec.label_smoothing);
  } else {
    const Tensor& logp = log_probs(output.dim(0));
    ctx.device->log_softmax_forward(output, logp);
    ctx.device->nll_loss_forward(logp, labels, loss, accumulate, spec.label_smoothing);
  }
}

ParameterRange Network::layer_parameters(size_t i) const {
  if (i >= layer_ranges_.size())
    throw Error("model '" + model_name_ + "' has " + std::to_string(layer_ranges_.size()) +
                " built layers, no layer " + std::to_string(i));
  return layer_ranges_[i];
}

void Network::backward(const StepContext& ctx) {
  for (size_t i = root_.size(); i-- > 0;) {
    backward_layer_parameters(ctx, i);
    backward_layer_input(ctx, i);
  }
  ctx.device->join_beside();  // the weight gradients layers finished beside (StepContext::beside)
}

void Network::backward_layer_parameters(const StepContext& ctx, size_t i) {
  require_trainable("backward()");
  if (!have_forward_) throw Error("model '" + model_name_ + "': backward() before forward");
  if (head_fused_ && i + 1 == root_.size()) return;  // forward_loss wrote its input gradient
  root_.backward_child_parameters(ctx, i, last_input_, Tensor(), Tensor());
}

void Network::backward_layer_input(const StepContext& ctx, size_t i) {
  require_trainable("backward()");
  if (head_fused_ && i + 1 == root_.size()) return;
  root_.backward_child_input(ctx, i, Tensor(), Tensor());
}

std::string Network::summary() const {
  std::ostringstream out;
  out << model_name_ << ": " << root_.size() << " layers, " << parameter_count_
      << " parameters\n";
  Shape shape{1};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  for (size_t i = 0; i < root_.size(); ++i) {
    const Layer& layer = root_.layer(i);
    if (built()) shape = layer.output_shape(shape);
    out << "  " << layer.name() << " (" << layer.kind() << ")";
    if (built())  // a sample's shape: the batch is the caller's
      out << " -> " << shape_string(Shape(shape.begin() + 1, shape.end()));
    out << "\n";
  }
  return out.str();
}

}  // namespace trident
