// The classification-head slots (kernels/opencl/softmax_nll.cl): log-softmax, NLL with label
// smoothing, the fused head in one launch, MSE and the accuracy count. Labels outside
// [0, classes) raise the device's error flag.
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

void OpenClDevice::do_log_softmax_forward(const Tensor& x, const Tensor& y) {
  const cl_uint rows = cl_uint(x.dim(0)), cols = cl_uint(x.dim(1));
  queue_.launch(Kernel::log_softmax_forward, LaunchRange::items(rows, 64), queue_.buffer(x, "x"),
                queue_.buffer(y, "y"), rows, cols);
}

void OpenClDevice::do_log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const cl_uint rows = cl_uint(y.dim(0)), cols = cl_uint(y.dim(1));
  queue_.launch(Kernel::log_softmax_backward, LaunchRange::items(rows, 64),
                queue_.buffer(y, "y"), queue_.buffer(dy, "dy"), queue_.buffer(dx, "dx"), rows,
                cols);
}

void OpenClDevice::do_nll_loss_forward(const Tensor& logp, const Tensor& labels,
                                       const Tensor& loss, bool accumulate,
                                       float label_smoothing) {
  queue_.launch(Kernel::nll_loss_forward, LaunchRange::groups(1, 256),
                queue_.buffer(logp, "logp"), queue_.buffer(labels, "labels"),
                cl_uint(logp.dim(0)), cl_uint(logp.dim(1)), label_smoothing,
                queue_.buffer(loss, "loss"), cl_int(accumulate), error_flag_arg());
}

void OpenClDevice::do_nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                                        float label_smoothing) {
  queue_.launch(Kernel::nll_loss_backward, LaunchRange::items(size_t(dlogp.numel())),
                queue_.buffer(labels, "labels"), cl_uint(dlogp.dim(0)), cl_uint(dlogp.dim(1)),
                scale, label_smoothing, queue_.buffer(dlogp, "dlogp"), error_flag_arg());
}

void OpenClDevice::do_log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                                      float label_smoothing, const Tensor& y, const Tensor& loss,
                                      bool accumulate, const Tensor& dx) {
  const cl_uint rows = cl_uint(x.dim(0)), cols = cl_uint(x.dim(1));
  // Up to kOneGroupRows rows: one work-group that also sums the loss, so the whole head is one
  // launch (launches dominate small steps). Larger heads spread over the device, then the loss.
  constexpr cl_uint kOneGroupRows = 2048;
  const bool one_group = rows <= kOneGroupRows;
  const LaunchRange range = one_group ? LaunchRange::groups(1, 256) : LaunchRange::items(rows);
  queue_.launch(Kernel::log_softmax_nll, range, queue_.buffer(x, "x"),
                queue_.buffer(labels, "labels"), rows, cols, grad_scale, label_smoothing,
                queue_.buffer(y, "y"), queue_.buffer(loss, "loss"), cl_int(accumulate),
                queue_.buffer(dx, "dx"), cl_int(one_group), error_flag_arg());
  if (!one_group) do_nll_loss_forward(y, labels, loss, accumulate, label_smoothing);
}

void OpenClDevice::do_mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                               const Tensor& loss, bool accumulate, const Tensor& dx) {
  queue_.launch(Kernel::mse_loss, LaunchRange::groups(1, 256), queue_.buffer(x, "x"),
                queue_.buffer(labels, "labels"), cl_uint(x.dim(0)), cl_uint(x.dim(1)),
                grad_scale, queue_.buffer(loss, "loss"), cl_int(accumulate),
                queue_.optional(dx, "dx"), error_flag_arg());
}

void OpenClDevice::do_count_correct(const Tensor& scores, const Tensor& labels,
                                    const Tensor& correct) {
  queue_.launch(Kernel::count_correct, LaunchRange::groups(1, 256),
                queue_.buffer(scores, "scores"), queue_.buffer(labels, "labels"),
                cl_uint(scores.dim(0)), cl_uint(scores.dim(1)),
                queue_.buffer(correct, "correct"), error_flag_arg());
}

}  // namespace trident::opencl
