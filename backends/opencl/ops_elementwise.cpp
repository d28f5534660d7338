// The elementwise slots (kernels/opencl/elementwise.cl): the unary family, axpby and dropout, one
// work-item per element.
#include <algorithm>

#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

void OpenClDevice::do_axpby(const Tensor& x, const Tensor& y, float a, float b) {
  queue_.launch(Kernel::axpby, LaunchRange::items(size_t(y.numel())), queue_.buffer(x, "x"),
                queue_.buffer(y, "y"), cl_uint(y.numel()), a, b);
}

void OpenClDevice::do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) {
  queue_.launch(Kernel::unary_forward, LaunchRange::items(size_t(x.numel())),
                queue_.buffer(x, "x"), queue_.buffer(y, "y"), cl_uint(x.numel()), cl_int(op),
                alpha);
}

void OpenClDevice::do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y,
                                     const Tensor& dy, const Tensor& dx, float alpha) {
  queue_.launch(Kernel::unary_backward, LaunchRange::items(size_t(dy.numel())),
                queue_.optional(x, "x"), queue_.optional(y, "y"), queue_.buffer(dy, "dy"),
                queue_.buffer(dx, "dx"), cl_uint(dy.numel()), cl_int(op), alpha);
}

void OpenClDevice::do_dropout(const Tensor& x, const Tensor& y, int64_t group,
                              int64_t group_offset, float p, uint64_t seed, uint32_t stream,
                              const Tensor& step_state) {
  // A group larger than the tensor is one group: the same mask as group = n.
  const int64_t n = x.numel();
  queue_.launch(Kernel::dropout, LaunchRange::items(size_t(n)), queue_.buffer(x, "x"),
                queue_.buffer(y, "y"), cl_uint(n), cl_uint(std::min(group, n)),
                cl_ulong(group_offset),
                p, cl_ulong(seed), cl_uint(stream), queue_.buffer(step_state, "step_state"));
}

}  // namespace trident::opencl
