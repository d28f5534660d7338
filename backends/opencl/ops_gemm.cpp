// The GEMM slots: a checked GemmArgs becomes one GemmEngine call (its epilogue fused where the
// engine can: bias and ReLU in the own kernel or the split-K sum, any activation after CLBlast).
// 16-bit A and B multiply on the own kernel with float accumulation where the engine's policy
// gives it the product; elsewhere (CPU devices, the largest products: CLBlast's territory) they
// are converted to float32 scratch for CLBlast, whose own half GEMM accumulates in half.
#include "trident/backends/opencl/opencl_device.h"

namespace trident::opencl {
namespace {

GemmCall gemm_call(const GemmArgs& g) {
  GemmCall call;
  call.ab_type = g.a.dtype();
  call.c_type = g.c.dtype();
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

void OpenClDevice::do_gemm(const GemmArgs& args) {
  if (gemm_.gemm(gemm_call(args))) return;
  // Through float32: A and B converted whole (their strides stay valid), C too when its old
  // values count (beta) or when it has gaps between rows that the conversion back must keep.
  const size_t mark = scratch_mark();
  const auto to_float = [&](const Tensor& t, bool load) {
    if (t.dtype() == DType::f32) return t;
    const Tensor staged = scratch(DType::f32, t.shape());
    if (load) do_convert(t, staged);
    return staged;
  };
  GemmArgs g = args;
  g.a = to_float(args.a, true);
  g.b = to_float(args.b, true);
  g.c = to_float(args.c, args.beta != 0.0f || args.ldc != args.n);
  gemm_.gemm(gemm_call(g));  // float32: always runs
  if (args.c.dtype() != DType::f32) do_convert(g.c, args.c);
  release_scratch(mark);
}

void OpenClDevice::do_gemm_fused(const GemmArgs& args) { do_gemm(args); }

}  // namespace trident::opencl
