// CudaDevice's GEMM slots: plain products through cuBLAS; fused epilogues through cuBLASLt where
// it can (per-column bias and/or ReLU), else cuBLAS then one epilogue pass (per-row bias, and the
// other activations: cuBLASLt's GELU epilogue is the tanh approximation, not PyTorch's exact GELU).
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
  c.a = device_ptr<const float>(g.a), c.lda = g.lda;
  c.b = device_ptr<const float>(g.b), c.ldb = g.ldb;
  c.c = device_ptr<float>(g.c), c.ldc = g.ldc;
  return c;
}

}  // namespace

void CudaDevice::do_gemm(const GemmArgs& g) {
  const KernelContext ctx = kernel_context();
  if (g.k == 0) {  // C = beta * C: cuBLAS has nothing to multiply
    launch_gemm_epilogue(ctx, device_ptr<float>(g.c), g.ldc, g.m, g.n, nullptr, BiasKind::none,
                         UnaryOp::identity, 0.0f, true, g.beta);
    return check_launch("gemm_epilogue");
  }
  gemm_->sgemm(call_of(g));
}

void CudaDevice::do_gemm_fused(const GemmArgs& g) {
  const KernelContext ctx = kernel_context();
  const float* bias = device_ptr<const float>(g.bias);
  float* c = device_ptr<float>(g.c);
  if (g.k == 0) {  // C = activation(beta * C + bias)
    launch_gemm_epilogue(ctx, c, g.ldc, g.m, g.n, bias, g.bias_kind, g.activation,
                         g.activation_alpha, true, g.beta);
    return check_launch("gemm_epilogue");
  }
  const GemmCall call = call_of(g);
  const bool lt_bias = !bias || g.bias_kind == BiasKind::per_column;
  const bool lt_activation =
      g.activation == UnaryOp::identity || g.activation == UnaryOp::relu;
  if (lt_bias && lt_activation &&
      gemm_->sgemm_bias_relu(call, bias, g.activation == UnaryOp::relu))
    return;
  gemm_->sgemm(call);
  launch_gemm_epilogue(ctx, c, g.ldc, g.m, g.n, bias, g.bias_kind, g.activation,
                       g.activation_alpha, false, g.beta);
  check_launch("gemm_epilogue");
}

}  // namespace trident::cuda
