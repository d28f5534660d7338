// Optimizers: one fused device launch over the network's whole flat parameter buffer per step.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trident/models/network.h"

namespace trident {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // Allocates the state buffers (zeroed) for this network's flat parameter buffer.
  virtual void attach(Network& network) = 0;
  // params -= update(grads * grad_scale); step_state[1] is the number of steps done before.
  virtual void step(const StepContext& ctx, float grad_scale = 1.0f) = 0;
  // The state tensors, named for checkpoints ("momentum_buffer", "exp_avg", "exp_avg_sq").
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  virtual float learning_rate() const = 0;
};

struct OptimizerConfig {
  std::string kind = "sgd";      // "sgd" or "adam"
  float lr = 0.01f;
  float momentum = 0.5f;         // SGD only
  float weight_decay = 0.0f;
  bool nesterov = false;         // SGD only
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // Adam only
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config);

}  // namespace trident
