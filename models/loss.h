// Losses over a network's output: NLL (on log-probabilities) and cross-entropy (on logits).
// Each keeps the mean over the batch on the device; nothing is read back per step.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "trident/models/layer.h"

namespace trident {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  // loss[0] = (accumulate ? loss[0] : 0) + mean loss of this batch. labels: int32 [B].
  virtual void forward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                       const Tensor& loss, bool accumulate) = 0;
  // d(mean loss)/d(output) * scale into grad (scale 1 = this batch's mean).
  virtual void backward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                        const Tensor& grad, float scale = 1.0f) = 0;
};

// For outputs that are already log-probabilities (a LogSoftmax layer ends the model).
class NLLLoss : public Loss {
 public:
  std::string name() const override { return "nll"; }
  void forward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
               const Tensor& loss, bool accumulate) override;
  void backward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                const Tensor& grad, float scale) override;
};

// log_softmax + NLL on logits; keeps the log-probabilities of each batch size it has seen.
class CrossEntropyLoss : public Loss {
 public:
  std::string name() const override { return "cross_entropy"; }
  void forward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
               const Tensor& loss, bool accumulate) override;
  void backward(const StepContext& ctx, const Tensor& output, const Tensor& labels,
                const Tensor& grad, float scale) override;

 private:
  struct Buffers { Tensor log_probs, log_prob_grad; };
  Buffers& buffers_for(Device& device, const Shape& shape);
  std::map<int64_t, Buffers> buffers_;
};

std::unique_ptr<Loss> make_loss(const std::string& name);  // "nll" or "cross_entropy"

}  // namespace trident
