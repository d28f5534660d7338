// The 16-bit slots (kernels/opencl/convert.cl): dtype conversion and scale() in one kernel for
// any pair of types, and the families computed natively in float16 and bfloat16 (every one:
// each kernel stores activations as its program's act_t and computes in float).
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {

bool OpenClDevice::do_native(OpFamily, DType dtype) const { return is_half(dtype); }

void OpenClDevice::do_convert(const Tensor& src, const Tensor& dst) {
  queue_.launch(Kernel::convert, LaunchRange::items(size_t(src.numel())),
                queue_.buffer(src, "src"), cl_int(src.dtype()), queue_.buffer(dst, "dst"),
                cl_int(dst.dtype()), cl_uint(src.numel()), BufferArg{}, cl_int(0));
}

void OpenClDevice::do_scale(const Tensor& x, const Tensor& factor, const Tensor& y) {
  queue_.launch(Kernel::convert, LaunchRange::items(size_t(x.numel())), queue_.buffer(x, "x"),
                cl_int(x.dtype()), queue_.buffer(y, "y"), cl_int(y.dtype()), cl_uint(x.numel()),
                queue_.buffer(factor, "factor"), cl_int(1));
}

}  // namespace trident::opencl
