// Sequential and Residual: shape set-up, fusion, buffers per batch size, forward and backward.
#include "trident/models/sequential.h"

#include <set>

#include "trident/core/error.h"
#include "trident/models/layers.h"

namespace trident {
namespace {

bool has_parameters(Layer& layer) {
  if (!layer.parameter_specs().empty()) return true;
  for (auto& [name, child] : layer.children())
    if (has_parameters(*child)) return true;
  return false;
}

bool same_memory(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.memory().handle == b.memory().handle && a.memory().offset == b.memory().offset &&
         a.bytes() == b.bytes();
}

}  // namespace

// ---- Sequential ------------------------------------------------------------------------------

void Sequential::append(const std::string& name, std::unique_ptr<Layer> layer) {
  const std::string chosen = name.empty() ? std::to_string(layers_.size()) : name;
  if (chosen.find('.') != std::string::npos)
    throw ShapeError("layer name '" + chosen + "' contains '.', which separates parameter paths");
  for (const auto& l : layers_)
    if (l->name() == chosen) throw ShapeError("two layers are named '" + chosen + "'");
  layer->set_name(chosen);
  layers_.push_back(std::move(layer));
}

void Sequential::set_compute(const ComputeSpec& spec) {
  compute_ = spec;
  for (auto& layer : layers_) layer->set_compute(spec);
}

Shape Sequential::setup(const Shape& input) {
  if (layers_.empty()) throw ShapeError("Sequential '" + name() + "' has no layers");
  Shape shape = input;
  for (auto& layer : layers_) {
    try {
      shape = layer->setup(shape);
    } catch (const ShapeError& e) {
      const std::string what = e.what();
      // Name the path from the outside in: "layer2.conv1: ..." (only once per level).
      throw ShapeError(name().empty() || what.rfind(name() + ".", 0) == 0
                           ? what
                           : name() + "." + what);
    }
  }
  const size_t n = layers_.size();
  for (size_t i = 0; i < n; ++i) {
    const bool shared_input = i == 0;            // a block's input also feeds its shortcut
    const bool shared_gradient = branch_ && i + 1 == n;  // both branches read the same dy
    layers_[i]->allow_in_place(!shared_input && !shared_gradient);
  }
  // Activations fused into the layer before them (never the last layer of a branch).
  for (size_t i = 0; i + 1 < n; ++i) {
    auto* act = dynamic_cast<Activation*>(layers_[i + 1].get());
    if (!act || (branch_ && i + 2 == n)) continue;
    if (auto* linear = dynamic_cast<Linear*>(layers_[i].get())) {
      if (unary_backward_needs_input(act->op(), act->alpha())) continue;
      linear->set_fused_activation(act->op(), act->alpha());
      act->set_passthrough(true);
    } else if (auto* pool = dynamic_cast<MaxPool2d*>(layers_[i].get())) {
      if (act->op() != UnaryOp::relu) continue;
      pool->set_fused_relu(true);
      act->set_passthrough(true, false);  // the pooling's argmax masks the gradient
    } else if (auto* norm = dynamic_cast<BatchNorm*>(layers_[i].get())) {
      if (act->op() != UnaryOp::relu) continue;
      norm->set_fused_relu(true);
      act->set_passthrough(true, false);  // the normalisation's backward masks the gradient
    }
  }
  // Residual blocks one after the other: the second's summing pass takes the first's activation
  // backward along (one pass over the gradient at the blocks' boundary fewer a step).
  for (auto& layer : layers_) {
    if (auto* block = dynamic_cast<Residual*>(layer.get())) {
      block->set_input_activation(UnaryOp::identity, 0.0f);
      block->set_output_gradient_activated(false);
    }
  }
  for (size_t i = 1; i < n; ++i) {
    auto* before = dynamic_cast<Residual*>(layers_[i - 1].get());
    auto* block = dynamic_cast<Residual*>(layers_[i].get());
    if (!before || !block || before->post() == UnaryOp::identity) continue;
    block->set_input_activation(before->post(), before->post_alpha());
    before->set_output_gradient_activated(true);
  }
  // An activation in place overwrites its input: not where a layer before it still needs that
  // memory, its own output, for its backward (a ReLU, fused or not, then a Sigmoid: the ReLU's
  // mask would read the Sigmoid's values).
  for (size_t i = 1; i < n; ++i) {
    bool output_needed = false;
    for (size_t k = i; k-- > 0 && !output_needed;) {
      output_needed = layers_[k]->backward_reads_output();
      if (!layers_[k]->output_aliases_input()) break;
    }
    if (output_needed) layers_[i]->allow_in_place(false);
  }
  first_with_parameters_ = n;
  for (size_t i = 0; i < n && first_with_parameters_ == n; ++i)
    if (has_parameters(*layers_[i])) first_with_parameters_ = i;
  buffers_.clear();
  last_ = nullptr;
  return shape;
}

Shape Sequential::output_shape(const Shape& input) const {
  Shape shape = input;
  for (const auto& layer : layers_) shape = layer->output_shape(shape);
  return shape;
}

std::vector<std::pair<std::string, Layer*>> Sequential::children() {
  std::vector<std::pair<std::string, Layer*>> out;
  for (auto& l : layers_) out.emplace_back(l->name(), l.get());
  return out;
}

bool Sequential::output_aliases_input() const {
  for (const auto& l : layers_)
    if (!l->output_aliases_input()) return false;
  return !layers_.empty();
}

bool Sequential::backward_reads_output() const {
  // An aliasing last child shares its output with the child before: either may read it.
  for (size_t i = layers_.size(); i-- > 0;) {
    if (layers_[i]->backward_reads_output()) return true;
    if (!layers_[i]->output_aliases_input()) return false;
  }
  return false;
}

Sequential::Buffers& Sequential::buffers_for(Device& device, const Shape& input, const Tensor& y) {
  const int64_t batch = input.at(0);
  auto found = buffers_.find(batch);
  if (found != buffers_.end() && same_memory(found->second.y, y)) return found->second;
  Buffers b;
  b.y = y;
  // The last child that writes memory of its own writes the given output when there is one:
  // the aliasing children after it (Flatten, in-place activations) then share it.
  const size_t writer = last_writer();
  Shape shape = input;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = *layers_[i];
    const Shape out = layer.output_shape(shape);
    std::vector<Tensor> scratch;
    for (const ScratchSpec& s : layer.scratch_specs(device, shape))
      scratch.push_back(Tensor::empty(device, s.shape, s.dtype));
    b.scratch.push_back(std::move(scratch));
    if (layer.output_aliases_input())
      b.outputs.emplace_back();  // its input's memory, resolved at each forward
    else if (i == writer && y.defined())
      b.outputs.push_back(y.reshape(out));
    else
      b.outputs.push_back(Tensor::empty(device, out, compute_.dtype));
    shape = out;
  }
  buffers_[batch] = std::move(b);
  return buffers_[batch];
}

void Sequential::make_gradients(Device& device, Buffers& b, const Tensor& dy) {
  if (!b.gradients.empty() && same_memory(b.dy, dy)) return;
  b.dy = dy;
  b.gradients.assign(layers_.size(), Tensor());
  // The output's gradient is dy when one is given: the last child writing memory of its own
  // and the aliasing children after it share it. Other aliasing children pass gradients through
  // the memory of their input's gradient.
  const size_t writer = last_writer();
  Shape shape = last_input_.shape();
  for (size_t k = 0; k < layers_.size(); ++k) {
    const Shape out = layers_[k]->output_shape(shape);
    if (dy.defined() && k >= writer)
      b.gradients[k] = dy.reshape(out);
    else if (layers_[k]->output_aliases_input() && k > 0)
      b.gradients[k] = b.gradients[k - 1].reshape(out);
    else
      b.gradients[k] = Tensor::empty(device, out, compute_.dtype);
    shape = out;
  }
}

size_t Sequential::last_writer() const {
  for (size_t i = layers_.size(); i-- > 0;)
    if (!layers_[i]->output_aliases_input()) return i;
  return 0;
}

const Tensor& Sequential::input_of(const Buffers& b, size_t i, const Tensor& x) const {
  return i == 0 ? x : b.outputs[i - 1];
}

const Tensor& Sequential::forward_children(const StepContext& ctx, const Tensor& x,
                                           size_t count, const Tensor& y) {
  Buffers& b = buffers_for(*ctx.device, x.shape(), y);
  last_ = &b;
  last_input_ = x;
  for (size_t i = 0; i < count; ++i) {
    Layer& layer = *layers_[i];
    const Tensor& in = input_of(b, i, x);
    if (layer.output_aliases_input())
      b.outputs[i] = in.reshape(layer.output_shape(in.shape()));  // whatever the input really is
    layer.forward(ctx, in, b.outputs[i], b.scratch[i]);
  }
  return count == 0 ? x : b.outputs[count - 1];
}

void Sequential::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                         const std::vector<Tensor>&) {
  forward_children(ctx, x, layers_.size(), y);
}

const Tensor& Sequential::child_output(size_t i) const {
  if (!last_) throw Error("Sequential '" + name() + "': no forward has run");
  return last_->outputs.at(i);
}

const Tensor& Sequential::child_output_gradient(size_t i, const Tensor& dy) {
  if (!last_) throw Error("Sequential '" + name() + "': no forward has run");
  make_gradients(last_input_.device(), *last_, dy);
  return last_->gradients.at(i);
}

void Sequential::backward_child_parameters(const StepContext& ctx, size_t i, const Tensor& x,
                                           const Tensor& dy, const Tensor& dx) {
  if (!last_) throw Error("Sequential '" + name() + "': backward before forward");
  if (i >= layers_.size())
    throw Error("Sequential '" + name() + "' has no layer " + std::to_string(i));
  Buffers& b = *last_;
  make_gradients(*ctx.device, b, dy);
  // With no input gradient wanted, nothing below the first child with parameters needs one.
  if (!dx.defined() && i < first_with_parameters_) return;
  Layer& layer = *layers_[i];
  const Tensor& in = input_of(b, i, x);
  if (auto* linear = dynamic_cast<Linear*>(&layer)) {
    linear->backward_parameters(ctx, in, b.gradients[i]);
    return;
  }
  const bool wants_dx = dx.defined() || i > first_with_parameters_;
  const Tensor dx_i = !wants_dx ? Tensor() : (i == 0 ? dx : b.gradients[i - 1]);
  layer.backward(ctx, in, b.outputs[i], b.gradients[i], dx_i, b.scratch[i]);
  // A first child that aliases its input (Flatten) passed its gradient through its own buffer.
  if (i == 0 && dx.defined() && layer.output_aliases_input() && !same_memory(dx, b.gradients[0]))
    dx.copy_from(b.gradients[0].reshape(dx.shape()));
}

void Sequential::backward_child_input(const StepContext& ctx, size_t i, const Tensor& dy,
                                      const Tensor& dx) {
  (void)dy;
  auto* linear = dynamic_cast<Linear*>(layers_.at(i).get());
  if (!linear) return;  // done by the first half
  Buffers& b = *last_;
  if (i == 0) {
    linear->backward_input(ctx, b.gradients[0], dx);  // nothing when dx is undefined
    return;
  }
  if (!dx.defined() && i <= first_with_parameters_) return;  // nothing below needs it
  linear->backward_input(ctx, b.gradients[i], b.gradients[i - 1]);
}

void Sequential::backward(const StepContext& ctx, const Tensor& x, const Tensor&,
                          const Tensor& dy, const Tensor& dx, const std::vector<Tensor>&) {
  for (size_t i = layers_.size(); i-- > 0;) {
    backward_child_parameters(ctx, i, x, dy, dx);
    backward_child_input(ctx, i, dy, dx);
  }
}

// ---- Residual --------------------------------------------------------------------------------

Residual::Residual(Sequential body, Sequential shortcut, UnaryOp post, float post_alpha)
    : body_(std::move(body)), shortcut_(std::move(shortcut)), post_(post), post_alpha_(post_alpha) {
  if (body_.empty()) throw ShapeError("Residual: the body has no layers");
  if (unary_backward_needs_input(post_, post_alpha_))
    throw ShapeError(std::string("Residual: the activation after the sum must be one whose "
                                 "gradient comes from its output (not ") +
                     unary_module_name(post_) + ")");
  body_.set_branch(true);
  shortcut_.set_branch(true);
}

std::vector<std::pair<std::string, Layer*>> Residual::children() {
  std::vector<std::pair<std::string, Layer*>> out{{"", &body_}};
  if (!shortcut_.empty()) out.emplace_back("shortcut", &shortcut_);
  return out;
}

Shape Residual::setup(const Shape& input) {
  body_.set_name(name());
  shortcut_.set_name(name() + ".shortcut");
  const Shape out = body_.setup(input);
  const Shape skip = shortcut_.empty() ? input : shortcut_.setup(input);
  if (out != skip)
    throw ShapeError(name() + ": the body gives " + shape_string(out) + " but the shortcut " +
                     shape_string(skip) +
                     (shortcut_.empty() ? " (the identity: add a projection shortcut, e.g. a "
                                          "1x1 Conv2d with the body's stride and a BatchNorm2d)"
                                        : ""));
  body_into_output_ = !body_.backward_reads_output();
  // A body that ends with a batch norm normalises, sums and activates in one pass (ResNet bf16
  // on an H200: three passes over two tensors a step fewer).
  fused_norm_ = nullptr;
  if (body_into_output_ && (post_ == UnaryOp::relu || post_ == UnaryOp::identity))
    fused_norm_ = dynamic_cast<BatchNorm*>(&body_.layer(body_.size() - 1));
  if (fused_norm_) fused_norm_->set_fused_sum(true, post_ == UnaryOp::relu);
  return out;
}

Shape Residual::output_shape(const Shape& input) const { return body_.output_shape(input); }

void Residual::set_compute(const ComputeSpec& spec) {
  compute_ = spec;
  body_.set_compute(spec);
  shortcut_.set_compute(spec);
}

// Scratch: [body output (when the body cannot write y)] [shortcut output, shortcut dx (not for
// inference: only backward writes it)].
std::vector<ScratchSpec> Residual::scratch_specs(const Device&, const Shape& input) const {
  std::vector<ScratchSpec> specs;
  const Shape out = output_shape(input);
  if (!body_into_output_) specs.push_back({out, compute_.dtype});
  if (!shortcut_.empty()) {
    specs.push_back({out, compute_.dtype});
    if (!inference_only_) specs.push_back({input, compute_.dtype});
  }
  return specs;
}

Residual::BufferKey Residual::buffer_key(const Tensor& x, const Tensor& t) {
  return {x.shape().at(0), t.memory().handle, t.memory().offset};
}

bool Residual::run_shortcut(const StepContext& ctx, const BufferKey& key,
                            std::set<BufferKey>& seen, const std::function<void()>& work) const {
  const bool beside = ctx.beside && ctx.device->side_queue_runs_every_op() &&
                      seen.count(key) != 0;
  seen.insert(key);
  if (beside)
    ctx.device->queue_beside(work);
  else
    work();
  return beside;
}

// A projection shortcut runs beside the body where the device allows (run_shortcut): its
// small convolution and batch norm fill SMs that the body's leave idle.
void Residual::forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                       const std::vector<Tensor>& scratch) {
  size_t next = 0;
  const Tensor body_out = body_into_output_ ? y : scratch[next++];  // y when fused_norm_
  const Tensor& skip = shortcut_.empty() ? x : scratch[next];
  // The shortcut first: the body's last layer may sum it (fused_norm_), and it may run beside.
  const bool beside =
      !shortcut_.empty() && run_shortcut(ctx, buffer_key(x, skip), forward_seen_,
                                         [&] { shortcut_.forward(ctx, x, skip, {}); });
  if (fused_norm_) {  // the body's last batch norm sums the shortcut (and activates)
    fused_norm_->set_residual(skip.reshape(y.shape()), beside);
    body_.forward(ctx, x, y, {});
    fused_norm_->set_residual(Tensor());
    return;
  }
  body_.forward(ctx, x, body_out, {});
  if (beside) ctx.device->join_last_beside();
  if (!body_into_output_) y.copy_from(body_out);
  // y = post(body + shortcut), one pass.
  ctx.device->axpby(skip.reshape(y.shape()), y, 1.0f, 1.0f, post_, post_alpha_);
}

void Residual::backward(const StepContext& ctx, const Tensor& x, const Tensor& y,
                        const Tensor& dy, const Tensor& dx, const std::vector<Tensor>& scratch) {
  size_t next = 0;
  const Tensor body_out = body_into_output_ ? y : scratch[next++];
  // Through the activation in place: dy becomes the gradient of the sum, which both branches
  // read (neither writes it: their last layers are never in place). Unless the block after this
  // one did that as it summed its branches (set_output_gradient_activated).
  if (post_ != UnaryOp::identity && !output_gradient_activated_)
    ctx.device->unary_backward(post_, Tensor(), y, dy, dy, post_alpha_);
  if (shortcut_.empty()) {
    body_.backward(ctx, x, body_out, dy, dx, {});
    if (dx.defined()) add_branch_gradient(ctx, x, dy.reshape(dx.shape()), dx);
    return;
  }
  const Tensor& skip = scratch[next];
  const Tensor& skip_dx = scratch[next + 1];
  const bool beside = run_shortcut(ctx, buffer_key(x, dy), backward_seen_, [&] {
    shortcut_.backward(ctx, x, skip, dy, dx.defined() ? skip_dx : Tensor(), {});
  });
  body_.backward(ctx, x, body_out, dy, dx, {});
  if (beside) ctx.device->join_last_beside();  // the body's weight gradients run on
  if (dx.defined()) add_branch_gradient(ctx, x, skip_dx, dx);
}

void Residual::add_branch_gradient(const StepContext& ctx, const Tensor& x, const Tensor& branch,
                                   const Tensor& dx) const {
  if (input_op_ == UnaryOp::identity)
    ctx.device->axpby(branch, dx, 1.0f, 1.0f);
  else  // x is the block before's activated sum: that activation's gradient from its output
    ctx.device->unary_backward_sum(input_op_, Tensor(), x.reshape(dx.shape()), dx, branch, dx,
                                   input_alpha_);
}

}  // namespace trident
