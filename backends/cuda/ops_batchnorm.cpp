// CudaDevice's batch-normalisation slots (kernels/cuda/batchnorm.cu).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/batchnorm.h"

namespace trident::cuda {

void CudaDevice::do_batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      const Tensor& y, const Tensor& save_mean,
                                      const Tensor& save_invstd) {
  launch_batchnorm_forward(kernel_context(), s, training, device_ptr<const float>(x),
                           device_ptr<const float>(gamma), device_ptr<const float>(beta),
                           device_ptr<float>(running_mean), device_ptr<float>(running_var),
                           device_ptr<float>(y), device_ptr<float>(save_mean),
                           device_ptr<float>(save_invstd));
  check_launch("batchnorm_forward");
}

void CudaDevice::do_batchnorm_backward(const BatchNormShape& s, const Tensor& x,
                                       const Tensor& dy, const Tensor& gamma,
                                       const Tensor& save_mean, const Tensor& save_invstd,
                                       const Tensor& dx, const Tensor& dgamma,
                                       const Tensor& dbeta) {
  launch_batchnorm_backward(kernel_context(), s, device_ptr<const float>(x), device_ptr<const float>(dy),
                            device_ptr<const float>(gamma), device_ptr<const float>(save_mean),
                            device_ptr<const float>(save_invstd), device_ptr<float>(dx),
                            device_ptr<float>(dgamma), device_ptr<float>(dbeta));
  check_launch("batchnorm_backward");
}

}  // namespace trident::cuda
