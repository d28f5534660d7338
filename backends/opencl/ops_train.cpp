// The training loop's device side: batch gather by index, the step counter, fused optimizers.
#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/error.h"

namespace trident::opencl {

void OpenClDevice::gather_rows(DeviceMemory src, size_t row_bytes, DeviceMemory table,
                               int64_t rows, DeviceMemory step_state, DeviceMemory dst) {
  const BufferArg table_arg = buffer(table, sizeof(int32_t), "index table");
  const BufferArg state_arg = buffer(step_state, sizeof(uint32_t), "step_state");
  const cl_uint row_count = checked_u32(rows, "rows");
  // Whole 32-bit words when rows and both starts allow it (MNIST's 784-byte rows do).
  const bool words = row_bytes % 4 == 0 && src.offset % 4 == 0 && dst.offset % 4 == 0;
  const size_t unit = words ? 4 : 1;
  const cl_uint row_units = checked_u32(int64_t(row_bytes / unit), "row size");
  launch(words ? Kernel::gather_rows_u32 : Kernel::gather_rows_u8,
         LaunchRange::items(checked_u32(int64_t(row_count) * row_units, "gathered size")),
         buffer(src, unit, "source rows"), row_units, table_arg, row_count, state_arg,
         buffer(dst, unit, "destination rows"));
}

void OpenClDevice::advance_step(DeviceMemory step_state) {
  launch(Kernel::advance_step, LaunchRange::groups(1, 1),
         buffer(step_state, sizeof(uint32_t), "step_state"));
}

void OpenClDevice::sgd_update(DeviceMemory params, DeviceMemory grads, DeviceMemory momentum,
                              int64_t n, const SgdParams& hp) {
  if (hp.momentum > 0.0f && !momentum)
    throw ShapeError(label_ + ": sgd_update with momentum needs a momentum buffer");
  launch(Kernel::sgd_update, LaunchRange::items(checked_u32(n, "n")),
         buffer(params, 4, "params"), buffer(grads, 4, "grads"),
         momentum ? buffer(momentum, 4, "momentum") : BufferArg{}, cl_uint(n), hp.lr,
         hp.momentum, hp.weight_decay, hp.grad_scale, cl_int(hp.nesterov));
}

void OpenClDevice::adam_update(DeviceMemory params, DeviceMemory grads, DeviceMemory m,
                               DeviceMemory v, int64_t n, const AdamParams& hp,
                               DeviceMemory step_state) {
  launch(Kernel::adam_update, LaunchRange::items(checked_u32(n, "n")),
         buffer(params, 4, "params"), buffer(grads, 4, "grads"), buffer(m, 4, "adam m"),
         buffer(v, 4, "adam v"), cl_uint(n), hp.lr, hp.beta1, hp.beta2, hp.eps,
         hp.weight_decay, hp.grad_scale, buffer(step_state, sizeof(uint32_t), "step_state"));
}

}  // namespace trident::opencl
