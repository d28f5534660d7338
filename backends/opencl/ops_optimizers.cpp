// The optimizer slots (kernels/opencl/optimizers.cl): one launch over the whole flat parameter
// buffer, the schedule row, the clip coefficient, the fp16 loss scale (an overflowed step is
// skipped) and Adam's step read on the device; and the loss scale's own update.
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

void OpenClDevice::do_sgd_update(const Tensor& params, const Tensor& grads,
                                 const Tensor& momentum, const SgdParams& hp,
                                 const UpdateControl& control, const Tensor& step_state) {
  const int64_t n = params.numel();
  const OptionalBufferArg schedule = queue_.optional(control.schedule, "schedule");
  const OptionalBufferArg sumsq = queue_.optional(control.grad_sumsq, "grad_sumsq");
  const OptionalBufferArg scale = queue_.optional(control.loss_scale, "loss_scale");
  const OptionalBufferArg state = queue_.optional(step_state, "step_state");
  const OptionalBufferArg buf = queue_.optional(momentum, "momentum");
  queue_.launch(Kernel::sgd_update, LaunchRange::items(size_t(n)), queue_.buffer(params, "params"),
                queue_.buffer(grads, "grads"), BufferArg{buf.mem, buf.offset}, cl_uint(n), hp.lr,
                hp.momentum, hp.weight_decay, hp.grad_scale, cl_int(hp.nesterov),
                BufferArg{schedule.mem, schedule.offset},
                cl_uint(control.schedule.defined() ? control.schedule.numel() / 2 : 0),
                BufferArg{sumsq.mem, sumsq.offset}, cl_int(sumsq.present), control.max_norm,
                BufferArg{scale.mem, scale.offset}, cl_int(scale.present), state);
}

void OpenClDevice::do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                                  const Tensor& v, const AdamParams& hp,
                                  const UpdateControl& control, const Tensor& step_state) {
  const int64_t n = params.numel();
  const OptionalBufferArg schedule = queue_.optional(control.schedule, "schedule");
  const OptionalBufferArg sumsq = queue_.optional(control.grad_sumsq, "grad_sumsq");
  const OptionalBufferArg scale = queue_.optional(control.loss_scale, "loss_scale");
  queue_.launch(Kernel::adam_update, LaunchRange::items(size_t(n)),
                queue_.buffer(params, "params"), queue_.buffer(grads, "grads"),
                queue_.buffer(m, "adam m"), queue_.buffer(v, "adam v"), cl_uint(n), hp.lr,
                hp.beta1, hp.beta2, hp.eps, hp.weight_decay, cl_int(hp.decoupled_weight_decay),
                hp.grad_scale, BufferArg{schedule.mem, schedule.offset},
                cl_uint(control.schedule.defined() ? control.schedule.numel() / 2 : 0),
                BufferArg{sumsq.mem, sumsq.offset}, cl_int(sumsq.present), control.max_norm,
                BufferArg{scale.mem, scale.offset}, cl_int(scale.present),
                queue_.buffer(step_state, "step_state"));
}

void OpenClDevice::do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                                        const LossScaleParams& params) {
  queue_.launch(Kernel::update_loss_scale, LaunchRange::groups(1, 1),
                queue_.buffer(state, "loss-scale state"), queue_.buffer(grad_sumsq, "grad_sumsq"),
                params.growth, params.backoff, float(params.interval));
}

}  // namespace trident::opencl
