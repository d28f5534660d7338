// Optimizer updates, one launch over a whole flat parameter buffer: PyTorch's SGD, Adam and
// AdamW, in the order of operations of torch.optim's single-tensor paths (as kernels/cpu).
// Step-time values are read here, not baked in by the host, so that a captured step replays with
// the step's own values: the step count from step_state[1], the schedule's row for it, and the
// clip coefficient from the gradient's squared norm, the fp16 loss scale and whether the step is
// skipped (UpdateControl, core/op_types.h).

typedef struct {
  float lr, momentum, grad_scale;
  int skip;
} ResolvedStep;

// As kernels/cpu/optimizers.cpp resolve_step: lr and momentum (or beta1) from row
// min(steps_done, rows - 1) of the schedule (rows == 0: none); with a loss scale, grad_scale /
// loss_scale, and skip when grad_sumsq is not finite (an fp16 overflow: nothing is updated);
// with has_sumsq and max_norm > 0, grad_scale times min(1, max_norm / (norm + 1e-6)) where norm
// = (the unclipped) grad_scale * sqrt(grad_sumsq) (clip).
ResolvedStep resolve_step(float lr, float momentum, float grad_scale,
                          __global const float* schedule, ulong schedule_off,
                          uint schedule_rows, __global const float* grad_sumsq,
                          ulong grad_sumsq_off, int has_sumsq, float max_norm,
                          __global const float* loss_scale, ulong loss_scale_off,
                          int has_loss_scale, uint steps_done) {
  ResolvedStep r = {lr, momentum, grad_scale, 0};
  if (schedule_rows > 0) {
    const uint row = min(steps_done, schedule_rows - 1);
    r.lr = schedule[schedule_off + 2 * row];
    r.momentum = schedule[schedule_off + 2 * row + 1];
  }
  if (has_loss_scale) {
    r.skip = !isfinite(grad_sumsq[grad_sumsq_off]);
    // OpenCL's float division may be 2.5 ulp off; one residual step rounds it as the CPU's
    // division in double does (exactly for the usual power-of-two scales).
    const float s = loss_scale[loss_scale_off];
    float q = grad_scale / s;
    const float residual = fma(-q, s, grad_scale);
    if (isfinite(residual)) q += residual / s;
    grad_scale = q;
    r.grad_scale = q;
  }
  if (has_sumsq && max_norm > 0.0f) {
    const float norm = grad_scale * sqrt(grad_sumsq[grad_sumsq_off]);
    const float coef = max_norm / (norm + 1e-6f);
    if (coef < 1.0f) r.grad_scale = grad_scale * coef;
  }
  return r;
}

// 1 - beta^t without cancellation: -expm1(t * log1p(beta - 1)), where beta - 1 is exact for
// beta in [0.5, 1) (1 - pown(beta, t) in float loses about four digits at beta = 0.999).
float bias_correction(float beta, float t) { return -expm1(t * log1p(beta - 1.0f)); }

// d = g*grad_scale + weight_decay*p; buf = momentum*buf + d; d = nesterov ? d + momentum*buf :
// buf (momentum != 0 only); p -= lr*d. has_state == 0: no step_state (no schedule, no clip).
__kernel void sgd_update(__global float* params, ulong params_off, __global const float* grads,
                         ulong grads_off, __global float* momentum_buf, ulong momentum_off,
                         uint n, float lr, float momentum, float weight_decay, float grad_scale,
                         int nesterov, __global const float* schedule, ulong schedule_off,
                         uint schedule_rows, __global const float* grad_sumsq,
                         ulong grad_sumsq_off, int has_sumsq, float max_norm,
                         __global const float* loss_scale, ulong loss_scale_off,
                         int has_loss_scale, __global const uint* state, ulong state_off,
                         int has_state) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const ResolvedStep s = resolve_step(
      lr, momentum, grad_scale, schedule, schedule_off, schedule_rows, grad_sumsq, grad_sumsq_off,
      has_sumsq, max_norm, loss_scale, loss_scale_off, has_loss_scale,
      has_state ? state[state_off + 1] : 0u);
  if (s.skip) return;
  const float p = params[params_off + i];
  float d = grads[grads_off + i] * s.grad_scale + weight_decay * p;
  if (s.momentum != 0.0f) {
    const float buf = s.momentum * momentum_buf[momentum_off + i] + d;
    momentum_buf[momentum_off + i] = buf;
    d = nesterov ? d + s.momentum * buf : buf;
  }
  params[params_off + i] = p + -s.lr * d;
}

// Adam (decoupled == 0: L2, g += wd*p) or AdamW (p *= 1 - lr*wd first), t = step_state[1] + 1.
__kernel void adam_update(__global float* params, ulong params_off, __global const float* grads,
                          ulong grads_off, __global float* m_buf, ulong m_off,
                          __global float* v_buf, ulong v_off, uint n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int decoupled,
                          float grad_scale, __global const float* schedule, ulong schedule_off,
                          uint schedule_rows, __global const float* grad_sumsq,
                          ulong grad_sumsq_off, int has_sumsq, float max_norm,
                          __global const float* loss_scale, ulong loss_scale_off,
                          int has_loss_scale, __global const uint* state, ulong state_off) {
  const uint i = get_global_id(0);
  if (i >= n) return;
  const uint steps_done = state[state_off + 1];
  const ResolvedStep s = resolve_step(lr, beta1, grad_scale, schedule, schedule_off,
                                      schedule_rows, grad_sumsq, grad_sumsq_off, has_sumsq,
                                      max_norm, loss_scale, loss_scale_off, has_loss_scale,
                                      steps_done);
  if (s.skip) return;
  const float t = (float)steps_done + 1.0f;
  const float step_size = s.lr / bias_correction(s.momentum, t);
  const float correction2_sqrt = sqrt(bias_correction(beta2, t));
  const float l2 = decoupled ? 0.0f : weight_decay;
  float p = params[params_off + i];
  if (decoupled) p *= 1.0f - s.lr * weight_decay;
  const float g = grads[grads_off + i] * s.grad_scale + l2 * p;
  const float m = m_buf[m_off + i] * s.momentum + (1.0f - s.momentum) * g;
  const float v = v_buf[v_off + i] * beta2 + (1.0f - beta2) * g * g;
  m_buf[m_off + i] = m;
  v_buf[v_off + i] = v;
  const float denom = sqrt(v) / correction2_sqrt + eps;
  params[params_off + i] = p + -step_size * (m / denom);
}

// Dynamic loss scaling after a step (LossScaleParams; kernels/cpu/optimizers.cpp
// update_loss_scale): state = {scale, clean steps}. A non-finite grad_sumsq multiplies the scale
// by backoff and restarts the count; `interval` clean steps in a row multiply it by growth. One
// work-item: the state stays on the device, so a captured step replays with the current scale.
__kernel void update_loss_scale(__global float* state, ulong state_off,
                                __global const float* grad_sumsq, ulong grad_sumsq_off,
                                float growth, float backoff, float interval) {
  __global float* s = state + state_off;
  if (!isfinite(grad_sumsq[grad_sumsq_off])) {
    s[0] *= backoff;
    s[1] = 0.0f;
    return;
  }
  s[1] += 1.0f;
  if (s[1] >= interval) {
    s[0] *= growth;
    s[1] = 0.0f;
  }
}
