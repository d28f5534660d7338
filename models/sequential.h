// The two containers a network is made of: Sequential (children in order, with their activation
// and gradient buffers per batch size) and Residual (y = post(body(x) + shortcut(x)), the
// ResNet block), so that non-sequential networks are a few lines:
//
//   Sequential body;
//   body.add("conv1", Conv2d(64, 3).stride(2).padding(1).bias(false));
//   body.add("bn1", BatchNorm2d());
//   body.add("relu", ReLU());
//   body.add("conv2", Conv2d(64, 3).padding(1).bias(false));
//   body.add("bn2", BatchNorm2d());
//   Sequential shortcut;  // empty: identity
//   shortcut.add("0", Conv2d(64, 1).stride(2).bias(false));
//   shortcut.add("1", BatchNorm2d());
//   net.add("layer2", Residual(std::move(body), std::move(shortcut)));  // post: ReLU
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "trident/models/layer.h"

namespace trident {

class BatchNorm;

class Sequential : public Layer {
 public:
  Sequential() = default;

  // Appends a layer (moved in) under `name`, the name PyTorch's module would have ("conv1",
  // "0"); returns it for further use. Names must be unique within the container.
  template <typename L>
  L& add(const std::string& name, L layer) {
    auto owned = std::make_unique<L>(std::move(layer));
    L& ref = *owned;
    append(name, std::move(owned));
    return ref;
  }
  void append(const std::string& name, std::unique_ptr<Layer> layer);

  size_t size() const { return layers_.size(); }
  bool empty() const { return layers_.empty(); }
  Layer& layer(size_t i) const { return *layers_.at(i); }

  std::string kind() const override { return "Sequential"; }
  // Sets the children up in order, then fuses activations into the layer before where that pays
  // (Linear + ReLU-like into the GEMM epilogue, MaxPool2d + ReLU) and lets activations run in
  // place, except the first child (its input is shared) and, in a branch, the last one (its
  // output gradient is shared by both branches of a Residual).
  Shape setup(const Shape& input) override;
  Shape output_shape(const Shape& input) const override;
  std::vector<std::pair<std::string, Layer*>> children() override;
  bool output_aliases_input() const override;
  void set_compute(const ComputeSpec& spec) override;
  // Marks this container as a Residual branch (see setup).
  void set_branch(bool branch) { branch_ = branch; }
  // Whether the last child's backward reads its forward output (an activation that is not in
  // place, LogSoftmax): then that output must not be overwritten between forward and backward.
  bool backward_reads_output() const;

  void forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>& scratch) override;
  void backward(const StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>& scratch) override;

  // Layer by layer, for the network's own use (a loss head fused into the last layers, gradient
  // sums in buckets during backward). forward through children [0, count) of x into the
  // container's buffers (the last one's output is returned), or into y when count is all of them.
  const Tensor& forward_children(const StepContext& ctx, const Tensor& x, size_t count,
                                 const Tensor& y = Tensor());
  // The output buffer of child i and the gradient buffer of its output, for the last forward's
  // batch size (dy: the container's output gradient when the last child writes it).
  const Tensor& child_output(size_t i) const;
  const Tensor& child_output_gradient(size_t i, const Tensor& dy = Tensor());
  // Backward through child i, in two halves (first its parameter gradients, then the gradient
  // of its input; a child that cannot be split does both in the first half). dx: the
  // container's input gradient (undefined: not needed). The children above i must be done.
  void backward_child_parameters(const StepContext& ctx, size_t i, const Tensor& x,
                                 const Tensor& dy, const Tensor& dx);
  void backward_child_input(const StepContext& ctx, size_t i, const Tensor& dy, const Tensor& dx);

 private:
  struct Buffers {                         // what one batch size needs
    std::vector<Tensor> outputs;           // [i] = output of child i
    std::vector<Tensor> gradients;         // [i] = d loss / d output of child i (made lazily)
    std::vector<std::vector<Tensor>> scratch;
    Tensor y;                              // the output buffer given for the last child
    Tensor dy;                             // the output gradient given for the last child
  };
  Buffers& buffers_for(Device& device, const Shape& input, const Tensor& y);
  void make_gradients(Device& device, Buffers& b, const Tensor& dy);
  // Child i's input: the container's input, or child i - 1's output.
  const Tensor& input_of(const Buffers& b, size_t i, const Tensor& x) const;
  // The last child whose output is memory of its own (0 when every child aliases).
  size_t last_writer() const;

  std::vector<std::unique_ptr<Layer>> layers_;
  bool branch_ = false;
  size_t first_with_parameters_ = 0;  // children below it never need an input gradient
  std::map<int64_t, Buffers> buffers_;
  Buffers* last_ = nullptr;
  Tensor last_input_;
};

// y = post(body(x) + shortcut(x)); an empty shortcut is the identity (the shapes must then agree).
// The body's children are named directly in the block's namespace (PyTorch's "layer1.0.conv1"),
// the shortcut's under "shortcut" ("layer1.0.shortcut.0").
class Residual : public Layer {
 public:
  explicit Residual(Sequential body, Sequential shortcut = Sequential(),
                    UnaryOp post = UnaryOp::relu, float post_alpha = 0.0f);
  std::string kind() const override { return "Residual"; }
  Shape setup(const Shape& input) override;
  Shape output_shape(const Shape& input) const override;
  std::vector<std::pair<std::string, Layer*>> children() override;
  void set_compute(const ComputeSpec& spec) override;
  std::vector<ScratchSpec> scratch_specs(const Device& device, const Shape& input) const override;
  void forward(const StepContext& ctx, const Tensor& x, const Tensor& y,
               const std::vector<Tensor>& scratch) override;
  void backward(const StepContext& ctx, const Tensor& x, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const std::vector<Tensor>& scratch) override;
  // The activation after the sum takes its gradient from y.
  bool backward_reads_output() const override { return post_ != UnaryOp::identity; }
  UnaryOp post() const { return post_; }
  float post_alpha() const { return post_alpha_; }
  // Set by the Sequential that holds two residual blocks one after the other, on the second: its
  // input is the first's activated sum, so its input gradient goes back through that activation
  // (op, computed from the input) in the pass that adds its two branches' gradients
  // (Device::unary_backward_sum); identity: not. And on the first: the gradient it is given has
  // been through its activation already.
  void set_input_activation(UnaryOp op, float alpha) { input_op_ = op, input_alpha_ = alpha; }
  void set_output_gradient_activated(bool on) { output_gradient_activated_ = on; }

 private:
  // dx = dx + branch, through input_op_ where set: the input gradient's last pass.
  void add_branch_gradient(const StepContext& ctx, const Tensor& x, const Tensor& branch,
                           const Tensor& dx) const;
  // The memory a shortcut's buffers are made for: its input's batch size, and where its output
  // (forward) or its output's gradient (backward) lives (Sequential makes new buffers when that
  // changes).
  using BufferKey = std::tuple<int64_t, void*, size_t>;
  static BufferKey buffer_key(const Tensor& x, const Tensor& t);
  // Runs the projection shortcut's `work` on the device's side queue, beside the body, where
  // that queue takes every op (Device::side_queue_runs_every_op) and ctx.beside; else in order.
  // Not the first time for a key (`seen`): that pass allocates the shortcut's buffers, which
  // side work may not. Returns whether it went beside (the caller then joins, join_last_beside,
  // before reading the shortcut's results).
  bool run_shortcut(const StepContext& ctx, const BufferKey& key, std::set<BufferKey>& seen,
                    const std::function<void()>& work) const;
  Sequential body_, shortcut_;
  UnaryOp post_;
  float post_alpha_;
  UnaryOp input_op_ = UnaryOp::identity;
  float input_alpha_ = 0.0f;
  bool output_gradient_activated_ = false;
  bool body_into_output_ = true;  // the body writes y directly (its backward never reads y)
  // The body's last layer, a BatchNorm that adds the shortcut and applies post_ (a ReLU or
  // nothing) as it normalises (BatchNorm::set_fused_sum); null: a sum pass of the block's own.
  BatchNorm* fused_norm_ = nullptr;
  std::set<BufferKey> forward_seen_, backward_seen_;  // run before (run_shortcut)
};

}  // namespace trident
