// CudaDevice's data slots: batch gathers driven by the on-device step state, and its counter
// (kernels/cuda/gather.cu). Bad table entries are met on the device: the error flag.
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/gather.h"

namespace trident::cuda {

void CudaDevice::do_gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                                const Tensor& dst) {
  const int64_t rows = dst.dim(0);
  launch_gather_rows(kernel_context(true), device_ptr<const void>(src), src.dim(0),
                     dst.bytes() / size_t(rows), device_ptr<const int32_t>(table),
                     table.numel(), rows, device_ptr<const uint32_t>(step_state),
                     device_ptr<void>(dst));
  check_launch("gather_rows");
}

void CudaDevice::do_gather_samples(const Tensor& src, const Tensor& table,
                                   const Tensor& step_state, const SampleTransform& t,
                                   const Tensor& dst) {
  SampleTransformArgs args;
  args.scale = t.scale;
  args.mean = device_ptr<const float>(t.mean);
  args.inv_std = device_ptr<const float>(t.inv_std);
  args.crop_padding = t.crop_padding;
  args.horizontal_flip = t.horizontal_flip;
  args.seed = t.seed;
  args.stream = t.stream;
  args.sample_offset = t.sample_offset;
  launch_gather_samples(kernel_context(true), device_ptr<const void>(src), src.dtype() == DType::u8,
                        src.dim(0), src.dim(1), src.dim(2), src.dim(3),
                        device_ptr<const int32_t>(table), table.numel(), dst.dim(0),
                        device_ptr<const uint32_t>(step_state), args, float_data(dst));
  check_launch("gather_samples");
}

void CudaDevice::do_advance_step(const Tensor& step_state) {
  launch_advance_step(kernel_context(), device_ptr<uint32_t>(step_state));
  check_launch("advance_step");
}

}  // namespace trident::cuda
