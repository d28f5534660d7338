// CudaDevice's per-channel slots: the affine map and the channel sums (kernels/cuda/channel.cu).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/channel.h"

namespace trident::cuda {

void CudaDevice::do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                   const Tensor& y, int64_t outer, int64_t channels,
                                   int64_t inner) {
  launch_channel_affine(kernel_context(), device_ptr<const float>(x), device_ptr<const float>(scale),
                        device_ptr<const float>(shift), device_ptr<float>(y), outer, channels,
                        inner);
  check_launch("channel_affine");
}

void CudaDevice::do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out,
                                 int64_t outer, int64_t channels, int64_t inner, float beta) {
  launch_channel_sums(kernel_context(), device_ptr<const float>(x), device_ptr<const float>(y),
                      device_ptr<float>(out), outer, channels, inner, beta);
  check_launch("channel_sums");
}

}  // namespace trident::cuda
