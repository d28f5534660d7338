// CudaDevice's pooling slots (kernels/cuda/pool2d.cu); the front checks that the activations
// share one float type.
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/pool2d.h"

namespace trident::cuda {

void CudaDevice::do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                                      const Tensor& argmax) {
  launch_maxpool2d_forward(kernel_context(), x.dtype(), s, device_ptr<const void>(x),
                           device_ptr<void>(y), device_ptr<int32_t>(argmax));
  check_launch("maxpool2d_forward");
}

void CudaDevice::do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                       const Tensor& argmax, const Tensor& dx) {
  launch_maxpool2d_backward(kernel_context(), dy.dtype(), s, device_ptr<const void>(dy),
                            device_ptr<const int32_t>(argmax), device_ptr<void>(dx));
  check_launch("maxpool2d_backward");
}

void CudaDevice::do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) {
  launch_avgpool2d_forward(kernel_context(), x.dtype(), s, device_ptr<const void>(x),
                           device_ptr<void>(y));
  check_launch("avgpool2d_forward");
}

void CudaDevice::do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                       const Tensor& dx) {
  launch_avgpool2d_backward(kernel_context(), dy.dtype(), s, device_ptr<const void>(dy),
                            device_ptr<void>(dx));
  check_launch("avgpool2d_backward");
}

}  // namespace trident::cuda
