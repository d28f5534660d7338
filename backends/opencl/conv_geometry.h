// The geometry of a convolution as the OpenCL kernels take it (im2col.cl, conv2d.cl): 32-bit
// sizes, which the front's element limit guarantees to fit.
#pragma once
#include <CL/cl.h>

#include "trident/core/op_types.h"

namespace trident::opencl {

struct ConvGeometry {
  cl_uint batch, channels, height, width, out_channels, kernel_h, kernel_w;
  cl_uint stride_h, stride_w, pad_h, pad_w, out_h, out_w;
  explicit ConvGeometry(const Conv2dShape& s)
      : batch(cl_uint(s.batch)), channels(cl_uint(s.in_channels)), height(cl_uint(s.height)),
        width(cl_uint(s.width)), out_channels(cl_uint(s.out_channels)),
        kernel_h(cl_uint(s.kernel_h)), kernel_w(cl_uint(s.kernel_w)),
        stride_h(cl_uint(s.stride_h)), stride_w(cl_uint(s.stride_w)), pad_h(cl_uint(s.pad_h)),
        pad_w(cl_uint(s.pad_w)), out_h(cl_uint(s.out_height())), out_w(cl_uint(s.out_width())) {}
  size_t patch() const { return size_t(channels) * kernel_h * kernel_w; }  // C*KH*KW
  size_t plane() const { return size_t(out_h) * out_w; }                  // OH*OW
  size_t input_plane() const { return size_t(height) * width; }           // H*W
};

}  // namespace trident::opencl
