// SGD, Adam and AdamW, each one device launch per step (plus one reduction when clipping), which
// also writes the network's 16-bit compute copy of the weights in 16-bit runs.
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
  const Tensor& grads = network_->gradients();
  if (control_.grad_sumsq.defined())  // the global norm, before the update reads it
    ctx.device->channel_sums(grads, grads, control_.grad_sumsq, 1, 1, grads.numel(), 0.0f);
  update(ctx, network_->parameters(), grads, state0_, state1_, network_->compute_parameters(),
         grad_scale);
  if (loss_scale_state_.defined())
    ctx.device->update_loss_scale(loss_scale_state_, control_.grad_sumsq, loss_scale_params_);
  ctx.device->advance_step(ctx.step_state);
}

void Optimizer::update_range(const StepContext& ctx, int64_t begin, int64_t count,
                             float grad_scale) {
  if (!network_) throw Error("Optimizer::update_range before attach");
  if (!updates_by_range())
    throw Error("Optimizer::update_range with gradient clipping or loss scaling (use step())");
  const int64_t n = network_->parameter_count();
  if (begin < 0 || count < 0 || begin > n || count > n - begin)
    throw Error("Optimizer::update_range [" + std::to_string(begin) + ", +" +
                std::to_string(count) + ") outside the " + std::to_string(n) + " parameters");
  if (count == 0) return;
  auto range = [&](const Tensor& t) { return t.defined() ? t.view(begin, {count}) : Tensor(); };
  update(ctx, range(network_->parameters()), range(network_->gradients()), range(state0_),
         range(state1_), range(network_->compute_parameters()), grad_scale);
}

void Optimizer::finish_step(const StepContext& ctx) {
  if (!network_) throw Error("Optimizer::finish_step before attach");
  ctx.device->advance_step(ctx.step_state);
}

void Optimizer::update(const StepContext& ctx, const Tensor& params, const Tensor& grads,
                       const Tensor& state0, const Tensor& state1, const Tensor& compute_copy,
                       float grad_scale) {
  Device& d = *ctx.device;
  if (config_.kind == "sgd") {
    SgdParams hp;
    hp.lr = config_.lr;
    hp.momentum = config_.momentum;
    hp.weight_decay = config_.weight_decay;
    hp.nesterov = config_.nesterov;
    hp.grad_scale = grad_scale;
    d.sgd_update(params, grads, state0, hp, control_, ctx.step_state, compute_copy);
  } else {
    AdamParams hp;
    hp.lr = config_.lr;
    hp.beta1 = config_.beta1;
    hp.beta2 = config_.beta2;
    hp.eps = config_.eps;
    hp.weight_decay = config_.weight_decay;
    hp.decoupled_weight_decay = config_.kind == "adamw";
    hp.grad_scale = grad_scale;
    d.adam_update(params, grads, state0, state1, hp, control_, ctx.step_state, compute_copy);
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  if (config_.kind == "sgd") return {{"momentum_buffer", state0_}};
  return {{"exp_avg", state0_}, {"exp_avg_sq", state1_}};
}

}  // namespace trident
