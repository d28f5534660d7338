// CudaDevice's elementwise slots: axpby, the unary family and dropout, one kernel launch each
// (kernels/cuda/elementwise.cu).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/elementwise.h"

namespace trident::cuda {

void CudaDevice::do_axpby(const Tensor& x, const Tensor& y, float a, float b) {
  launch_axpby(kernel_context(), device_ptr<const float>(x), device_ptr<float>(y), y.numel(), a, b);
  check_launch("axpby");
}

void CudaDevice::do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) {
  if (op == UnaryOp::identity && x.memory().handle == y.memory().handle &&
      x.memory().offset == y.memory().offset)
    return;  // y is x already
  launch_unary_forward(kernel_context(), op, device_ptr<const float>(x), device_ptr<float>(y), x.numel(),
                       alpha);
  check_launch("unary_forward");
}

void CudaDevice::do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y,
                                   const Tensor& dy, const Tensor& dx, float alpha) {
  launch_unary_backward(kernel_context(), op, device_ptr<const float>(x), device_ptr<const float>(y),
                        device_ptr<const float>(dy), device_ptr<float>(dx), dy.numel(), alpha);
  check_launch("unary_backward");
}

void CudaDevice::do_dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset,
                            float p, uint64_t seed, uint32_t stream, const Tensor& step_state) {
  if (p <= 0.0f) {  // the identity, as on the CPU
    if (x.memory().handle != y.memory().handle || x.memory().offset != y.memory().offset)
      do_copy_on_device(y.memory(), x.memory(), x.bytes());
    return;
  }
  const float scale = 1.0f / (1.0f - p);  // p == 1: never used, every draw is < 1
  launch_dropout(kernel_context(), device_ptr<const float>(x), device_ptr<float>(y), x.numel(), group,
                 group_offset, p, scale, seed, stream, device_ptr<const uint32_t>(step_state));
  check_launch("dropout");
}

}  // namespace trident::cuda
