// NLL and cross-entropy losses as Device ops.
#include "trident/models/loss.h"

#include "trident/core/error.h"

namespace trident {
namespace {
void check(const Tensor& output, const Tensor& labels) {
  if (output.shape().size() != 2 || labels.shape() != Shape{output.dim(0)} ||
      labels.dtype() != DType::i32)
    throw ShapeError("loss expects output [B, C] and int32 labels [B], got " +
                     shape_string(output.shape()) + " and " + shape_string(labels.shape()));
}
}  // namespace

void NLLLoss::forward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                      const Tensor& loss, bool accumulate) {
  check(output, labels);
  ctx.device->nll_loss_forward(output.memory(), labels.memory(), output.dim(0), output.dim(1),
                               loss.memory(), accumulate);
}

void NLLLoss::backward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                       const Tensor& grad, float scale) {
  check(output, labels);
  ctx.device->nll_loss_backward(labels.memory(), output.dim(0), output.dim(1),
                                scale / static_cast<float>(output.dim(0)), grad.memory());
}

CrossEntropyLoss::Buffers& CrossEntropyLoss::buffers_for(Device& device, const Shape& shape) {
  auto found = buffers_.find(shape[0]);
  if (found != buffers_.end() && found->second.log_probs.shape() == shape) return found->second;
  Buffers b{Tensor::empty(device, shape), Tensor::empty(device, shape)};
  return buffers_[shape[0]] = std::move(b);
}

void CrossEntropyLoss::forward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                               const Tensor& loss, bool accumulate) {
  check(output, labels);
  Buffers& b = buffers_for(*ctx.device, output.shape());
  ctx.device->log_softmax_forward(output.memory(), b.log_probs.memory(), output.dim(0),
                                  output.dim(1));
  ctx.device->nll_loss_forward(b.log_probs.memory(), labels.memory(), output.dim(0),
                               output.dim(1), loss.memory(), accumulate);
}

void CrossEntropyLoss::backward(const StepContext& ctx, const Tensor& output,
                                const Tensor& labels, const Tensor& grad, float scale) {
  check(output, labels);
  Buffers& b = buffers_for(*ctx.device, output.shape());
  ctx.device->nll_loss_backward(labels.memory(), output.dim(0), output.dim(1),
                                scale / static_cast<float>(output.dim(0)),
                                b.log_prob_grad.memory());
  ctx.device->log_softmax_backward(b.log_probs.memory(), b.log_prob_grad.memory(), grad.memory(),
                                   output.dim(0), output.dim(1));
}

std::unique_ptr<Loss> make_loss(const std::string& name) {
  if (name == "nll") return std::make_unique<NLLLoss>();
  if (name == "cross_entropy") return std::make_unique<CrossEntropyLoss>();
  throw UsageError("unknown loss '" + name + "' (use nll or cross_entropy)");
}

}  // namespace trident
