// CPU optimizer updates over one flat parameter buffer: PyTorch's SGD, Adam and AdamW.
#pragma once
#include <cstdint>

#include "trident/core/op_types.h"

namespace trident::cpu {

// torch.optim.SGD (dampening 0): see SgdParams. momentum may be null when hp.momentum == 0.
void sgd_update(float* params, const float* grads, float* momentum, int64_t n,
                const SgdParams& hp);
// The hyper-parameters of optimizer step `steps_done` once UpdateControl is applied: the
// schedule's row replaces lr and momentum (or beta1), a loss scale divides grad_scale, and the
// clip coefficient min(1, max_norm / (grad_scale * sqrt(grad_sumsq) + 1e-6)) multiplies it.
// With a loss scale, a non-finite grad_sumsq skips the update. schedule_rows == 0 / grad_sumsq
// null / loss_scale null / max_norm 0: not used.
struct ResolvedStep {
  float lr, momentum, grad_scale;
  bool skip = false;
};
ResolvedStep resolve_step(float lr, float momentum, float grad_scale, const float* schedule,
                          int64_t schedule_rows, const float* grad_sumsq, float max_norm,
                          const float* loss_scale, uint32_t steps_done);
// GradScaler's update: state = {scale, clean steps}; see LossScaleParams.
void update_loss_scale(float* state, float grad_sumsq, const LossScaleParams& params);
// torch.optim.Adam (L2 weight decay) or AdamW (decoupled), amsgrad off: see AdamParams;
// t = steps_done + 1.
void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, uint32_t steps_done);

}  // namespace trident::cpu
