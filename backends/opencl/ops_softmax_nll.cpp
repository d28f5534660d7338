// The classification-head slots (kernels/opencl/softmax_nll.cl): log-softmax, NLL with label
// smoothing, the fused head in one launch, MSE and the accuracy count. Labels outside
// [0, classes) raise the device's error flag. Kernels run in the scores' storage type; the
// outputs of log_softmax_forward, log_softmax_nll and mse_loss may be float32 beside 16-bit
// scores (a flag per output), other mixes go through CallStorage.
#include "trident/backends/opencl/call_storage.h"
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {
namespace {

// Whether output t can be written by a kernel running in `type`: of that type, or float32.
bool writable_from(const Tensor& t, DType type) {
  return !t.defined() || t.dtype() == type || t.dtype() == DType::f32;
}

}  // namespace

void OpenClDevice::do_log_softmax_forward(const Tensor& x, const Tensor& y) {
  const cl_uint rows = cl_uint(x.dim(0)), cols = cl_uint(x.dim(1));
  const bool direct = writable_from(y, x.dtype());
  CallStorage call(*this, {&x, direct ? nullptr : &y});
  const Tensor xs = call.in(x), ys = direct ? y : call.out(y);
  queue_.launch_typed(Kernel::log_softmax_forward, call.type(), LaunchRange::items(rows, 64),
                      queue_.buffer(xs, "x"), queue_.buffer(ys, "y"),
                      cl_int(ys.dtype() != call.type()), rows, cols);
  call.finish();
}

void OpenClDevice::do_log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const cl_uint rows = cl_uint(y.dim(0)), cols = cl_uint(y.dim(1));
  CallStorage call(*this, {&y, &dy, &dx});
  const Tensor ys = call.in(y), dys = call.in(dy), dxs = call.out(dx);
  queue_.launch_typed(Kernel::log_softmax_backward, call.type(), LaunchRange::items(rows, 64),
                      queue_.buffer(ys, "y"), queue_.buffer(dys, "dy"), queue_.buffer(dxs, "dx"),
                      rows, cols);
  call.finish();
}

void OpenClDevice::do_nll_loss_forward(const Tensor& logp, const Tensor& labels,
                                       const Tensor& loss, bool accumulate,
                                       float label_smoothing) {
  queue_.launch_typed(Kernel::nll_loss_forward, logp.dtype(), LaunchRange::groups(1, 256),
                      queue_.buffer(logp, "logp"), queue_.buffer(labels, "labels"),
                      cl_uint(logp.dim(0)), cl_uint(logp.dim(1)), label_smoothing,
                      queue_.buffer(loss, "loss"), cl_int(accumulate), error_flag_arg());
}

void OpenClDevice::do_nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                                        float label_smoothing) {
  queue_.launch_typed(Kernel::nll_loss_backward, dlogp.dtype(),
                      LaunchRange::items(size_t(dlogp.numel())), queue_.buffer(labels, "labels"),
                      cl_uint(dlogp.dim(0)), cl_uint(dlogp.dim(1)), scale, label_smoothing,
                      queue_.buffer(dlogp, "dlogp"), error_flag_arg());
}

void OpenClDevice::do_log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                                      float label_smoothing, const Tensor& y, const Tensor& loss,
                                      bool accumulate, const Tensor& dx) {
  const cl_uint rows = cl_uint(x.dim(0)), cols = cl_uint(x.dim(1));
  // A 16-bit head with float32 log-probabilities and gradient (what a network keeps) in one
  // launch; any other mix through float32.
  const bool direct = writable_from(y, x.dtype()) && writable_from(dx, x.dtype());
  CallStorage call(*this, {&x, direct ? nullptr : &y, direct ? nullptr : &dx});
  const Tensor xs = call.in(x);
  const Tensor ys = direct ? y : call.out(y), dxs = direct ? dx : call.out(dx);
  const DType type = call.type();
  // Up to kOneGroupRows rows: one work-group that also sums the loss, so the whole head is one
  // launch (launches dominate small steps). Larger heads spread over the device, then the loss.
  constexpr cl_uint kOneGroupRows = 2048;
  const bool one_group = rows <= kOneGroupRows;
  const LaunchRange range = one_group ? LaunchRange::groups(1, 256) : LaunchRange::items(rows);
  queue_.launch_typed(Kernel::log_softmax_nll, type, range, queue_.buffer(xs, "x"),
                      queue_.buffer(labels, "labels"), rows, cols, grad_scale, label_smoothing,
                      queue_.buffer(ys, "y"), cl_int(ys.dtype() != type),
                      queue_.buffer(loss, "loss"), cl_int(accumulate), queue_.buffer(dxs, "dx"),
                      cl_int(dxs.dtype() != type), cl_int(one_group), error_flag_arg());
  if (!one_group) do_nll_loss_forward(ys, labels, loss, accumulate, label_smoothing);
  call.finish();
}

void OpenClDevice::do_mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                               const Tensor& loss, bool accumulate, const Tensor& dx) {
  const bool direct = writable_from(dx, x.dtype());
  CallStorage call(*this, {&x, direct ? nullptr : &dx});
  const Tensor xs = call.in(x), dxs = direct ? dx : call.out(dx);
  queue_.launch_typed(Kernel::mse_loss, call.type(), LaunchRange::groups(1, 256),
                      queue_.buffer(xs, "x"), queue_.buffer(labels, "labels"), cl_uint(x.dim(0)),
                      cl_uint(x.dim(1)), grad_scale, queue_.buffer(loss, "loss"),
                      cl_int(accumulate), queue_.optional(dxs, "dx"),
                      cl_int(dxs.defined() && dxs.dtype() != call.type()), error_flag_arg());
  call.finish();
}

void OpenClDevice::do_count_correct(const Tensor& scores, const Tensor& labels,
                                    const Tensor& correct) {
  queue_.launch_typed(Kernel::count_correct, scores.dtype(), LaunchRange::groups(1, 256),
                      queue_.buffer(scores, "scores"), queue_.buffer(labels, "labels"),
                      cl_uint(scores.dim(0)), cl_uint(scores.dim(1)),
                      queue_.buffer(correct, "correct"), error_flag_arg());
}

}  // namespace trident::opencl
