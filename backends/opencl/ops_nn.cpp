// Activations, dropout and the classification head (log-softmax, NLL loss, accuracy).
#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/error.h"

namespace trident::opencl {

void OpenClDevice::relu_forward(DeviceMemory x, DeviceMemory y, int64_t n) {
  launch(Kernel::relu_forward, LaunchRange::items(checked_u32(n, "n")),
         buffer(x, sizeof(float), "x"), buffer(y, sizeof(float), "y"), cl_uint(n));
}

void OpenClDevice::relu_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t n) {
  launch(Kernel::relu_backward, LaunchRange::items(checked_u32(n, "n")),
         buffer(y, sizeof(float), "y"), buffer(dy, sizeof(float), "dy"),
         buffer(dx, sizeof(float), "dx"), cl_uint(n));
}

void OpenClDevice::dropout(DeviceMemory x, DeviceMemory y, int64_t n, int64_t group,
                           int64_t group_offset, float p, uint64_t seed, uint32_t stream,
                           DeviceMemory step_state) {
  if (group < 1) throw ShapeError(label_ + ": dropout group must be >= 1");
  if (group_offset < 0) throw ShapeError(label_ + ": dropout group_offset must be >= 0");
  launch(Kernel::dropout, LaunchRange::items(checked_u32(n, "n")), buffer(x, sizeof(float), "x"),
         buffer(y, sizeof(float), "y"), cl_uint(n), checked_u32(group, "group"),
         cl_ulong(group_offset), p, cl_ulong(seed), cl_uint(stream),
         buffer(step_state, sizeof(uint32_t), "step_state"));
}

void OpenClDevice::log_softmax_forward(DeviceMemory x, DeviceMemory y, int64_t rows,
                                       int64_t cols) {
  checked_u32(rows * cols, "rows*cols");
  launch(Kernel::log_softmax_forward, LaunchRange::items(cl_uint(rows), 64),
         buffer(x, sizeof(float), "x"), buffer(y, sizeof(float), "y"), cl_uint(rows),
         cl_uint(cols));
}

void OpenClDevice::log_softmax_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx,
                                        int64_t rows, int64_t cols) {
  checked_u32(rows * cols, "rows*cols");
  launch(Kernel::log_softmax_backward, LaunchRange::items(cl_uint(rows), 64),
         buffer(y, sizeof(float), "y"), buffer(dy, sizeof(float), "dy"),
         buffer(dx, sizeof(float), "dx"), cl_uint(rows), cl_uint(cols));
}

void OpenClDevice::nll_loss_forward(DeviceMemory logp, DeviceMemory labels, int64_t rows,
                                    int64_t cols, DeviceMemory loss, bool accumulate) {
  checked_u32(rows * cols, "rows*cols");
  launch(Kernel::nll_loss_forward, LaunchRange::groups(1, 256),
         buffer(logp, sizeof(float), "logp"), buffer(labels, sizeof(int32_t), "labels"),
         cl_uint(rows), cl_uint(cols), buffer(loss, sizeof(float), "loss"), cl_int(accumulate));
}

void OpenClDevice::nll_loss_backward(DeviceMemory labels, int64_t rows, int64_t cols,
                                     float scale, DeviceMemory dlogp) {
  launch(Kernel::nll_loss_backward, LaunchRange::items(checked_u32(rows * cols, "rows*cols")),
         buffer(labels, sizeof(int32_t), "labels"), cl_uint(rows), cl_uint(cols), scale,
         buffer(dlogp, sizeof(float), "dlogp"));
}

void OpenClDevice::log_softmax_nll(DeviceMemory x, DeviceMemory labels, int64_t rows,
                                   int64_t cols, float grad_scale, DeviceMemory y,
                                   DeviceMemory loss, bool accumulate, DeviceMemory dx) {
  checked_u32(rows * cols, "rows*cols");
  // Up to kOneGroupRows rows: one work-group that also sums the loss, so the whole head is one
  // launch (launches dominate small steps). Larger heads spread over the device, then the loss.
  constexpr int64_t kOneGroupRows = 2048;
  const bool one_group = rows <= kOneGroupRows;
  const LaunchRange range = one_group ? LaunchRange::groups(1, 256)
                                      : LaunchRange::items(cl_uint(rows), 256);
  launch(Kernel::log_softmax_nll, range, buffer(x, sizeof(float), "x"),
         buffer(labels, sizeof(int32_t), "labels"), cl_uint(rows), cl_uint(cols), grad_scale,
         buffer(y, sizeof(float), "y"), buffer(loss, sizeof(float), "loss"), cl_int(accumulate),
         buffer(dx, sizeof(float), "dx"), cl_int(one_group));
  if (!one_group) nll_loss_forward(y, labels, rows, cols, loss, accumulate);
}

void OpenClDevice::count_correct(DeviceMemory scores, DeviceMemory labels, int64_t rows,
                                 int64_t cols, DeviceMemory correct) {
  checked_u32(rows * cols, "rows*cols");
  if (rows == 0 || cols == 0) return;
  launch(Kernel::count_correct, LaunchRange::groups(1, 256),
         buffer(scores, sizeof(float), "scores"), buffer(labels, sizeof(int32_t), "labels"),
         cl_uint(rows), cl_uint(cols), buffer(correct, sizeof(float), "correct"));
}

}  // namespace trident::opencl
