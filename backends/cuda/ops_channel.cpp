// CudaDevice's per-channel slots: the affine map and the channel sums (kernels/cuda/channel.cu),
// over x and y of one float type (uniform_operands.h).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/backends/cuda/uniform_operands.h"
#include "trident/kernels/cuda/channel.h"

namespace trident::cuda {

void CudaDevice::do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                   const Tensor& y, int64_t outer, int64_t channels,
                                   int64_t inner) {
  UniformOperands u(*this, {&x, &y});
  const Tensor xs = u.in(x), ys = u.out(y);
  launch_channel_affine(kernel_context(), u.dtype(), device_ptr<const void>(xs),
                        device_ptr<const float>(scale), device_ptr<const float>(shift),
                        device_ptr<void>(ys), outer, channels, inner);
  check_launch("channel_affine");
  u.finish();
}

void CudaDevice::do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out,
                                 int64_t outer, int64_t channels, int64_t inner, float beta) {
  UniformOperands u(*this, {&x, &y});
  const Tensor xs = u.in(x), ys = u.in(y);
  launch_channel_sums(kernel_context(), u.dtype(), device_ptr<const void>(xs),
                      device_ptr<const void>(ys), device_ptr<float>(out), outer, channels, inner,
                      beta);
  check_launch("channel_sums");
}

}  // namespace trident::cuda
