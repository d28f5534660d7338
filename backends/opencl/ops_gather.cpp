// The data slots (kernels/opencl/gather.cl): batch gathers by index table, read on the device
// from step_state so that a captured step replays with the next batch, and the step counter.
// Samples land in dst's storage type (float32 or 16-bit).
#include <string>

#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/error.h"

namespace trident::opencl {

void OpenClDevice::do_gather_rows(const Tensor& src, const Tensor& table,
                                  const Tensor& step_state, const Tensor& dst) {
  const size_t rows = size_t(dst.dim(0)), row_bytes = dst.bytes() / rows;
  // Whole 32-bit words when rows and both starts allow it (MNIST's 784-byte rows do).
  const bool words =
      row_bytes % 4 == 0 && src.memory().offset % 4 == 0 && dst.memory().offset % 4 == 0;
  const size_t unit = words ? 4 : 1;
  const size_t row_units = row_bytes / unit;
  // Bytes of 16-bit rows of odd length can outnumber the elements the front allows.
  if (rows * row_units > size_t(info_.limits.max_elements))
    throw ShapeError(label() + ": gather_rows of " + std::to_string(rows * row_bytes) +
                     " bytes in rows of " + std::to_string(row_bytes) +
                     " bytes (not whole 32-bit words) is more than the byte-wise kernel indexes; "
                     "gather fewer rows at a time");
  queue_.launch(words ? Kernel::gather_rows_u32 : Kernel::gather_rows_u8,
                LaunchRange::items(rows * row_units),
                queue_.buffer(src.memory(), unit, "source rows"), cl_uint(src.dim(0)),
                cl_uint(row_units), queue_.buffer(table, "index table"), cl_uint(table.numel()),
                cl_uint(rows), queue_.buffer(step_state, "step_state"),
                queue_.buffer(dst.memory(), unit, "destination rows"), error_flag_arg());
}

void OpenClDevice::do_gather_samples(const Tensor& src, const Tensor& table,
                                     const Tensor& step_state, const SampleTransform& t,
                                     const Tensor& dst) {
  const size_t rows = size_t(dst.dim(0));
  const size_t sample = size_t(src.dim(1) * src.dim(2) * src.dim(3));
  const size_t chunks = (sample + 255) / 256;  // work-groups per sample
  const bool u8 = src.dtype() == DType::u8;
  queue_.buffer(src, "source samples");  // f32 samples must start on a float
  const BufferArg src_bytes = queue_.buffer(src.memory(), 1, "source samples");
  const OptionalBufferArg mean = queue_.optional(t.mean, "mean"),
                          inv_std = queue_.optional(t.inv_std, "inv_std");
  queue_.launch_typed(Kernel::gather_samples, dst.dtype(), LaunchRange::groups(rows * chunks, 256),
                src_bytes,
                cl_int(u8), cl_uint(src.dim(0)), cl_uint(src.dim(1)), cl_uint(src.dim(2)),
                cl_uint(src.dim(3)), cl_uint(chunks), queue_.buffer(table, "index table"),
                cl_uint(table.numel()), cl_uint(rows), queue_.buffer(step_state, "step_state"),
                t.scale, BufferArg{mean.mem, mean.offset}, BufferArg{inv_std.mem, inv_std.offset},
                cl_int(mean.present), cl_uint(t.crop_padding), cl_int(t.horizontal_flip),
                cl_ulong(t.seed), cl_uint(t.stream), cl_ulong(t.sample_offset),
                queue_.buffer(dst, "dst"), error_flag_arg());
}

void OpenClDevice::do_advance_step(const Tensor& step_state) {
  queue_.launch(Kernel::advance_step, LaunchRange::groups(1, 1),
                queue_.buffer(step_state, "step_state"));
}

}  // namespace trident::opencl
