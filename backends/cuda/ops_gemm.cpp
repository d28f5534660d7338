// CudaDevice's GEMM slots: plain products through cuBLAS; fused epilogues through cuBLASLt where
// it can (per-column bias and/or ReLU), else cuBLAS then one epilogue pass (per-row bias, and the
// other activations: cuBLASLt's GELU epilogue is the tanh approximation, not PyTorch's exact GELU).
// A and B of one float type, C float32 or that type (16-bit: tensor cores, float32 accumulation).
#include "trident/backends/cuda/cublas_gemm.h"
#include "trident/backends/cuda/cuda_device.h"
#include "trident/kernels/cuda/elementwise.h"

namespace trident::cuda {
namespace {

// The front has filled the strides (0 = packed) and checked the operands.
GemmCall call_of(const GemmArgs& g) {
  GemmCall c;
  c.trans_a = g.trans_a, c.trans_b = g.trans_b;
  c.m = g.m, c.n = g.n, c.k = g.k;
  c.alpha = g.alpha, c.beta = g.beta;
  c.a = device_ptr<const void>(g.a), c.lda = g.lda;
  c.b = device_ptr<const void>(g.b), c.ldb = g.ldb;
  c.c = device_ptr<void>(g.c), c.ldc = g.ldc;
  c.ab_type = g.a.dtype(), c.c_type = g.c.dtype();
  c.tf32 = g.allow_tf32;
  return c;
}

}  // namespace

void CudaDevice::do_gemm(const GemmArgs& g) {
  const KernelContext ctx = kernel_context();
  if (g.k == 0) {  // C = beta * C: cuBLAS has nothing to multiply
    launch_gemm_epilogue(ctx, g.c.dtype(), device_ptr<void>(g.c), g.ldc, g.m, g.n, nullptr,
                         BiasKind::none, UnaryOp::identity, 0.0f, true, g.beta);
    return check_launch("gemm_epilogue");
  }
  gemm().gemm(call_of(g));
}

void CudaDevice::do_gemm_fused(const GemmArgs& g) {
  const KernelContext ctx = kernel_context();
  const float* bias = device_ptr<const float>(g.bias);
  void* c = device_ptr<void>(g.c);
  if (g.k == 0) {  // C = activation(beta * C + bias)
    launch_gemm_epilogue(ctx, g.c.dtype(), c, g.ldc, g.m, g.n, bias, g.bias_kind, g.activation,
                         g.activation_alpha, true, g.beta);
    return check_launch("gemm_epilogue");
  }
  const GemmCall call = call_of(g);
  const bool lt_bias = !bias || g.bias_kind == BiasKind::per_column;
  const bool lt_activation =
      g.activation == UnaryOp::identity || g.activation == UnaryOp::relu;
  if (lt_bias && lt_activation) {
    // cuBLASLt adds a bias of C's type only: a 16-bit C gets a copy of the float32 bias rounded
    // to its type (as PyTorch's autocast rounds a Linear's bias), from the scratch arena.
    const size_t mark = scratch_mark();
    const void* lt_bias_data = bias;
    if (bias && g.c.dtype() != DType::f32) {
      const Tensor rounded = scratch(g.c.dtype(), g.bias.shape());
      convert(g.bias, rounded);
      lt_bias_data = device_ptr<const void>(rounded);
    }
    const bool fused = gemm().gemm_bias_relu(call, lt_bias_data, g.activation == UnaryOp::relu);
    release_scratch(mark);  // stream-ordered: later users of the arena queue after the GEMM
    if (fused) return;
  }
  gemm().gemm(call);
  launch_gemm_epilogue(ctx, g.c.dtype(), c, g.ldc, g.m, g.n, bias, g.bias_kind, g.activation,
                       g.activation_alpha, false, g.beta);
  check_launch("gemm_epilogue");
}

}  // namespace trident::cuda
