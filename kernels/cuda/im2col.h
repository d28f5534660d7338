// CUDA im2col / col2im over a batch (Conv2dShape: any kernel, stride and padding, rectangular),
// for Device::im2col / col2im (one sample) and the batched convolution (kernels/cuda/conv2d.h).
// x, col, y and dx are of s.dtype (f32, f16 or bf16); the bias is float32.
#pragma once
#include <cstdint>

#include "trident/core/op_types.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

// col[n, r, p] for n < samples, r < rows_per_sample, p < OH*OW (rows_per_sample = CKK, or CKK + 1
// with a ones row): row r = (c, kh, kw) holds x[n, c, oh*SH - PH + kh, ow*SW - PW + kw] at
// column p = (oh, ow), zero outside the image; row CKK is all ones when ones_row. x is
// [samples, C, H, W]; s.batch is ignored. When bias is not null, the same launch also writes
// y[n, oc, p] = bias[oc] for the samples (y [samples, OC, OH*OW]), so that a GEMM can add into y.
// folded: the samples' columns side by side instead, col[r, n * P + p] (one matrix
// [rows_per_sample, samples * P] for one GEMM over the whole chunk).
void launch_im2col(const KernelContext& ctx, const Conv2dShape& s, int64_t samples,
                   const void* x, void* col, int64_t rows_per_sample, bool ones_row,
                   const float* bias, void* y, bool folded = false);
// The adjoint: dx[n, c, h, w] = the sum of the col entries (patch rows only, layout as above)
// that read x[n, c, h, w], added in float32 in increasing (kh, kw) as the CPU's scatter adds
// them. Overwrites dx [samples, C, H, W].
void launch_col2im(const KernelContext& ctx, const Conv2dShape& s, int64_t samples,
                   const void* col, int64_t rows_per_sample, void* dx, bool folded = false);

// The folded layout's transposes, of `dtype` (f32, f16, bf16): channels_first writes
// dst[c, n * P + p] = src[n, c, p]; samples_first writes dst[n, c, p] = src[c, n * P + p]
// (+ bias[c] in float32, rounded once, when bias is not null).
void launch_channels_first(const KernelContext& ctx, DType dtype, const void* src, int64_t samples,
                           int64_t channels, int64_t positions, void* dst);
void launch_samples_first(const KernelContext& ctx, DType dtype, const void* src,
                          const float* bias, int64_t samples, int64_t channels,
                          int64_t positions, void* dst);

}  // namespace trident::cuda
