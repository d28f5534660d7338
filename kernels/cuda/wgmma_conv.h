// The implicit-GEMM convolution's products on Hopper's warpgroup multiply (wgmma): the gathered
// product (forward, data gradient) in kernels/cuda/sm90a/wgmma_conv.cu, the weight gradient in
// sm90a/wgmma_wgrad.cu. Built for sm_90a alone, so they run on compute capability 9.0 (H100,
// H200) and nowhere else; implicit_conv.cu takes them where KernelContext::warpgroup_mma (the
// device loaded them, TRIDENT_CUDA_WGMMA is not 0) and the *_fits functions say so, its mma.sync
// and halo-window kernels everywhere else. ResNet-9 (bench/bench_models.h) bf16 on an H200: 6.30
// -> 5.14 ms a step (its 32x32 and 16x16 convolutions at about 570 TFLOP/s forward and data
// gradient, 380 weight gradient, against 250 and 190 on mma.sync); fp16 6.65 -> 5.41; tf32
// 12.24 -> 10.02 (the gathered products only: TF32 takes no MN-major operands, so its weight
// gradient stays on mma.sync).
#pragma once
#include <cstdint>

#include "trident/core/dtype.h"
#include "trident/kernels/cuda/halo_conv.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

namespace implicit_gemm {
struct GatherProducts;
}

// Whether the current device loaded the sm_90a kernels (false on any other architecture).
bool wgmma_conv_available();

// Whether the products gs[0, count) fit the kernel: input channels (gs[z].xc) in 32s, any number
// of output channels; bf16 or fp16, or float32 (TF32: only where implicit_conv_fits allowed it,
// the operands rounded by the layout passes), which is all implicit_conv.cu runs.
bool wgmma_gather_fits(const ConvGather* gs, int count);

// The products (implicit_conv_kernels.cuh's GatherProducts, `count` of them, the longest with
// `most` positions) in one launch, as implicit_conv.cu's gather kernel would compute them.
void launch_wgmma_gather(const KernelContext& ctx, DType dtype, const void* in_t, const void* w_t,
                         const float* bias, void* out,
                         const implicit_gemm::GatherProducts& products, int count, int64_t most,
                         int64_t m_total);

// Positions per K step of the weight-gradient kernel.
constexpr int kWgmmaWgradStep = 64;

// Whether the weight gradient of the forward gather g with m_total output channels fits
// wgmma_wgrad.cu's kernel: bf16 or fp16, more than 32 output channels, input channels in 64s.
bool wgmma_wgrad_fits(DType dtype, const ConvGather& g, int64_t m_total);

// dw's float32 partials [splits, m_total, KH*KW*XC], (r, s, c) order, from x_t and dy_t (NHWC),
// the positions of the batch split evenly (implicit_conv.cu's weight gradient does the rest).
void launch_wgmma_wgrad(const KernelContext& ctx, DType dtype, const void* x_t, const void* dy_t,
                        float* partials, const ConvGather& g, int64_t batch, int64_t m_total,
                        int64_t splits);

}  // namespace trident::cuda
