// Linear algebra: GEMM through the own tiled kernel (small and medium products, bias and ReLU
// fused) or CLBlast plus an epilogue kernel (large products), bias gradients, axpby.
#include <clblast.h>

#include <algorithm>

#include "trident/backends/opencl/opencl_device.h"
#include "trident/core/env.h"
#include "trident/core/error.h"

namespace trident::opencl {

void OpenClDevice::sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                         DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
                         DeviceMemory c, size_t ldc) {
  if (tiled_gemm(tiled_args(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)))
    return;
  const auto run = [=] {
    sgemm_clblast(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  };
  if (!record(run)) run();
}

void OpenClDevice::grow_scratch(cl_mem& scratch, size_t& bytes, size_t needed) {
  if (needed <= bytes) return;
  // The old buffer is kept until the device goes: a captured step's kernels may hold it as an
  // argument (clSetKernelArg does not keep a buffer alive).
  if (scratch) retired_scratch_.push_back(scratch);
  scratch = nullptr;
  bytes = 0;
  scratch = static_cast<cl_mem>(raw_allocate(needed));
  bytes = needed;
}

void OpenClDevice::sgemm_clblast(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                                 float alpha, DeviceMemory a, size_t lda, DeviceMemory b,
                                 size_t ldb, float beta, DeviceMemory c, size_t ldc) {
  using clblast::Transpose;
  const BufferArg A = buffer(a, sizeof(float), "GEMM A");
  const BufferArg B = buffer(b, sizeof(float), "GEMM B");
  const BufferArg C = buffer(c, sizeof(float), "GEMM C");
  const Transpose op_a = trans_a ? Transpose::kYes : Transpose::kNo;
  const Transpose op_b = trans_b ? Transpose::kYes : Transpose::kNo;
  // CLBlast pads awkward shapes through a scratch buffer; without one it would create (and
  // free) a buffer on every call. The size depends on shapes and offsets: remember each answer.
  const auto key = std::make_tuple(int(trans_a), int(trans_b), m, n, k, size_t(A.offset), lda,
                                   size_t(B.offset), ldb, size_t(C.offset), ldc);
  auto known = gemm_temp_sizes_.find(key);
  if (known == gemm_temp_sizes_.end()) {
    size_t bytes = 0;
    TRIDENT_CLBLAST_CHECK(clblast::GemmTempBufferSize<float>(
                              clblast::Layout::kRowMajor, op_a, op_b, m, n, k, A.offset, lda,
                              B.offset, ldb, C.offset, ldc, &queue_, bytes),
                          label_);
    known = gemm_temp_sizes_.emplace(key, bytes).first;
  }
  const size_t temp_bytes = known->second;
  grow_scratch(gemm_temp_, gemm_temp_bytes_, temp_bytes);
  cl_event event = nullptr;  // CLBlast's event covers its last kernel only
  TRIDENT_CLBLAST_CHECK(
      clblast::Gemm<float>(clblast::Layout::kRowMajor, op_a, op_b, m, n, k, alpha, A.mem,
                           A.offset, lda, B.mem, B.offset, ldb, beta, C.mem, C.offset, ldc,
                           &queue_, profile_slot(event), temp_bytes > 0 ? gemm_temp_ : nullptr),
      label_);
  if (profile_) profile_->add("clblast_gemm (last kernel)", event);
}

void OpenClDevice::sgemm_strided_batched(bool trans_a, bool trans_b, size_t m, size_t n,
                                         size_t k, float alpha, DeviceMemory a, size_t lda,
                                         size_t a_stride, DeviceMemory b, size_t ldb,
                                         size_t b_stride, DeviceMemory c, size_t ldc,
                                         size_t c_stride, size_t batch, size_t k_last) {
  if (batch == 0) return;
  TiledGemm t = tiled_args(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
  t.batch = batch;
  t.k_last = k_last;
  t.a_batch = a_stride;
  t.b_batch = b_stride;
  t.c_batch = c_stride;
  if (tiled_gemm(t)) return;
  // CLBlast: the entries alike in one call, a different last one on its own.
  const size_t alike = k_last == k ? batch : batch - 1;
  if (k_last != k) {
    const size_t last = batch - 1;
    sgemm(trans_a, trans_b, m, n, k_last, alpha, a.at(last * a_stride * sizeof(float)), lda,
          b.at(last * b_stride * sizeof(float)), ldb, 0.0f,
          c.at(last * c_stride * sizeof(float)), ldc);
  }
  if (alike == 0) return;
  using clblast::Transpose;
  const BufferArg A = buffer(a, sizeof(float), "batched GEMM A");
  const BufferArg B = buffer(b, sizeof(float), "batched GEMM B");
  const BufferArg C = buffer(c, sizeof(float), "batched GEMM C");
  cl_event event = nullptr;  // CLBlast's event covers its last kernel only
  if (record([=] {
        sgemm_strided_batched(trans_a, trans_b, m, n, k, alpha, a, lda, a_stride, b, ldb,
                              b_stride, c, ldc, c_stride, alike, k);
      }))
    return;
  TRIDENT_CLBLAST_CHECK(
      clblast::GemmStridedBatched<float>(
          clblast::Layout::kRowMajor, trans_a ? Transpose::kYes : Transpose::kNo,
          trans_b ? Transpose::kYes : Transpose::kNo, m, n, k, alpha, A.mem, A.offset, lda,
          a_stride, B.mem, B.offset, ldb, b_stride, 0.0f, C.mem, C.offset, ldc, c_stride, alike,
          &queue_, profile_slot(event)),
      label_);
  if (profile_) profile_->add("clblast_gemm_batched (last kernel)", event);
}

// Split-K: K cut into S slices, one strided batched GEMM into partial products [S, M, N] kept in
// a persistent scratch, then one split_k_sum launch adds them up with the whole epilogue
// (beta C, bias, ReLU). It pays where one GEMM would keep most of the device idle, each
// work-group walking a long K loop: a 10-class head over 4096 features (512x10x4096), or the
// seed MLP's first layer (200x512x784: 32 64x64 tiles for 132 compute units).
// TRIDENT_OPENCL_SPLIT_K: auto (default), or S (1: never) for every product with K >= 2S.
size_t OpenClDevice::split_k_slices(const GemmArgs& g) const {
  const size_t m = g.m, n = g.n, k = g.k;
  const long forced = env_int("TRIDENT_OPENCL_SPLIT_K", 0, 1, 64);
  if (forced > 0) return k >= size_t(2 * forced) ? size_t(forced) : 1;
  // Long K, small C (CLBlast or the own kernel): slices of 512.
  if (k >= 2048 && m * n <= 16384) return std::min<size_t>(k / 512, 16);
  // The own kernel's shapes: more than half the compute units idle with 64x64 tiles, and work
  // enough that a second launch (~4 us through NVIDIA's driver) is worth it; slices >= 128.
  const double work = double(m) * double(n) * double(k);
  const size_t tiles = ((m + 63) / 64) * ((n + 63) / 64);
  const size_t units = size_t(std::max(info_.compute_units, 1));
  // (Splitting the small ones too - 200x10x512, the MLP's head - measured faster in a loop of
  // GEMMs but slower in a training step on an H100: 0.104 -> 0.110-0.122 ms/step.)
  if (!own_gemm_takes(work) || work < double(1 << 25) || tiles * 2 > units || k < 256) return 1;
  return std::min<size_t>({(units + tiles - 1) / tiles, k / 128, 8});
}

bool OpenClDevice::split_k_gemm(const GemmArgs& g, size_t lda, size_t ldb, size_t ldc) {
  const size_t slices = split_k_slices(g);
  if (slices < 2) return false;
  const size_t m = g.m, n = g.n, k = g.k;
  const size_t slice_k = k / slices;
  const size_t done = slices * slice_k, rows = slices + (k > done ? 1 : 0);
  const size_t bytes = rows * m * n * sizeof(float);
  grow_scratch(split_k_, split_k_bytes_, bytes);
  const DeviceMemory partial{split_k_, 0};
  // Slice s of op(A) is columns [s*slice_k, ...): a step of slice_k elements along a row of A,
  // or slice_k rows of the stored [K, M]; likewise rows of op(B).
  const size_t a_step = g.trans_a ? slice_k * lda : slice_k;
  const size_t b_step = g.trans_b ? slice_k : slice_k * ldb;
  // The tail slice (k - done terms, starting at slice `slices`) is the last batch entry.
  sgemm_strided_batched(g.trans_a, g.trans_b, m, n, slice_k, g.alpha, g.a, lda, a_step, g.b, ldb,
                        b_step, partial, n, m * n, rows, rows > slices ? k - done : slice_k);
  const bool has_bias = g.bias && g.bias_kind != BiasKind::none;
  const cl_int bias_kind = !has_bias ? 0 : g.bias_kind == BiasKind::per_column ? 1 : 2;
  launch(Kernel::split_k_sum, LaunchRange::items(checked_u32(int64_t(m * n), "gemm m*n")),
         buffer(partial, sizeof(float), "split-K partial sums"), cl_uint(rows), cl_uint(m),
         cl_uint(n), buffer(g.c, sizeof(float), "GEMM C"), checked_u32(int64_t(ldc), "ldc"),
         g.beta, has_bias ? buffer(g.bias, sizeof(float), "bias") : BufferArg{}, bias_kind,
         cl_int(g.relu));
  return true;
}

void OpenClDevice::gemm(const GemmArgs& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0)
    throw ShapeError(label_ + ": gemm with negative size m=" + std::to_string(g.m) +
                     " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k));
  if (g.m == 0 || g.n == 0) return;
  // Stored shapes: A is [M,K] or [K,M]; B is [K,N] or [N,K]; a zero stride means "packed".
  const size_t lda = g.lda ? g.lda : (g.trans_a ? g.m : g.k);
  const size_t ldb = g.ldb ? g.ldb : (g.trans_b ? g.k : g.n);
  const size_t ldc = g.ldc ? g.ldc : g.n;
  const bool has_bias = g.bias && g.bias_kind != BiasKind::none;
  if (split_k_gemm(g, lda, ldb, ldc)) return;  // epilogue included
  // One launch with bias and ReLU fused, when the own kernel takes this shape.
  TiledGemm t = tiled_args(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, g.a, lda, g.b, ldb,
                           g.beta, g.c, ldc);
  t.bias = has_bias ? g.bias : DeviceMemory{};
  t.bias_kind = !has_bias ? 0 : g.bias_kind == BiasKind::per_column ? 1 : 2;
  t.relu = g.relu;
  if (tiled_gemm(t)) return;
  if (g.k > 0)
    sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, g.a, lda, g.b, ldb, g.beta, g.c, ldc);
  if (g.k > 0 && !has_bias && !g.relu) return;
  // C[M,N] (+ bias per column or per row), ReLU; with k == 0 also C = beta C (CLBlast refuses k=0).
  const cl_int bias_kind = !has_bias ? 0 : g.bias_kind == BiasKind::per_column ? 1 : 2;
  launch(Kernel::gemm_epilogue, LaunchRange::items(checked_u32(g.m * g.n, "gemm m*n")),
         buffer(g.c, sizeof(float), "GEMM C"), checked_u32(ldc, "ldc"), checked_u32(g.m, "m"),
         checked_u32(g.n, "n"), has_bias ? buffer(g.bias, sizeof(float), "bias") : BufferArg{},
         bias_kind, cl_int(g.relu), cl_int(g.k == 0), g.beta);
}

void OpenClDevice::sum_rows(DeviceMemory dy, int64_t rows, int64_t cols, DeviceMemory db,
                            float beta) {
  LaunchRange range;  // 32 columns x 8 row lanes per work-group
  range.dims = 2;
  range.global[0] = (checked_u32(cols, "cols") + 31) / 32 * 32;
  range.global[1] = 8;
  range.local[0] = 32;
  range.local[1] = 8;
  launch(Kernel::sum_rows, range, buffer(dy, sizeof(float), "dy"), checked_u32(rows, "rows"),
         cl_uint(cols), buffer(db, sizeof(float), "db"), beta);
}

void OpenClDevice::axpby(DeviceMemory x, DeviceMemory y, int64_t n, float a, float b) {
  launch(Kernel::axpby, LaunchRange::items(checked_u32(n, "n")), buffer(x, sizeof(float), "x"),
         buffer(y, sizeof(float), "y"), cl_uint(n), a, b);
}

}  // namespace trident::opencl
