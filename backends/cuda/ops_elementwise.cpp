// CudaDevice's elementwise slots: axpby, the unary family and dropout, one kernel launch each
// (kernels/cuda/elementwise.cu) over operands of one float type (uniform_operands.h).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/backends/cuda/uniform_operands.h"
#include "trident/kernels/cuda/elementwise.h"

namespace trident::cuda {
namespace {

bool same_memory(const Tensor& a, const Tensor& b) {
  return a.memory().handle == b.memory().handle && a.memory().offset == b.memory().offset;
}

}  // namespace

void CudaDevice::do_axpby(const Tensor& x, const Tensor& y, float a, float b) {
  do_axpby_activation(x, y, a, b, UnaryOp::identity, 0.0f);
}

void CudaDevice::do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                                     UnaryOp activation, float alpha) {
  UniformOperands u(*this, {&x, &y});
  const Tensor xs = u.in(x), ys = u.out(y, b != 0.0f);
  launch_axpby(kernel_context(), u.dtype(), device_ptr<const void>(xs), device_ptr<void>(ys),
               y.numel(), a, b, activation, alpha);
  check_launch("axpby");
  u.finish();
}

void CudaDevice::do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) {
  if (op == UnaryOp::identity && same_memory(x, y)) return;  // y is x already
  UniformOperands u(*this, {&x, &y});
  const Tensor xs = u.in(x), ys = u.out(y);
  launch_unary_forward(kernel_context(), u.dtype(), op, device_ptr<const void>(xs),
                       device_ptr<void>(ys), x.numel(), alpha);
  check_launch("unary_forward");
  u.finish();
}

void CudaDevice::do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y,
                                   const Tensor& dy, const Tensor& dx, float alpha) {
  UniformOperands u(*this, {&x, &y, &dy, &dx});
  const Tensor xs = u.in(x), ys = u.in(y), dys = u.in(dy), dxs = u.out(dx);
  launch_unary_backward(kernel_context(), u.dtype(), op, device_ptr<const void>(xs),
                        device_ptr<const void>(ys), device_ptr<const void>(dys),
                        device_ptr<void>(dxs), dy.numel(), alpha);
  check_launch("unary_backward");
  u.finish();
}

void CudaDevice::do_unary_backward_sum(UnaryOp op, const Tensor& x, const Tensor& y,
                                       const Tensor& dy, const Tensor& dy_more, const Tensor& dx,
                                       float alpha) {
  UniformOperands u(*this, {&x, &y, &dy, &dy_more, &dx});
  const Tensor xs = u.in(x), ys = u.in(y), dys = u.in(dy), mores = u.in(dy_more),
               dxs = u.out(dx);
  launch_unary_backward(kernel_context(), u.dtype(), op, device_ptr<const void>(xs),
                        device_ptr<const void>(ys), device_ptr<const void>(dys),
                        device_ptr<void>(dxs), dy.numel(), alpha, device_ptr<const void>(mores));
  check_launch("unary_backward_sum");
  u.finish();
}

void CudaDevice::do_dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset,
                            float p, uint64_t seed, uint32_t stream, const Tensor& step_state) {
  if (p <= 0.0f) {  // the identity, as on the CPU
    if (x.dtype() != y.dtype())
      convert(x, y);
    else if (!same_memory(x, y))
      do_copy_on_device(y.memory(), x.memory(), x.bytes());
    return;
  }
  const float scale = 1.0f / (1.0f - p);  // p == 1: never used, every draw is < 1
  UniformOperands u(*this, {&x, &y});
  const Tensor xs = u.in(x), ys = u.out(y);
  launch_dropout(kernel_context(), u.dtype(), device_ptr<const void>(xs), device_ptr<void>(ys),
                 x.numel(), group, group_offset, p, scale, seed, stream,
                 device_ptr<const uint32_t>(step_state));
  check_launch("dropout");
  u.finish();
}

}  // namespace trident::cuda
