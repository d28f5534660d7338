// CudaDevice's classification-head and loss slots (kernels/cuda/softmax_nll.cu); the ops that
// read labels get the error flag, raised for a label outside [0, classes). Scores, outputs and
// gradients go as FloatData: any float type each.
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/softmax_nll.h"

namespace trident::cuda {

void CudaDevice::do_log_softmax_forward(const Tensor& x, const Tensor& y) {
  launch_log_softmax_forward(kernel_context(), float_data(x), float_data(y), x.dim(0),
                             x.dim(1));
  check_launch("log_softmax_forward");
}

void CudaDevice::do_log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  launch_log_softmax_backward(kernel_context(), float_data(y), float_data(dy),
                              float_data(dx), y.dim(0), y.dim(1));
  check_launch("log_softmax_backward");
}

void CudaDevice::do_nll_loss_forward(const Tensor& logp, const Tensor& labels,
                                     const Tensor& loss, bool accumulate,
                                     float label_smoothing) {
  launch_nll_loss_forward(kernel_context(true), float_data(logp),
                          device_ptr<const int32_t>(labels), logp.dim(0), logp.dim(1),
                          device_ptr<float>(loss), accumulate, label_smoothing);
  check_launch("nll_loss_forward");
}

void CudaDevice::do_nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                                      float label_smoothing) {
  launch_nll_loss_backward(kernel_context(true), device_ptr<const int32_t>(labels), dlogp.dim(0),
                           dlogp.dim(1), scale, label_smoothing, float_data(dlogp));
  check_launch("nll_loss_backward");
}

void CudaDevice::do_log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                                    float label_smoothing, const Tensor& y, const Tensor& loss,
                                    bool accumulate, const Tensor& dx) {
  launch_log_softmax_nll(kernel_context(true), float_data(x),
                         device_ptr<const int32_t>(labels), x.dim(0), x.dim(1), grad_scale,
                         label_smoothing, float_data(y), device_ptr<float>(loss),
                         accumulate, float_data(dx));
  check_launch("log_softmax_nll");
}

void CudaDevice::do_mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                             const Tensor& loss, bool accumulate, const Tensor& dx) {
  launch_mse_loss(kernel_context(true), float_data(x), device_ptr<const int32_t>(labels),
                  x.dim(0), x.dim(1), grad_scale, device_ptr<float>(loss), accumulate,
                  float_data(dx));
  check_launch("mse_loss");
}

void CudaDevice::do_count_correct(const Tensor& scores, const Tensor& labels,
                                  const Tensor& correct) {
  launch_count_correct(kernel_context(true), float_data(scores),
                       device_ptr<const int32_t>(labels), scores.dim(0), scores.dim(1),
                       device_ptr<float>(correct));
  check_launch("count_correct");
}

}  // namespace trident::cuda
