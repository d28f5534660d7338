// The GEMM slots: a checked GemmArgs becomes one GemmEngine call (its epilogue fused where the
// engine can: bias and ReLU in the own kernel or the split-K sum, any activation after CLBlast).
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {
namespace {

GemmCall gemm_call(const GemmArgs& g) {
  GemmCall call;
  call.trans_a = g.trans_a;
  call.trans_b = g.trans_b;
  call.m = size_t(g.m);
  call.n = size_t(g.n);
  call.k = size_t(g.k);
  call.alpha = g.alpha;
  call.beta = g.beta;
  call.a = g.a.memory();
  call.b = g.b.memory();
  call.c = g.c.memory();
  call.lda = size_t(g.lda);
  call.ldb = size_t(g.ldb);
  call.ldc = size_t(g.ldc);
  call.bias = g.bias.memory();
  call.bias_kind = g.bias_kind == BiasKind::per_column ? 1
                  : g.bias_kind == BiasKind::per_row  ? 2
                                                      : 0;
  call.activation = g.activation;
  call.activation_alpha = g.activation_alpha;
  return call;
}

}  // namespace

void OpenClDevice::do_gemm(const GemmArgs& args) { gemm_.gemm(gemm_call(args)); }

void OpenClDevice::do_gemm_fused(const GemmArgs& args) { gemm_.gemm(gemm_call(args)); }

}  // namespace trident::opencl
