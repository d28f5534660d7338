// The elementwise slots (kernels/opencl/elementwise.cl): the unary family, axpby and dropout, one
// work-item per element, in the storage type the call's tensors share (CallStorage).
#include <algorithm>

#include "trident/backends/opencl/call_storage.h"
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

void OpenClDevice::do_axpby(const Tensor& x, const Tensor& y, float a, float b) {
  do_axpby_activation(x, y, a, b, UnaryOp::identity, 0.0f);
}

void OpenClDevice::do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                                       UnaryOp activation, float alpha) {
  CallStorage call(*this, {&x, &y});
  const Tensor xs = call.in(x), ys = call.out(y, b != 0.0f);
  queue_.launch_typed(Kernel::axpby, call.type(), LaunchRange::items(size_t(y.numel())),
                      queue_.buffer(xs, "x"), queue_.buffer(ys, "y"), cl_uint(y.numel()), a, b,
                      cl_int(activation), alpha);
  call.finish();
}

void OpenClDevice::do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) {
  CallStorage call(*this, {&x, &y});
  const Tensor xs = call.in(x), ys = call.out(y);
  queue_.launch_typed(Kernel::unary_forward, call.type(), LaunchRange::items(size_t(x.numel())),
                      queue_.buffer(xs, "x"), queue_.buffer(ys, "y"), cl_uint(x.numel()),
                      cl_int(op), alpha);
  call.finish();
}

void OpenClDevice::do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y,
                                     const Tensor& dy, const Tensor& dx, float alpha) {
  CallStorage call(*this, {&x, &y, &dy, &dx});
  const Tensor xs = call.in(x), ys = call.in(y), dys = call.in(dy), dxs = call.out(dx);
  queue_.launch_typed(Kernel::unary_backward, call.type(), LaunchRange::items(size_t(dy.numel())),
                      queue_.optional(xs, "x"), queue_.optional(ys, "y"),
                      queue_.buffer(dys, "dy"), queue_.buffer(dxs, "dx"), cl_uint(dy.numel()),
                      cl_int(op), alpha);
  call.finish();
}

void OpenClDevice::do_dropout(const Tensor& x, const Tensor& y, int64_t group,
                              int64_t group_offset, float p, uint64_t seed, uint32_t stream,
                              const Tensor& step_state) {
  // A group larger than the tensor is one group: the same mask as group = n.
  const int64_t n = x.numel();
  CallStorage call(*this, {&x, &y});
  const Tensor xs = call.in(x), ys = call.out(y);
  queue_.launch_typed(Kernel::dropout, call.type(), LaunchRange::items(size_t(n)),
                      queue_.buffer(xs, "x"), queue_.buffer(ys, "y"), cl_uint(n),
                      cl_uint(std::min(group, n)), cl_ulong(group_offset), p, cl_ulong(seed),
                      cl_uint(stream), queue_.buffer(step_state, "step_state"));
  call.finish();
}

}  // namespace trident::opencl
