// CUDA optimizer updates in PyTorch's order of operations (as kernels/cpu/optimizers.cpp): the
// step's hyper-parameters are resolved once per block by thread 0 (schedule row, clipping
// coefficient, Adam's bias corrections in double, as Python computes them), then one
// grid-stride loop updates the parameters, four at a time where the buffers allow.
#include <cmath>
#include <type_traits>

#include "trident/kernels/cuda/float_types.cuh"
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

// Calls update(p[i], g[i], s0[i], s1[i]) for every i in [0, n) over the grid, then writes
// copy[i] = p[i] rounded to C (C = float: no copy): packs of four (16-byte accesses) where every
// buffer lies at the same offset from a 16-byte boundary (the views of one range of the flat
// buffers do; the copy's 16-bit elements then start packs at 8-byte boundaries), the ragged ends
// and other cases one by one. s0 and s1 may be null (update then gets a dummy). The same update
// function either way, so the results do not depend on the path.
template <typename C, typename Update>
__device__ __forceinline__ void for_each_parameter(float* p, const float* g, float* s0,
                                                   float* s1, C* copy, int64_t n,
                                                   const Update& update) {
  constexpr bool kCopy = !std::is_same<C, float>::value;
  const auto offset = [](const void* x, int size) {
    return (reinterpret_cast<uintptr_t>(x) / size) % 4;
  };
  const uintptr_t o = offset(p, 4);
  const bool packed = offset(g, 4) == o && (!s0 || offset(s0, 4) == o) &&
                      (!s1 || offset(s1, 4) == o) && (!kCopy || offset(copy, 2) == o);
  const int64_t head = packed ? min(n, int64_t((4 - o) % 4)) : n;
  const int64_t packs = (n - head) / 4;
  const int64_t tail = head + 4 * packs;
  auto one = [&](int64_t i) {
    float pi = p[i];
    float a = s0 ? s0[i] : 0.f, b = s1 ? s1[i] : 0.f;
    update(pi, g[i], a, b);
    p[i] = pi;
    if (s0) s0[i] = a;
    if (s1) s1[i] = b;
    if constexpr (kCopy) copy[i] = from_float<C>(pi);
  };
  const int64_t first = first_index<int64_t>(), step = grid_step<int64_t>();
  for (int64_t i = first; i < head; i += step) one(i);
  for (int64_t k = first; k < packs; k += step) {
    const int64_t i = head + 4 * k;
    float4 pv = *reinterpret_cast<const float4*>(p + i);
    const float4 gv = *reinterpret_cast<const float4*>(g + i);
    float4 av = s0 ? *reinterpret_cast<const float4*>(s0 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 bv = s1 ? *reinterpret_cast<const float4*>(s1 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    update(pv.x, gv.x, av.x, bv.x);
    update(pv.y, gv.y, av.y, bv.y);
    update(pv.z, gv.z, av.z, bv.z);
    update(pv.w, gv.w, av.w, bv.w);
    *reinterpret_cast<float4*>(p + i) = pv;
    if (s0) *reinterpret_cast<float4*>(s0 + i) = av;
    if (s1) *reinterpret_cast<float4*>(s1 + i) = bv;
    if constexpr (kCopy) {
      const auto pair = [](float lo, float hi) {
        return uint32_t(from_float<C>(lo).bits) | uint32_t(from_float<C>(hi).bits) << 16;
      };
      *reinterpret_cast<uint2*>(copy + i) = make_uint2(pair(pv.x, pv.y), pair(pv.z, pv.w));
    }
  }
  for (int64_t i = tail + first; i < n; i += step) one(i);
}

template <typename C>
__global__ void sgd_kernel(float* params, const float* grads, float* momentum, C* copy, int64_t n,
                           SgdParams hp, UpdateControlArgs control, const uint32_t* step_state) {
  wait_for_prior_grids();
  __shared__ Resolved step;
  if (threadIdx.x == 0) step = resolve(hp.lr, hp.momentum, hp.grad_scale, control, step_state);
  __syncthreads();
  if (step.skip) return;  // the params, and so their copy, stay as they are
  const float lr = step.lr, mu = step.momentum, gs = step.grad_scale, wd = hp.weight_decay;
  const bool nesterov = hp.nesterov;
  for_each_parameter(params, grads, mu != 0.f ? momentum : nullptr, nullptr, copy, n,
                     [=](float& p, float g, float& buf, float&) {
                       float d = g * gs + wd * p;  // d_p.add(param, alpha=wd)
                       if (mu != 0.f) {
                         buf = mu * buf + d;  // buf.mul_(momentum).add_(d_p); starts at 0
                         d = nesterov ? d + mu * buf : buf;
                       }
                       p += -lr * d;  // param.add_(d_p, alpha=-lr)
                     });
}

struct AdamStep {
  float lr, beta1, one_minus_beta1, grad_scale, step_size, bias_correction2_sqrt, shrink, l2;
  bool skip;
};

template <typename C>
__global__ void adam_kernel(float* params, const float* grads, float* m, float* v, C* copy,
                            int64_t n, AdamParams hp, UpdateControlArgs control,
                            const uint32_t* step_state) {
  wait_for_prior_grids();
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
  for_each_parameter(params, grads, m, v, copy, n, [=](float& p, float g_in, float& mi, float& vi) {
    if (s.shrink != 1.0f) p *= s.shrink;                 // param.mul_(1 - lr * wd)
    const float g = g_in * s.grad_scale + s.l2 * p;      // grad.add(param, alpha=wd)
    mi = mi * s.beta1 + s.one_minus_beta1 * g;
    vi = vi * b2 + one_minus_b2 * g * g;
    const float denom = sqrtf(vi) / s.bias_correction2_sqrt + eps;
    p = p + -s.step_size * (mi / denom);                 // param.addcdiv_(m, denom, -step)
  });
}

// kernels/cpu/optimizers.cpp's update_loss_scale.
__global__ void update_loss_scale_kernel(float* state, const float* grad_sumsq,
                                         LossScaleParams params) {
  wait_for_prior_grids();
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
                       const UpdateControlArgs& control, const uint32_t* step_state,
                       void* copy, DType copy_type) {
  if (n <= 0) return;
  const unsigned grid = grid_for((n + 3) / 4);
  if (!copy)
    launch(ctx, sgd_kernel<float>, grid, kBlockThreads, 0, params, grads, momentum, nullptr, n,
           hp, control, step_state);
  else if (copy_type == DType::bf16)
    launch(ctx, sgd_kernel<Bf16>, grid, kBlockThreads, 0, params, grads, momentum,
           static_cast<Bf16*>(copy), n, hp, control, step_state);
  else
    launch(ctx, sgd_kernel<F16>, grid, kBlockThreads, 0, params, grads, momentum,
           static_cast<F16*>(copy), n, hp, control, step_state);
}

void launch_adam_update(const KernelContext& ctx, float* params, const float* grads, float* m,
                        float* v, int64_t n, const AdamParams& hp,
                        const UpdateControlArgs& control, const uint32_t* step_state,
                        void* copy, DType copy_type) {
  if (n <= 0) return;
  const unsigned grid = grid_for((n + 3) / 4);
  if (!copy)
    launch(ctx, adam_kernel<float>, grid, kBlockThreads, 0, params, grads, m, v, nullptr, n, hp,
           control, step_state);
  else if (copy_type == DType::bf16)
    launch(ctx, adam_kernel<Bf16>, grid, kBlockThreads, 0, params, grads, m, v,
           static_cast<Bf16*>(copy), n, hp, control, step_state);
  else
    launch(ctx, adam_kernel<F16>, grid, kBlockThreads, 0, params, grads, m, v,
           static_cast<F16*>(copy), n, hp, control, step_state);
}

void launch_update_loss_scale(const KernelContext& ctx, float* state, const float* grad_sumsq,
                              const LossScaleParams& params) {
  launch(ctx, update_loss_scale_kernel, 1, 1, 0, state, grad_sumsq, params);
}

}  // namespace trident::cuda
