// The patch-matrix slots (kernels/opencl/im2col.cl) for one sample: the batch kernels with batch
// 1 and no ones row produce exactly Device::im2col's [C*KH*KW, OH*OW] layout. The kernels keep
// the columns as the activations' storage type or as float (col_act); columns of any other type
// pass through float32 scratch.
#include "trident/backends/opencl/conv_geometry.h"
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

void OpenClDevice::do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  const ConvGeometry d(s);
  const size_t mark = scratch_mark();
  const bool direct = col.dtype() == DType::f32 || col.dtype() == x.dtype();
  const Tensor cols = direct ? col : scratch(DType::f32, col.shape());
  queue_.launch_typed(Kernel::im2col, x.dtype(), LaunchRange::items(size_t(d.channels) * d.plane()),
                      queue_.buffer(x, "x"), queue_.buffer(cols, "col"), cl_uint(1), d.channels,
                      d.height, d.width, d.kernel_h, d.kernel_w, d.stride_h, d.stride_w, d.pad_h,
                      d.pad_w, d.out_h, d.out_w, cl_int(0), cl_int(cols.dtype() != DType::f32));
  if (!direct) do_convert(cols, col);
  release_scratch(mark);
}

void OpenClDevice::do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  const ConvGeometry d(s);
  const size_t mark = scratch_mark();
  Tensor cols = col;
  if (col.dtype() != DType::f32 && col.dtype() != dx.dtype()) {
    cols = scratch(DType::f32, col.shape());
    do_convert(col, cols);
  }
  queue_.launch_typed(Kernel::col2im, dx.dtype(),
                      LaunchRange::items(size_t(d.channels) * d.input_plane()),
                      queue_.buffer(cols, "col"), queue_.buffer(dx, "dx"), cl_uint(1), d.channels,
                      d.height, d.width, d.kernel_h, d.kernel_w, d.stride_h, d.stride_w, d.pad_h,
                      d.pad_w, d.out_h, d.out_w, cl_int(cols.dtype() != DType::f32));
  release_scratch(mark);
}

}  // namespace trident::opencl
