// SGD (momentum, weight decay, Nesterov) and Adam, each one device launch per step.
#include "trident/models/optimizer.h"

#include "trident/core/error.h"

namespace trident {
namespace {

class Sgd : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) {
    hp_.lr = c.lr; hp_.momentum = c.momentum; hp_.weight_decay = c.weight_decay;
    hp_.nesterov = c.nesterov;
  }
  std::string name() const override { return "sgd"; }
  void attach(Network& network) override {
    network_ = &network;
    momentum_ = Tensor::zeros(network.device(), {network.parameter_count()});
  }
  void step(const StepContext& ctx, float grad_scale) override {
    SgdParams hp = hp_;
    hp.grad_scale = grad_scale;
    ctx.device->sgd_update(network_->parameters().memory(), network_->gradients().memory(),
                           momentum_.memory(), network_->parameter_count(), hp);
  }
  std::vector<std::pair<std::string, Tensor>> state() const override {
    return {{"momentum_buffer", momentum_}};
  }
  float learning_rate() const override { return hp_.lr; }

 private:
  SgdParams hp_;
  Network* network_ = nullptr;
  Tensor momentum_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(const OptimizerConfig& c) {
    hp_.lr = c.lr; hp_.beta1 = c.beta1; hp_.beta2 = c.beta2; hp_.eps = c.eps;
    hp_.weight_decay = c.weight_decay;
  }
  std::string name() const override { return "adam"; }
  void attach(Network& network) override {
    network_ = &network;
    m_ = Tensor::zeros(network.device(), {network.parameter_count()});
    v_ = Tensor::zeros(network.device(), {network.parameter_count()});
  }
  void step(const StepContext& ctx, float grad_scale) override {
    AdamParams hp = hp_;
    hp.grad_scale = grad_scale;
    ctx.device->adam_update(network_->parameters().memory(), network_->gradients().memory(),
                            m_.memory(), v_.memory(), network_->parameter_count(), hp,
                            ctx.step_state);
  }
  std::vector<std::pair<std::string, Tensor>> state() const override {
    return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
  }
  float learning_rate() const override { return hp_.lr; }

 private:
  AdamParams hp_;
  Network* network_ = nullptr;
  Tensor m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config) {
  if (!(config.lr > 0.0f)) throw UsageError("learning rate must be positive");
  if (config.momentum < 0.0f || config.momentum >= 1.0f)
    throw UsageError("momentum must be in [0, 1)");
  if (config.weight_decay < 0.0f) throw UsageError("weight decay must be >= 0");
  if (config.kind == "sgd") return std::make_unique<Sgd>(config);
  if (config.kind == "adam") return std::make_unique<Adam>(config);
  throw UsageError("unknown optimizer '" + config.kind + "' (use sgd or adam)");
}

}  // namespace trident
