// CUDA optimizer updates in PyTorch's order of operations (as kernels/cpu/optimizers.cpp): the
// step's hyper-parameters are resolved once per block by thread 0 (schedule row, clipping
// coefficient, Adam's bias corrections in double, as Python computes them), then one
// grid-stride loop updates the parameters.
#include <cmath>

#include "trident/kernels/cuda/launch.cuh"
#include "trident/kernels/cuda/optimizers.h"

namespace trident::cuda {
namespace {

struct Resolved {
  float lr, momentum, grad_scale;  // momentum: SGD's momentum or Adam's beta1
  bool skip;                       // an overflowed fp16 step: nothing changes
};

// kernels/cpu/optimizers.cpp's resolve_step, on the device.
__device__ Resolved resolve(float lr, float momentum, float grad_scale,
                            const UpdateControlArgs& c, const uint32_t* step_state) {
  Resolved r{lr, momentum, grad_scale, false};
  if (c.schedule) {
    const int64_t done = int64_t(step_state[1]);
    const int64_t row = done < c.schedule_rows - 1 ? done : c.schedule_rows - 1;
    r.lr = c.schedule[2 * row];
    r.momentum = c.schedule[2 * row + 1];
  }
  if (c.loss_scale) {
    if (!isfinite(c.grad_sumsq[0])) r.skip = true;
    grad_scale = float(double(grad_scale) / double(c.loss_scale[0]));
    r.grad_scale = grad_scale;
  }
  if (c.grad_sumsq && c.max_norm > 0.0f) {
    const double norm = double(grad_scale) * sqrt(double(c.grad_sumsq[0]));
    const double coef = double(c.max_norm) / (norm + 1e-6);
    if (coef < 1.0) r.grad_scale = float(double(grad_scale) * coef);
  }
  return r;
}

__global__ void sgd_kernel(float* params, const float* grads, float* momentum, int64_t n,
                           SgdParams hp, UpdateControlArgs control, const uint32_t* step_state) {
  __shared__ Resolved step;
  if (threadIdx.x == 0) step = resolve(hp.lr, hp.momentum, hp.grad_scale, control, step_state);
  __syncthreads();
  if (step.skip) return;
  const float lr = step.lr, mu = step.momentum, gs = step.grad_scale, wd = hp.weight_decay;
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>()) {
    float d = grads[i] * gs + wd * params[i];  // d_p.add(param, alpha=wd)
    if (mu != 0.f) {
      const float buf = mu * momentum[i] + d;  // buf.mul_(momentum).add_(d_p); starts at 0
      momentum[i] = buf;
      d = hp.nesterov ? d + mu * buf : buf;
    }
    params[i] += -lr * d;  // param.add_(d_p, alpha=-lr)
  }
}

struct AdamStep {
  float lr, beta1, one_minus_beta1, grad_scale, step_size, bias_correction2_sqrt, shrink, l2;
  bool skip;
};

__global__ void adam_kernel(float* params, const float* grads, float* m, float* v, int64_t n,
                            AdamParams hp, UpdateControlArgs control,
                            const uint32_t* step_state) {
  __shared__ AdamStep step;
  if (threadIdx.x == 0) {
    const Resolved r = resolve(hp.lr, hp.beta1, hp.grad_scale, control, step_state);
    const double t = double(step_state[1]) + 1.0;
    const double bias_correction1 = 1.0 - pow(double(r.momentum), t);
    const double bias_correction2 = 1.0 - pow(double(hp.beta2), t);
    step.lr = r.lr;
    step.beta1 = r.momentum;
    step.one_minus_beta1 = float(1.0 - double(r.momentum));
    step.grad_scale = r.grad_scale;
    step.step_size = float(double(r.lr) / bias_correction1);
    step.bias_correction2_sqrt = float(sqrt(bias_correction2));
    // Adam adds wd * p to the gradient (L2); AdamW shrinks the weight first: p *= 1 - lr * wd.
    step.shrink = hp.decoupled_weight_decay ? 1.0f - r.lr * hp.weight_decay : 1.0f;
    step.l2 = hp.decoupled_weight_decay ? 0.0f : hp.weight_decay;
    step.skip = r.skip;
  }
  __syncthreads();
  if (step.skip) return;
  const AdamStep s = step;
  const float b2 = hp.beta2, one_minus_b2 = float(1.0 - double(hp.beta2)), eps = hp.eps;
  for (int64_t i = first_index<int64_t>(); i < n; i += grid_step<int64_t>()) {
    float p = params[i];
    if (s.shrink != 1.0f) p *= s.shrink;                    // param.mul_(1 - lr * wd)
    const float g = grads[i] * s.grad_scale + s.l2 * p;     // grad.add(param, alpha=wd)
    const float mi = m[i] * s.beta1 + s.one_minus_beta1 * g;
    const float vi = v[i] * b2 + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / s.bias_correction2_sqrt + eps;
    params[i] = p + -s.step_size * (mi / denom);            // param.addcdiv_(m, denom, -step)
  }
}

// kernels/cpu/optimizers.cpp's update_loss_scale.
__global__ void update_loss_scale_kernel(float* state, const float* grad_sumsq,
                                         LossScaleParams params) {
  if (!isfinite(grad_sumsq[0])) {
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

}  // namespace

void launch_sgd_update(const KernelContext& ctx, float* params, const float* grads,
                       float* momentum, int64_t n, const SgdParams& hp,
                       const UpdateControlArgs& control, const uint32_t* step_state) {
  if (n <= 0) return;
  sgd_kernel<<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(params, grads, momentum, n, hp,
                                                            control, step_state);
}

void launch_adam_update(const KernelContext& ctx, float* params, const float* grads, float* m,
                        float* v, int64_t n, const AdamParams& hp,
                        const UpdateControlArgs& control, const uint32_t* step_state) {
  if (n <= 0) return;
  adam_kernel<<<grid_for(n), kBlockThreads, 0, ctx.stream>>>(params, grads, m, v, n, hp, control,
                                                             step_state);
}

void launch_update_loss_scale(const KernelContext& ctx, float* state, const float* grad_sumsq,
                              const LossScaleParams& params) {
  update_loss_scale_kernel<<<1, 1, 0, ctx.stream>>>(state, grad_sumsq, params);
}

}  // namespace trident::cuda
