// CudaDevice's elementwise, classification-head, pooling, data and optimizer ops: argument
// checks on the host, then one kernel launch each (kernels/cuda).
#include "trident/backends/cuda/cuda_device.h"
#include "trident/core/error.h"
#include "trident/kernels/cuda/cuda_kernels.h"

namespace trident::cuda {
namespace {

void check_count(const DeviceInfo& info, const char* op, int64_t n) {
  if (n < 0)
    throw ShapeError(info.id() + ": " + op + " with negative size " + std::to_string(n));
}

void check_matrix(const DeviceInfo& info, const char* op, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0)
    throw ShapeError(info.id() + ": " + op + " with negative shape " + std::to_string(rows) +
                     "x" + std::to_string(cols));
}

void check_pool(const DeviceInfo& info, const char* op, const Pool2dShape& s) {
  if (s.kernel < 1 || s.stride < 1 || s.batch < 0 || s.channels < 0 || s.height < 0 ||
      s.width < 0)
    throw ShapeError(info.id() + ": " + op + ": bad pooling shape (kernel " +
                     std::to_string(s.kernel) + ", stride " + std::to_string(s.stride) + " on " +
                     std::to_string(s.height) + "x" + std::to_string(s.width) + ")");
}

}  // namespace

// ---- elementwise ----------------------------------------------------------------------------

void CudaDevice::relu_forward(DeviceMemory x, DeviceMemory y, int64_t n) {
  check_count(info_, "relu_forward", n);
  make_current();
  launch_relu_forward(stream_, device_ptr<const float>(x), device_ptr<float>(y), n);
  check_launch("relu_forward");
}

void CudaDevice::relu_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t n) {
  check_count(info_, "relu_backward", n);
  make_current();
  launch_relu_backward(stream_, device_ptr<const float>(y), device_ptr<const float>(dy),
                       device_ptr<float>(dx), n);
  check_launch("relu_backward");
}

void CudaDevice::dropout(DeviceMemory x, DeviceMemory y, int64_t n, int64_t group,
                         int64_t group_offset, float p, uint64_t seed, uint32_t stream,
                         DeviceMemory step_state) {
  check_count(info_, "dropout", n);
  if (group < 1)
    throw ShapeError(info_.id() + ": dropout group must be at least 1, got " +
                     std::to_string(group));
  if (p <= 0.0f) {  // the identity, as on the CPU
    if (device_ptr<char>(x) != device_ptr<char>(y))
      copy_on_device(y, x, size_t(n) * sizeof(float));
    return;
  }
  const float scale = 1.0f / (1.0f - p);  // p == 1: never used, every draw is < 1
  make_current();
  launch_dropout(stream_, device_ptr<const float>(x), device_ptr<float>(y), n, group,
                 group_offset, p, scale, seed, stream, device_ptr<const uint32_t>(step_state));
  check_launch("dropout");
}

// ---- pooling ---------------------------------------------------------------------------------

void CudaDevice::maxpool2d_forward(const Pool2dShape& s, DeviceMemory x, DeviceMemory y,
                                   DeviceMemory argmax) {
  check_pool(info_, "maxpool2d_forward", s);
  make_current();
  launch_maxpool2d_forward(stream_, s, device_ptr<const float>(x), device_ptr<float>(y),
                           device_ptr<int32_t>(argmax));
  check_launch("maxpool2d_forward");
}

void CudaDevice::maxpool2d_backward(const Pool2dShape& s, DeviceMemory dy, DeviceMemory argmax,
                                    DeviceMemory dx) {
  check_pool(info_, "maxpool2d_backward", s);
  make_current();
  launch_maxpool2d_backward(stream_, s, device_ptr<const float>(dy),
                            device_ptr<const int32_t>(argmax), device_ptr<float>(dx));
  check_launch("maxpool2d_backward");
}

// ---- classification head ---------------------------------------------------------------------

void CudaDevice::log_softmax_forward(DeviceMemory x, DeviceMemory y, int64_t rows, int64_t cols) {
  check_matrix(info_, "log_softmax_forward", rows, cols);
  make_current();
  launch_log_softmax_forward(stream_, device_ptr<const float>(x), device_ptr<float>(y), rows,
                             cols);
  check_launch("log_softmax_forward");
}

void CudaDevice::log_softmax_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx,
                                      int64_t rows, int64_t cols) {
  check_matrix(info_, "log_softmax_backward", rows, cols);
  make_current();
  launch_log_softmax_backward(stream_, device_ptr<const float>(y), device_ptr<const float>(dy),
                              device_ptr<float>(dx), rows, cols);
  check_launch("log_softmax_backward");
}

void CudaDevice::nll_loss_forward(DeviceMemory logp, DeviceMemory labels, int64_t rows,
                                  int64_t cols, DeviceMemory loss, bool accumulate) {
  check_matrix(info_, "nll_loss_forward", rows, cols);
  make_current();
  launch_nll_loss_forward(stream_, device_ptr<const float>(logp),
                          device_ptr<const int32_t>(labels), rows, cols, device_ptr<float>(loss),
                          accumulate);
  check_launch("nll_loss_forward");
}

void CudaDevice::nll_loss_backward(DeviceMemory labels, int64_t rows, int64_t cols, float scale,
                                   DeviceMemory dlogp) {
  check_matrix(info_, "nll_loss_backward", rows, cols);
  make_current();
  launch_nll_loss_backward(stream_, device_ptr<const int32_t>(labels), rows, cols, scale,
                           device_ptr<float>(dlogp));
  check_launch("nll_loss_backward");
}

void CudaDevice::log_softmax_nll(DeviceMemory x, DeviceMemory labels, int64_t rows, int64_t cols,
                                 float grad_scale, DeviceMemory y, DeviceMemory loss,
                                 bool accumulate, DeviceMemory dx) {
  check_matrix(info_, "log_softmax_nll", rows, cols);
  make_current();
  launch_log_softmax_nll(stream_, device_ptr<const float>(x), device_ptr<const int32_t>(labels),
                         rows, cols, grad_scale, device_ptr<float>(y), device_ptr<float>(loss),
                         accumulate, device_ptr<float>(dx));
  check_launch("log_softmax_nll");
}

void CudaDevice::count_correct(DeviceMemory scores, DeviceMemory labels, int64_t rows,
                               int64_t cols, DeviceMemory correct) {
  check_matrix(info_, "count_correct", rows, cols);
  make_current();
  launch_count_correct(stream_, device_ptr<const float>(scores),
                       device_ptr<const int32_t>(labels), rows, cols, device_ptr<float>(correct));
  check_launch("count_correct");
}

// ---- data and optimizer ----------------------------------------------------------------------

void CudaDevice::gather_rows(DeviceMemory src, size_t row_bytes, DeviceMemory table, int64_t rows,
                             DeviceMemory step_state, DeviceMemory dst) {
  check_count(info_, "gather_rows", rows);
  make_current();
  launch_gather_rows(stream_, device_ptr<const char>(src), row_bytes,
                     device_ptr<const int32_t>(table), rows,
                     device_ptr<const uint32_t>(step_state), device_ptr<char>(dst));
  check_launch("gather_rows");
}

void CudaDevice::advance_step(DeviceMemory step_state) {
  make_current();
  launch_advance_step(stream_, device_ptr<uint32_t>(step_state));
  check_launch("advance_step");
}

void CudaDevice::sgd_update(DeviceMemory params, DeviceMemory grads, DeviceMemory momentum,
                            int64_t n, const SgdParams& hp) {
  check_count(info_, "sgd_update", n);
  if (hp.momentum != 0.0f && !momentum)
    throw ShapeError(info_.id() + ": sgd_update with momentum needs a momentum buffer");
  make_current();
  launch_sgd_update(stream_, device_ptr<float>(params), device_ptr<const float>(grads),
                    device_ptr<float>(momentum), n, hp);
  check_launch("sgd_update");
}

void CudaDevice::adam_update(DeviceMemory params, DeviceMemory grads, DeviceMemory m,
                             DeviceMemory v, int64_t n, const AdamParams& hp,
                             DeviceMemory step_state) {
  check_count(info_, "adam_update", n);
  make_current();
  launch_adam_update(stream_, device_ptr<float>(params), device_ptr<const float>(grads),
                     device_ptr<float>(m), device_ptr<float>(v), n, hp,
                     device_ptr<const uint32_t>(step_state));
  check_launch("adam_update");
}

}  // namespace trident::cuda
