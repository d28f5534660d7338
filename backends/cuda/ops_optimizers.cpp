// CudaDevice's optimizer slots: one launch over the flat parameter buffer (writing the 16-bit
// compute copy too where asked), UpdateControl passed as device pointers and read by the kernel
// (kernels/cuda/optimizers.cu).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/optimizers.h"

namespace trident::cuda {
namespace {

UpdateControlArgs control_args(const UpdateControl& c) {
  UpdateControlArgs args;
  args.schedule = device_ptr<const float>(c.schedule);
  args.schedule_rows = c.schedule.defined() ? c.schedule.numel() / 2 : 0;
  args.grad_sumsq = device_ptr<const float>(c.grad_sumsq);
  args.max_norm = c.max_norm;
  args.loss_scale = device_ptr<const float>(c.loss_scale);
  return args;
}

}  // namespace

// The plain updates are the updates with a copy, without one (a null copy pointer).
void CudaDevice::do_sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                               const SgdParams& hp, const UpdateControl& control,
                               const Tensor& step_state) {
  do_sgd_update_with_copy(params, grads, momentum, hp, control, step_state, Tensor());
}

void CudaDevice::do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                                const Tensor& v, const AdamParams& hp,
                                const UpdateControl& control, const Tensor& step_state) {
  do_adam_update_with_copy(params, grads, m, v, hp, control, step_state, Tensor());
}

void CudaDevice::do_sgd_update_with_copy(const Tensor& params, const Tensor& grads,
                                         const Tensor& momentum, const SgdParams& hp,
                                         const UpdateControl& control, const Tensor& step_state,
                                         const Tensor& compute_copy) {
  launch_sgd_update(kernel_context(), device_ptr<float>(params), device_ptr<const float>(grads),
                    device_ptr<float>(momentum), params.numel(), hp, control_args(control),
                    device_ptr<const uint32_t>(step_state), device_ptr<void>(compute_copy),
                    compute_copy.dtype());
  check_launch("sgd_update");
}

void CudaDevice::do_adam_update_with_copy(const Tensor& params, const Tensor& grads,
                                          const Tensor& m, const Tensor& v, const AdamParams& hp,
                                          const UpdateControl& control, const Tensor& step_state,
                                          const Tensor& compute_copy) {
  launch_adam_update(kernel_context(), device_ptr<float>(params), device_ptr<const float>(grads),
                     device_ptr<float>(m), device_ptr<float>(v), params.numel(), hp,
                     control_args(control), device_ptr<const uint32_t>(step_state),
                     device_ptr<void>(compute_copy), compute_copy.dtype());
  check_launch("adam_update");
}

void CudaDevice::do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                                      const LossScaleParams& params) {
  launch_update_loss_scale(kernel_context(), device_ptr<float>(state),
                           device_ptr<const float>(grad_sumsq), params);
  check_launch("update_loss_scale");
}

}  // namespace trident::cuda
