// SGD, Adam and AdamW, each one device launch per step (plus one reduction when clipping).
#include "trident/models/optimizer.h"

#include <cmath>

#include "trident/core/error.h"

namespace trident {

void validate(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adam" && c.kind != "adamw")
    throw UsageError("unknown optimizer '" + c.kind + "' (use sgd, adam or adamw)");
  if (!(c.lr > 0.0f) || !std::isfinite(c.lr))
    throw UsageError("the learning rate must be positive and finite");
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) throw UsageError("momentum must be in [0, 1)");
  if (!(c.weight_decay >= 0.0f) || !std::isfinite(c.weight_decay))
    throw UsageError("weight decay must be finite and >= 0");
  if (c.nesterov && c.momentum == 0.0f)
    throw UsageError("Nesterov momentum needs a momentum > 0");
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f) || !(c.beta2 >= 0.0f && c.beta2 < 1.0f))
    throw UsageError("Adam's betas must be in [0, 1)");
  if (!(c.eps > 0.0f) || !std::isfinite(c.eps)) throw UsageError("Adam's eps must be positive");
  if (!(c.clip_grad_norm >= 0.0f) || !std::isfinite(c.clip_grad_norm))
    throw UsageError("the gradient clipping norm must be finite and >= 0");
}

Optimizer::Optimizer(const OptimizerConfig& config) : config_(config) { validate(config_); }

void Optimizer::attach(Network& network) {
  network_ = &network;
  Device& d = network.device();
  const int64_t n = network.parameter_count();
  state0_ = Tensor::zeros(d, {n});
  state1_ = config_.kind == "sgd" ? Tensor() : Tensor::zeros(d, {n});
  if (config_.clip_grad_norm > 0.0f) {
    control_.grad_sumsq = Tensor::zeros(d, {1});
    control_.max_norm = config_.clip_grad_norm;
  }
}

void Optimizer::set_schedule(const std::vector<float>& table) {
  if (!network_) throw Error("Optimizer::set_schedule before attach");
  control_.schedule =
      table.empty() ? Tensor()
                    : Tensor::from_host(network_->device(), {int64_t(table.size() / 2), 2}, table);
}

void Optimizer::enable_loss_scaling(float initial_scale, const LossScaleParams& params) {
  if (!network_) throw Error("Optimizer::enable_loss_scaling before attach");
  if (!(initial_scale > 0.0f) || !std::isfinite(initial_scale))
    throw UsageError("the initial loss scale must be positive and finite");
  Device& d = network_->device();
  loss_scale_params_ = params;
  loss_scale_state_ = Tensor::from_host(d, {2}, std::vector<float>{initial_scale, 0.0f});
  control_.loss_scale = loss_scale_state_.view(0, {1});
  if (!control_.grad_sumsq.defined()) control_.grad_sumsq = Tensor::zeros(d, {1});
}

void Optimizer::step(const StepContext& ctx, float grad_scale) {
  if (!network_) throw Error("Optimizer::step before attach");
  Device& d = *ctx.device;
  const Tensor& params = network_->parameters();
  const Tensor& grads = network_->gradients();
  if (control_.grad_sumsq.defined())  // the global norm, before the update reads it
    d.channel_sums(grads, grads, control_.grad_sumsq, 1, 1, grads.numel(), 0.0f);
  if (config_.kind == "sgd") {
    SgdParams hp;
    hp.lr = config_.lr;
    hp.momentum = config_.momentum;
    hp.weight_decay = config_.weight_decay;
    hp.nesterov = config_.nesterov;
    hp.grad_scale = grad_scale;
    d.sgd_update(params, grads, state0_, hp, control_, ctx.step_state);
  } else {
    AdamParams hp;
    hp.lr = config_.lr;
    hp.beta1 = config_.beta1;
    hp.beta2 = config_.beta2;
    hp.eps = config_.eps;
    hp.weight_decay = config_.weight_decay;
    hp.decoupled_weight_decay = config_.kind == "adamw";
    hp.grad_scale = grad_scale;
    d.adam_update(params, grads, state0_, state1_, hp, control_, ctx.step_state);
  }
  if (loss_scale_state_.defined())
    d.update_loss_scale(loss_scale_state_, control_.grad_sumsq, loss_scale_params_);
  d.advance_step(ctx.step_state);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  if (config_.kind == "sgd") return {{"momentum_buffer", state0_}};
  return {{"exp_avg", state0_}, {"exp_avg_sq", state1_}};
}

}  // namespace trident
