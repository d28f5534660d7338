// CudaDevice's pooling slots (kernels/cuda/pool2d.cu).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/pool2d.h"

namespace trident::cuda {

void CudaDevice::do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                                      const Tensor& argmax) {
  launch_maxpool2d_forward(kernel_context(), s, device_ptr<const float>(x), device_ptr<float>(y),
                           device_ptr<int32_t>(argmax));
  check_launch("maxpool2d_forward");
}

void CudaDevice::do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                       const Tensor& argmax, const Tensor& dx) {
  launch_maxpool2d_backward(kernel_context(), s, device_ptr<const float>(dy),
                            device_ptr<const int32_t>(argmax), device_ptr<float>(dx));
  check_launch("maxpool2d_backward");
}

void CudaDevice::do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) {
  launch_avgpool2d_forward(kernel_context(), s, device_ptr<const float>(x), device_ptr<float>(y));
  check_launch("avgpool2d_forward");
}

void CudaDevice::do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                       const Tensor& dx) {
  launch_avgpool2d_backward(kernel_context(), s, device_ptr<const float>(dy), device_ptr<float>(dx));
  check_launch("avgpool2d_backward");
}

}  // namespace trident::cuda
