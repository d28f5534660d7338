// Optimizers: one fused device launch over the network's whole flat parameter buffer per step
// (SGD with momentum / Nesterov, Adam, AdamW), with the learning-rate schedule and gradient
// clipping read on the device. step() also advances the step counters, so that no caller can
// forget it (Adam's t, dropout masks and schedules all read them).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trident/models/network.h"
#include "trident/models/schedule.h"

namespace trident {

struct OptimizerConfig {
  std::string kind = "sgd";      // "sgd", "adam" or "adamw"
  float lr = 0.01f;
  float momentum = 0.5f;         // SGD only
  float weight_decay = 0.0f;     // SGD and Adam: L2 added to the gradient; AdamW: decoupled
  bool nesterov = false;         // SGD only
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // Adam / AdamW
  float clip_grad_norm = 0.0f;   // > 0: scale gradients to at most this global L2 norm
};

// UsageError naming the setting for an unknown kind or a value out of range (NaN included).
void validate(const OptimizerConfig& config);

class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& config);
  const std::string& name() const { return config_.kind; }
  const OptimizerConfig& config() const { return config_; }
  // Allocates the state buffers (zeroed) for this built network's parameters.
  void attach(Network& network);
  // Uploads a schedule table (models/schedule.h; empty: the constant lr) to the device.
  void set_schedule(const std::vector<float>& table);
  // fp16 dynamic loss scaling (after attach): the loss gradient is multiplied by loss_scale()
  // (Network::forward_loss), step() divides it out, skips a step whose gradients overflowed
  // and then adjusts the scale on the device (Device::update_loss_scale), so that a captured
  // step keeps scaling without the host looking.
  void enable_loss_scaling(float initial_scale = 65536.0f, const LossScaleParams& params = {});
  const Tensor& loss_scale() const { return control_.loss_scale; }  // f32 [1]; undefined: off
  const Tensor& loss_scale_state() const { return loss_scale_state_; }  // f32 [2]: scale, clean steps
  // params -= update(gradients * grad_scale), clipped and scheduled; then step_state advances.
  // In a 16-bit run the network's compute copy (Network::compute_parameters) is written from
  // the updated params as well. Allocates nothing (capturable). The same as update_range over
  // all parameters + finish_step.
  void step(const StepContext& ctx, float grad_scale = 1.0f);
  // A step in pieces, so that each range can be updated as soon as its gradients are final
  // (the Trainer queues them beside the rest of backward, Device::queue_beside): every
  // parameter in exactly one update_range call, then finish_step once. Only where
  // updates_by_range(): gradient clipping and fp16 loss scaling need every gradient first.
  bool updates_by_range() const { return !control_.grad_sumsq.defined(); }
  void update_range(const StepContext& ctx, int64_t begin, int64_t count, float grad_scale = 1.0f);
  void finish_step(const StepContext& ctx);
  // The state tensors, named as PyTorch's optimizer state ("momentum_buffer", "exp_avg", ...).
  std::vector<std::pair<std::string, Tensor>> state() const;

 private:
  // The update of one range (views of the same range of every buffer).
  void update(const StepContext& ctx, const Tensor& params, const Tensor& grads,
              const Tensor& state0, const Tensor& state1, const Tensor& compute_copy,
              float grad_scale);

  OptimizerConfig config_;
  Network* network_ = nullptr;
  Tensor state0_, state1_;  // momentum (SGD) or exp_avg, exp_avg_sq (Adam)
  UpdateControl control_;
  Tensor loss_scale_state_;
  LossScaleParams loss_scale_params_;
};

}  // namespace trident
