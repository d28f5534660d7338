// CPU optimizer updates, written in the order of operations of torch.optim's single-tensor
// paths (torch/optim/sgd.py, adam.py) so that float results match PyTorch's closely.
#include "trident/kernels/cpu/optimizers.h"

#include <algorithm>
#include <cmath>

#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {

void sgd_update(float* params, const float* grads, float* momentum, int64_t n,
                const SgdParams& hp) {
  const float lr = hp.lr, mu = hp.momentum, wd = hp.weight_decay, gs = hp.grad_scale;
  const bool nesterov = hp.nesterov;
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    if (mu == 0.f) {
      for (int64_t i = b; i < e; ++i) {
        const float d = grads[i] * gs + wd * params[i];  // d_p.add(param, alpha=wd)
        params[i] += -lr * d;                           // param.add_(d_p, alpha=-lr)
      }
      return;
    }
    for (int64_t i = b; i < e; ++i) {
      float d = grads[i] * gs + wd * params[i];
      const float buf = mu * momentum[i] + d;  // buf.mul_(momentum).add_(d_p); buf starts at 0
      momentum[i] = buf;
      d = nesterov ? d + mu * buf : buf;       // d_p.add(buf, alpha=momentum)
      params[i] += -lr * d;
    }
  });
}

ResolvedStep resolve_step(float lr, float momentum, float grad_scale, const float* schedule,
                          int64_t schedule_rows, const float* grad_sumsq, float max_norm,
                          const float* loss_scale, uint32_t steps_done) {
  ResolvedStep r{lr, momentum, grad_scale};
  if (schedule_rows > 0) {
    const int64_t row = std::min<int64_t>(int64_t(steps_done), schedule_rows - 1);
    r.lr = schedule[2 * row];
    r.momentum = schedule[2 * row + 1];
  }
  if (loss_scale) {
    if (!std::isfinite(grad_sumsq[0])) r.skip = true;
    grad_scale = float(double(grad_scale) / double(loss_scale[0]));
    r.grad_scale = grad_scale;
  }
  if (grad_sumsq && max_norm > 0.0f) {
    const double norm = double(grad_scale) * std::sqrt(double(grad_sumsq[0]));
    const double coef = double(max_norm) / (norm + 1e-6);
    if (coef < 1.0) r.grad_scale = float(double(grad_scale) * coef);
  }
  return r;
}

void adam_update(float* params, const float* grads, float* m, float* v, int64_t n,
                 const AdamParams& hp, uint32_t steps_done) {
  // Python computes the bias corrections in double, then the tensor ops round them to float.
  const double t = double(steps_done) + 1.0;
  const double bias_correction1 = 1.0 - std::pow(double(hp.beta1), t);
  const double bias_correction2 = 1.0 - std::pow(double(hp.beta2), t);
  const float step_size = float(double(hp.lr) / bias_correction1);
  const float bias_correction2_sqrt = float(std::sqrt(bias_correction2));
  const float b1 = hp.beta1, b2 = hp.beta2, one_minus_b1 = float(1.0 - double(hp.beta1)),
              one_minus_b2 = float(1.0 - double(hp.beta2)), eps = hp.eps,
              gs = hp.grad_scale;
  // Adam adds wd * p to the gradient (L2); AdamW shrinks the weight first: p *= 1 - lr * wd.
  const float l2 = hp.decoupled_weight_decay ? 0.0f : hp.weight_decay;
  const float shrink = hp.decoupled_weight_decay ? 1.0f - hp.lr * hp.weight_decay : 1.0f;
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (shrink != 1.0f) params[i] *= shrink;                // param.mul_(1 - lr * wd)
      const float g = grads[i] * gs + l2 * params[i];        // grad.add(param, alpha=wd)
      const float mi = m[i] * b1 + one_minus_b1 * g;          // exp_avg.lerp_ / mul_.add_
      const float vi = v[i] * b2 + one_minus_b2 * g * g;      // exp_avg_sq.mul_.addcmul_
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
      params[i] += -step_size * (mi / denom);                 // param.addcdiv_(m, denom, -step)
    }
  });
}

void update_loss_scale(float* state, float grad_sumsq, const LossScaleParams& params) {
  if (!std::isfinite(grad_sumsq)) {
    state[0] *= params.backoff;
    state[1] = 0.0f;
    return;
  }
  state[1] += 1.0f;
  if (state[1] >= float(params.interval)) {
    state[0] *= params.growth;
    state[1] = 0.0f;
  }
}

}  // namespace trident::cpu
