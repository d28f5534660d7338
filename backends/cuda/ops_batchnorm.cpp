// CudaDevice's batch-normalisation slots (kernels/cuda/batchnorm.cu); x, y, dy and dx share one
// float type (the front checks it), the parameters and statistics are float32.
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/batchnorm.h"

namespace trident::cuda {

void CudaDevice::do_batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      const Tensor& y, const Tensor& save_mean,
                                      const Tensor& save_invstd) {
  do_batchnorm_add_forward(s, training, x, Tensor(), gamma, beta, running_mean, running_var, y,
                           save_mean, save_invstd);
}

// The sum in the normalisation's second pass (residual undefined: none): the ResNet's three
// block sums (a pass over 2 tensors each) leave its step.
void CudaDevice::do_batchnorm_add_forward(const BatchNormShape& s, bool training,
                                          const Tensor& x, const Tensor& residual,
                                          const Tensor& gamma, const Tensor& beta,
                                          const Tensor& running_mean, const Tensor& running_var,
                                          const Tensor& y, const Tensor& save_mean,
                                          const Tensor& save_invstd) {
  launch_batchnorm_forward(kernel_context(), x.dtype(), s, training, device_ptr<const void>(x),
                           device_ptr<const float>(gamma), device_ptr<const float>(beta),
                           device_ptr<float>(running_mean), device_ptr<float>(running_var),
                           device_ptr<void>(y), device_ptr<float>(save_mean),
                           device_ptr<float>(save_invstd), device_ptr<const void>(residual));
  check_launch(residual.defined() ? "batchnorm_add_forward" : "batchnorm_forward");
}

void CudaDevice::do_batchnorm_backward(const BatchNormShape& s, const Tensor& x,
                                       const Tensor& dy, const Tensor& gamma,
                                       const Tensor& save_mean, const Tensor& save_invstd,
                                       const Tensor& dx, const Tensor& dgamma,
                                       const Tensor& dbeta, const Tensor& beta) {
  launch_batchnorm_backward(kernel_context(), x.dtype(), s, device_ptr<const void>(x),
                            device_ptr<const void>(dy), device_ptr<const float>(gamma),
                            device_ptr<const float>(save_mean),
                            device_ptr<const float>(save_invstd), device_ptr<void>(dx),
                            device_ptr<float>(dgamma), device_ptr<float>(dbeta),
                            device_ptr<const float>(beta));
  check_launch("batchnorm_backward");
}

}  // namespace trident::cuda
