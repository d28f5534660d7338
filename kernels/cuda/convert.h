// CUDA dtype conversions and fills of any float type: Device::convert (float32, float16,
// bfloat16, and uint8 to any of them; round to nearest even as core/half.h), Device::scale
// (y = x * factor[0], the factor read on the device) and fills of 16-bit tensors.
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// dst[i] = src[i] converted (src f32, f16, bf16 or u8; dst f32, f16 or bf16).
void launch_convert(const KernelContext& ctx, const void* src, DType src_type, void* dst,
                    DType dst_type, int64_t n);
// y[i] = x[i] * factor[0] in float32, rounded to y's type once; y may be x.
void launch_scale(const KernelContext& ctx, const void* x, DType x_type, const float* factor,
                  void* y, DType y_type, int64_t n);
// dst[i] = value rounded to the 16-bit type (f16 or bf16).
void launch_fill_half(const KernelContext& ctx, void* dst, DType type, int64_t n, float value);

}  // namespace trident::cuda
