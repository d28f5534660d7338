// The pooling slots (kernels/opencl/pool2d.cl): max pooling with its argmax and fused ReLU, and
// average pooling with a work-group per plane for global average pooling. The front checks that
// y has x's type and dx dy's: the kernels run in that storage type.
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {
namespace {

// Whether the window is the whole plane (AdaptiveAvgPool2d(1)).
bool global_window(const Pool2dShape& s) {
  return s.kernel_h == s.height && s.kernel_w == s.width && s.pad_h == 0 && s.pad_w == 0;
}

}  // namespace

void OpenClDevice::do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                                        const Tensor& argmax) {
  queue_.launch_typed(Kernel::maxpool2d_forward, x.dtype(),
                LaunchRange::items(size_t(s.output_numel())),
                queue_.buffer(x, "x"), queue_.buffer(y, "y"), queue_.buffer(argmax, "argmax"),
                cl_uint(s.batch * s.channels), cl_uint(s.height), cl_uint(s.width),
                cl_uint(s.kernel_h), cl_uint(s.kernel_w), cl_uint(s.stride_h),
                cl_uint(s.stride_w), cl_uint(s.pad_h), cl_uint(s.pad_w),
                cl_uint(s.out_height()), cl_uint(s.out_width()), cl_int(s.relu));
}

void OpenClDevice::do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                         const Tensor& argmax, const Tensor& dx) {
  if (s.tiles_plane()) {  // a work-item per window (maxpool2d_tiled_backward)
    queue_.launch_typed(Kernel::maxpool2d_tiled_backward, dy.dtype(),
                        LaunchRange::items(size_t(s.output_numel())), queue_.buffer(dy, "dy"),
                        queue_.buffer(argmax, "argmax"), queue_.buffer(dx, "dx"),
                        cl_uint(s.batch * s.channels), cl_uint(s.height), cl_uint(s.width),
                        cl_uint(s.kernel_h), cl_uint(s.kernel_w), cl_uint(s.out_height()),
                        cl_uint(s.out_width()));
    return;
  }
  queue_.launch_typed(Kernel::maxpool2d_backward, dy.dtype(),
                LaunchRange::items(size_t(s.input_numel())),
                queue_.buffer(dy, "dy"), queue_.buffer(argmax, "argmax"), queue_.buffer(dx, "dx"),
                cl_uint(s.batch * s.channels), cl_uint(s.height), cl_uint(s.width),
                cl_uint(s.kernel_h), cl_uint(s.kernel_w), cl_uint(s.stride_h),
                cl_uint(s.stride_w), cl_uint(s.pad_h), cl_uint(s.pad_w),
                cl_uint(s.out_height()), cl_uint(s.out_width()));
}

void OpenClDevice::do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) {
  if (global_window(s)) {
    queue_.launch_typed(Kernel::avgpool2d_global, x.dtype(),
                  LaunchRange::groups(size_t(s.batch * s.channels), 64),
                  queue_.buffer(x, "x"), queue_.buffer(y, "y"), cl_uint(s.height * s.width));
    return;
  }
  queue_.launch_typed(Kernel::avgpool2d_forward, x.dtype(),
                LaunchRange::items(size_t(s.output_numel())),
                queue_.buffer(x, "x"), queue_.buffer(y, "y"), cl_uint(s.batch * s.channels),
                cl_uint(s.height), cl_uint(s.width), cl_uint(s.kernel_h), cl_uint(s.kernel_w),
                cl_uint(s.stride_h), cl_uint(s.stride_w), cl_uint(s.pad_h), cl_uint(s.pad_w),
                cl_uint(s.out_height()), cl_uint(s.out_width()));
}

void OpenClDevice::do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                         const Tensor& dx) {
  queue_.launch_typed(Kernel::avgpool2d_backward, dy.dtype(),
                LaunchRange::items(size_t(s.input_numel())),
                queue_.buffer(dy, "dy"), queue_.buffer(dx, "dx"), cl_uint(s.batch * s.channels),
                cl_uint(s.height), cl_uint(s.width), cl_uint(s.kernel_h), cl_uint(s.kernel_w),
                cl_uint(s.stride_h), cl_uint(s.stride_w), cl_uint(s.pad_h), cl_uint(s.pad_w),
                cl_uint(s.out_height()), cl_uint(s.out_width()));
}

}  // namespace trident::opencl
