// The patch-matrix slots (kernels/opencl/im2col.cl) for one sample: the batch kernels with batch
// 1 and no ones row produce exactly Device::im2col's [C*KH*KW, OH*OW] layout.
#include "trident/backends/opencl/conv_geometry.h"
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

void OpenClDevice::do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  const ConvGeometry d(s);
  queue_.launch(Kernel::im2col, LaunchRange::items(size_t(d.channels) * d.plane()),
                queue_.buffer(x, "x"), queue_.buffer(col, "col"), cl_uint(1), d.channels,
                d.height, d.width, d.kernel_h, d.kernel_w, d.stride_h, d.stride_w, d.pad_h,
                d.pad_w, d.out_h, d.out_w, cl_int(0));
}

void OpenClDevice::do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  const ConvGeometry d(s);
  queue_.launch(Kernel::col2im, LaunchRange::items(size_t(d.channels) * d.input_plane()),
                queue_.buffer(col, "col"), queue_.buffer(dx, "dx"), cl_uint(1), d.channels,
                d.height, d.width, d.kernel_h, d.kernel_w, d.stride_h, d.stride_w, d.pad_h,
                d.pad_w, d.out_h, d.out_w);
}

}  // namespace trident::opencl
