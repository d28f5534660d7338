// CpuDevice: host allocations and the op table, each op forwarded to kernels/cpu inside the arena.
#include "trident/backends/cpu/cpu_device.h"

#include "trident/backends/cpu/tensor_access.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <oneapi/tbb/version.h>

#include "trident/core/error.h"
#include "trident/core/half.h"
#include "trident/kernels/cpu/batchnorm.h"
#include "trident/kernels/cpu/channel.h"
#include "trident/kernels/cpu/conv2d.h"
#include "trident/kernels/cpu/convert.h"
#include "trident/kernels/cpu/elementwise.h"
#include "trident/kernels/cpu/gemm.h"
#include "trident/kernels/cpu/gemm_bf16.h"
#include "trident/kernels/cpu/im2col.h"
#include "trident/kernels/cpu/pool2d.h"

namespace trident {
using cpu::at;
using cpu::with_storage;

namespace {

uint64_t page_bytes(int which) {
  const long pages = sysconf(which), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? uint64_t(pages) * uint64_t(size) : 0;
}

cpu::BiasKind cpu_bias_kind(BiasKind kind) {
  switch (kind) {
    case BiasKind::per_column: return cpu::BiasKind::per_column;
    case BiasKind::per_row: return cpu::BiasKind::per_row;
    default: return cpu::BiasKind::none;
  }
}

}  // namespace

CpuDevice::CpuDevice(int index, int threads, const std::string& cpu_name)
    : threads_(threads), arena_(threads) {
  info_.backend = "cpu";
  info_.index = index;
  info_.name = cpu_name + " (" + std::to_string(threads) +
               (threads == 1 ? " thread)" : " threads)");
  info_.vendor = "host";
  info_.type = "cpu";
  info_.driver = "oneTBB " + std::to_string(TBB_VERSION_MAJOR) + "." +
                 std::to_string(TBB_VERSION_MINOR);
  info_.detail = std::string("sgemm kernel ") + cpu::sgemm_kernel_name() +
                 (cpu::cpu_has_amx_bf16()      ? "; bf16 GEMMs and convolutions on AMX"
                  : cpu::cpu_has_avx512_bf16() ? "; bf16 GEMMs and convolutions on AVX-512 BF16"
                                               : "");
  info_.memory_bytes = page_bytes(_SC_PHYS_PAGES);
  info_.compute_units = threads;
}

CpuDevice::~CpuDevice() { release_pool(); }

const void* CpuDevice::memory_space() const {
  static const char host = 0;
  return &host;
}

void* CpuDevice::do_allocate(size_t bytes) {
  constexpr size_t kAlign = 64;  // a cache line, and a full AVX-512 vector
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (!p)
    throw OutOfMemory(info_.id() + ": cannot allocate " + std::to_string(bytes) +
                      " bytes of host memory (" + std::to_string(page_bytes(_SC_AVPHYS_PAGES)) +
                      " bytes available); use a smaller batch or model");
  return p;
}

void CpuDevice::do_free(void* handle) noexcept { std::free(handle); }

void CpuDevice::do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) {
  run([&] { cpu::copy_bytes(at<char>(dst), host, bytes); });
}

void CpuDevice::do_copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  run([&] { cpu::copy_bytes(host, at<char>(src), bytes); });
}

void CpuDevice::do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  run([&] { cpu::copy_bytes(at<char>(dst), at<char>(src), bytes); });
}

void CpuDevice::do_fill(const Tensor& dst, float value) {
  run([&] {
    if (value == 0.0f) return cpu::fill_zero_bytes(at<void>(dst), dst.bytes());
    switch (dst.dtype()) {
      case DType::f32: return cpu::fill(at(dst), dst.numel(), value);
      case DType::bf16: return cpu::fill_bf16(at<uint16_t>(dst), dst.numel(), value);
      case DType::i32: return cpu::fill_i32(at<int32_t>(dst), dst.numel(), int32_t(value));
      default:
        throw ShapeError(info_.id() +
                         ": fill with a non-zero value supports F32, BF16 and I32, not " +
                         dtype_name(dst.dtype()));
    }
  });
}

// ---- linear algebra ----------------------------------------------------------------------------

namespace {

// A bfloat16 product (native where the CPU has AVX-512 BF16, do_native): C float32 or bfloat16.
void gemm_bf16(const GemmArgs& g, void* c, bool c_bf16, int64_t ldc,
               const cpu::GemmEpilogue& epilogue) {
  cpu::gemm_bf16(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, at<uint16_t>(g.a), g.lda,
                 at<uint16_t>(g.b), g.ldb, g.beta, c, c_bf16, ldc, epilogue);
}

// do_gemm_fused for bfloat16 A and B. A bfloat16 C with an activation other than ReLU is
// computed into float32 rows first (`rows`: m x n scratch, else null), so that it is rounded
// once, after the activation.
void gemm_fused_bf16(const GemmArgs& g, float* rows) {
  const bool relu = g.activation == UnaryOp::relu;
  const bool c_bf16 = g.c.dtype() == DType::bf16;
  const cpu::GemmEpilogue epilogue{at(g.bias), cpu_bias_kind(g.bias_kind), relu};
  if (relu || g.activation == UnaryOp::identity)
    return gemm_bf16(g, at<void>(g.c), c_bf16, g.ldc, epilogue);
  float* c = c_bf16 ? rows : at(g.c);
  const int64_t ldc = c_bf16 ? g.n : g.ldc;
  auto c_row = [&](int64_t r) { return at<uint16_t>(g.c) + r * g.ldc; };
  if (c_bf16 && g.beta != 0.0f)
    for (int64_t r = 0; r < g.m; ++r)
      cpu::convert(c_row(r), DType::bf16, c + r * ldc, DType::f32, g.n);
  gemm_bf16(g, c, false, ldc, epilogue);
  for (int64_t r = 0; r < g.m; ++r) {
    cpu::unary_forward(g.activation, c + r * ldc, c + r * ldc, g.n, g.activation_alpha);
    if (c_bf16) cpu::convert(c + r * ldc, DType::f32, c_row(r), DType::bf16, g.n);
  }
}

}  // namespace

void CpuDevice::do_gemm(const GemmArgs& g) {
  run([&] {
    if (g.a.dtype() == DType::bf16)
      return gemm_bf16(g, at<void>(g.c), g.c.dtype() == DType::bf16, g.ldc, {});
    cpu::sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, at(g.a), g.lda, at(g.b), g.ldb,
               g.beta, at(g.c), g.ldc);
  });
}

// Bias and ReLU ride in the SGEMM's store; other activations take one pass over C afterwards.
void CpuDevice::do_gemm_fused(const GemmArgs& g) {
  const bool relu = g.activation == UnaryOp::relu;
  if (g.a.dtype() == DType::bf16) {
    const bool rounded_after = g.c.dtype() == DType::bf16 && !relu &&
                               g.activation != UnaryOp::identity;
    const size_t mark = scratch_mark();
    float* rows = rounded_after ? at(scratch(DType::f32, {g.m, g.n})) : nullptr;
    run([&] { gemm_fused_bf16(g, rows); });
    return release_scratch(mark);
  }
  run([&] {
    cpu::sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, at(g.a), g.lda, at(g.b), g.ldb,
               g.beta, at(g.c), g.ldc,
               cpu::GemmEpilogue{at(g.bias), cpu_bias_kind(g.bias_kind), relu});
    if (relu || g.activation == UnaryOp::identity) return;
    for (int64_t r = 0; r < g.m; ++r) {
      float* row = at(g.c) + r * g.ldc;
      cpu::unary_forward(g.activation, row, row, g.n, g.activation_alpha);
    }
  });
}

void CpuDevice::do_axpby(const Tensor& x, const Tensor& y, float a, float b) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::axpby(at<X>(x), at<X>(y), y.numel(), a, b);
    });
  });
}

void CpuDevice::do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                                    UnaryOp activation, float alpha) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::axpby(at<X>(x), at<X>(y), y.numel(), a, b, activation, alpha);
    });
  });
}

// ---- elementwise -------------------------------------------------------------------------------

void CpuDevice::do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::unary_forward(op, at<X>(x), at<X>(y), x.numel(), alpha);
    });
  });
}

void CpuDevice::do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                                  const Tensor& dx, float alpha) {
  run([&] {
    with_storage(dy.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::unary_backward(op, at<X>(x), at<X>(y), at<X>(dy), at<X>(dx), dy.numel(), alpha);
    });
  });
}

void CpuDevice::do_dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset,
                           float p, uint64_t seed, uint32_t stream, const Tensor& step_state) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::dropout(at<X>(x), at<X>(y), x.numel(), group, group_offset, p, seed, stream,
                   at<uint32_t>(step_state)[1]);
    });
  });
}

void CpuDevice::do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                  const Tensor& y, int64_t outer, int64_t channels,
                                  int64_t inner) {
  run([&] { cpu::channel_affine(at(x), at(scale), at(shift), at(y), outer, channels, inner); });
}

void CpuDevice::do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out,
                                int64_t outer, int64_t channels, int64_t inner, float beta) {
  run([&] { cpu::channel_sums(at(x), at(y), at(out), outer, channels, inner, beta); });
}

// ---- convolution and pooling -------------------------------------------------------------------

size_t CpuDevice::do_conv2d_workspace_bytes(const Conv2dShape& s) const {
  return cpu::conv2d_workspace_bytes(s, threads_);
}

bool CpuDevice::do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                  const Tensor& b, const Tensor& y, const Tensor& workspace) {
  run([&] {
    if (s.dtype == DType::bf16)
      return cpu::conv2d_forward(s, at<uint16_t>(x), at<uint16_t>(w), at(b), at<uint16_t>(y),
                                 at<void>(workspace), threads_);
    cpu::conv2d_forward(s, at(x), at(w), at(b), at(y), at<void>(workspace), threads_);
  });
  return false;  // the convolution works through the batch in cache-sized chunks: nothing kept
}

bool CpuDevice::do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                                   const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                   const Tensor& db, const Tensor& workspace, bool, bool) {
  run([&] {
    if (s.dtype == DType::bf16)
      return cpu::conv2d_backward(s, at<uint16_t>(x), at<uint16_t>(w), at<uint16_t>(dy),
                                  at<uint16_t>(dx), at(dw), at(db), at<void>(workspace),
                                  threads_);
    cpu::conv2d_backward(s, at(x), at(w), at(dy), at(dx), at(dw), at(db), at<void>(workspace),
                         threads_);
  });
  return false;
}

void CpuDevice::do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  run([&] {
    if (s.dtype == DType::bf16) return cpu::im2col(s, at<uint16_t>(x), at<uint16_t>(col));
    cpu::im2col(s, at(x), at(col));
  });
}

// bfloat16 (native with the convolutions): summed in float32 scratch, rounded once.
void CpuDevice::do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  if (s.dtype != DType::bf16) return run([&] { cpu::col2im(s, at(col), at(dx)); });
  const size_t mark = scratch_mark();
  const Tensor col32 = scratch(DType::f32, col.shape()), dx32 = scratch(DType::f32, dx.shape());
  run([&] {
    cpu::convert(at<void>(col), DType::bf16, at(col32), DType::f32, col.numel());
    cpu::col2im(s, at(col32), at(dx32));
    cpu::convert(at(dx32), DType::f32, at<void>(dx), DType::bf16, dx.numel());
  });
  release_scratch(mark);
}

void CpuDevice::do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                                     const Tensor& argmax) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::maxpool2d_forward(s, at<X>(x), at<X>(y), at<int32_t>(argmax));
    });
  });
}

void CpuDevice::do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                      const Tensor& argmax, const Tensor& dx) {
  run([&] {
    with_storage(dy.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::maxpool2d_backward(s, at<X>(dy), at<int32_t>(argmax), at<X>(dx));
    });
  });
}

void CpuDevice::do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::avgpool2d_forward(s, at<X>(x), at<X>(y));
    });
  });
}

void CpuDevice::do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& dx) {
  run([&] {
    with_storage(dy.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::avgpool2d_backward(s, at<X>(dy), at<X>(dx));
    });
  });
}

void CpuDevice::do_batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                     const Tensor& gamma, const Tensor& beta,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     const Tensor& y, const Tensor& save_mean,
                                     const Tensor& save_invstd) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::batchnorm_forward(s, training, at<X>(x), at(gamma), at(beta), at(running_mean),
                             at(running_var), at<X>(y), at(save_mean), at(save_invstd));
    });
  });
}

// The residual block's sum in the normalising loop (as CUDA and OpenCL; the default would add a
// pass over two tensors).
void CpuDevice::do_batchnorm_add_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                         const Tensor& residual, const Tensor& gamma,
                                         const Tensor& beta, const Tensor& running_mean,
                                         const Tensor& running_var, const Tensor& y,
                                         const Tensor& save_mean, const Tensor& save_invstd) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::batchnorm_forward(s, training, at<X>(x), at(gamma), at(beta), at(running_mean),
                             at(running_var), at<X>(y), at(save_mean), at(save_invstd),
                             at<X>(residual));
    });
  });
}

void CpuDevice::do_batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                                      const Tensor& gamma, const Tensor& save_mean,
                                      const Tensor& save_invstd, const Tensor& dx,
                                      const Tensor& dgamma, const Tensor& dbeta,
                                      const Tensor& beta) {
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::batchnorm_backward(s, at<X>(x), at<X>(dy), at(gamma), at(save_mean),
                              at(save_invstd), at<X>(dx), at(dgamma), at(dbeta), at(beta));
    });
  });
}

// ---- 16-bit floats: stored here, computed in float32 (bf16 GEMMs and convolutions natively on
// AVX-512 BF16) ----------------------------------------------------------------------------------

bool CpuDevice::do_native(OpFamily family, DType dtype) const {
  if (family == OpFamily::gemm || family == OpFamily::conv2d)
    return dtype == DType::bf16 && cpu::cpu_has_avx512_bf16();
  // Float arithmetic on bfloat16 storage, everywhere (a shift widens, one rounding narrows).
  if (family == OpFamily::elementwise || family == OpFamily::batchnorm ||
      family == OpFamily::pool || family == OpFamily::gather)
    return dtype == DType::bf16;
  return family == OpFamily::convert && is_half(dtype);
}

// The float kernels on bfloat16 storage take one type per call (a template per type).
bool CpuDevice::do_native_mixed(OpFamily family) const {
  return family != OpFamily::elementwise;
}

void CpuDevice::do_convert(const Tensor& src, const Tensor& dst) {
  run([&] { cpu::convert(at<void>(src), src.dtype(), at<void>(dst), dst.dtype(), src.numel()); });
}

void CpuDevice::do_scale(const Tensor& x, const Tensor& factor, const Tensor& y) {
  const float f = at(factor)[0];
  run([&] {
    with_storage(x.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::scale(at<X>(x), f, at<X>(y), x.numel());
    });
  });
}

}  // namespace trident
