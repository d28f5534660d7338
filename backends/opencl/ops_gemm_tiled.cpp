// The own tiled GEMM (kernels/opencl/gemm.cl): when it runs instead of CLBlast, which tile shape,
// and its launch: one enqueue with the bias and ReLU fused, no events, no host-side scratch.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

#include "trident/backends/opencl/opencl_device.h"
#include "trident/backends/opencl/program_cache.h"
#include "trident/core/env.h"
#include "trident/core/error.h"

namespace trident::opencl {
namespace {

// Tile shapes, smallest first; each is a separate program (-D options), so every loop bound in
// the kernel is a compile-time constant and the accumulators stay in registers. The small tile
// serves long-K products with few output tiles (200x10x512): a deep K slice halves the number of
// latency-bound load/barrier rounds.
struct GemmTile { size_t m, n, k; const char* options; };
const GemmTile kTiles[] = {
    {32, 32, 32, "-cl-std=CL1.2 -DTS_M=32 -DTS_N=32 -DTS_K=32"},
    {64, 64, 16, "-cl-std=CL1.2 -DTS_M=64 -DTS_N=64 -DTS_K=16"},
    {128, 128, 8, "-cl-std=CL1.2 -DTS_M=128 -DTS_N=128 -DTS_K=8"},
};
const char* const kTileKernelNames[] = {"gemm_tiled (32x32 tiles)", "gemm_tiled (64x64 tiles)",
                                        "gemm_tiled (128x128 tiles)"};
constexpr size_t kGemmSide = 16;  // work-groups are 16 x 16 (gemm.cl's GEMM_SIDE)
// Auto mode: products up to this many multiply-adds use the own kernel: the seed models' and
// the convolutions' GEMMs, and mlp-big's 784-wide first layer (512x4096x784 forward, 4096x784x512
// weight gradient: 1.6e9, where CLBlast reached only 14 TFLOP/s on an H200 against cuBLAS's 41);
// mlp-big's 4096x4096 layers (8.6e9) stay with CLBlast's tuned large-matrix kernels.
constexpr double kOwnGemmAutoWork = double(1u << 31);

size_t groups_for(const GemmTile& tile, const TiledGemm& t) {
  return (t.m + tile.m - 1) / tile.m * ((t.n + tile.n - 1) / tile.n) * t.batch;
}

// The largest tile that still gives half the compute units a work-group (a larger tile does
// more multiply-adds per local-memory read, and its loads are prefetched, so one work-group per
// compute unit is not starved) and wastes at most a third of its work on edge padding (a conv's
// 20 x 12800 output would be 84% padding in 128-row tiles); TRIDENT_OPENCL_GEMM_TILE
// (32, 64 or 128) forces one (tests use it to run every variant).
int pick_variant(const TiledGemm& t, int compute_units) {
  const long forced = env_int("TRIDENT_OPENCL_GEMM_TILE", 0, 0, 128);
  for (int v = 0; v < 3; ++v)
    if (forced != 0 && size_t(forced) == kTiles[v].m) return v;
  if (forced != 0)
    throw UsageError("TRIDENT_OPENCL_GEMM_TILE=" + std::to_string(forced) +
                     " is not a tile size; use 32, 64 or 128 (or leave it unset)");
  const size_t wanted = size_t(std::max(compute_units / 2, 1));
  const double useful = double(t.m) * double(t.n) * double(t.batch);
  for (int v = 2; v > 0; --v) {
    const size_t groups = groups_for(kTiles[v], t);
    const double padded = double(groups) * double(kTiles[v].m) * double(kTiles[v].n);
    if (groups >= wanted && padded <= 1.5 * useful) return v;
  }
  return 0;
}

// Whether (rows-1)*row_stride + (cols-1)*col_stride, the last index the kernel forms in one
// matrix, stays within the kernel's 31-bit int arithmetic.
bool fits_int(size_t rows, size_t row_stride, size_t cols, size_t col_stride) {
  const double last = double(rows ? rows - 1 : 0) * double(row_stride) +
                      double(cols ? cols - 1 : 0) * double(col_stride);
  return last < double(INT_MAX) && row_stride < size_t(INT_MAX) && col_stride < size_t(INT_MAX);
}

}  // namespace

OwnGemmPolicy own_gemm_policy_from_env() {
  const auto value = env_string("TRIDENT_OPENCL_OWN_GEMM");
  // auto (the default) was measured on an H200 through NVIDIA's driver: faster than CLBlast alone
  // on every model (seed MLP 0.164 -> 0.148 ms/step, mlp-big 4.69 -> 4.41) and the suite passes.
  if (!value || *value == "auto") return {OwnGemmMode::auto_, kOwnGemmAutoWork, false};
  if (*value == "always") return {OwnGemmMode::always, 0.0, false};
  if (*value == "never") return {OwnGemmMode::never, 0.0, false};
  char* end = nullptr;
  const double limit = std::strtod(value->c_str(), &end);
  if (end && *end == '\0' && limit > 0.0) return {OwnGemmMode::auto_, limit, true};
  throw UsageError("TRIDENT_OPENCL_OWN_GEMM='" + *value +
                   "' is not understood; use auto (the default), always, never (CLBlast only), or the largest "
                   "m*n*k*batch the own kernel should take (e.g. 4e9)");
}

cl_kernel OpenClDevice::gemm_kernel(int variant) {
  std::call_once(gemm_once_[variant], [this, variant] {
    const std::vector<const char*> names{"gemm_tiled"};
    cl_program program =
        build_program_cached(context_, platform_, device_, kTiles[variant].options,
                             kernel_file_text("gemm"), names, label_);
    cl_int status = CL_SUCCESS;
    cl_kernel kernel = clCreateKernel(program, "gemm_tiled", &status);
    if (status != CL_SUCCESS) clReleaseProgram(program);
    TRIDENT_CL_CHECK(status, label_ + ", kernel gemm_tiled");
    gemm_programs_[variant] = program;
    gemm_kernels_[variant] = kernel;
  });
  return gemm_kernels_[variant];
}

TiledGemm OpenClDevice::tiled_args(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                                   float alpha, DeviceMemory a, size_t lda, DeviceMemory b,
                                   size_t ldb, float beta, DeviceMemory c, size_t ldc) {
  TiledGemm t;
  t.m = m; t.n = n; t.k = k;
  t.alpha = alpha; t.beta = beta;
  t.a = a; t.b = b; t.c = c;
  // op(A)[i, p] is A[i, p] (stored [M,K]) or A[p, i] (stored [K,M]); likewise op(B).
  t.a_rs = trans_a ? 1 : lda;
  t.a_cs = trans_a ? lda : 1;
  t.b_rs = trans_b ? 1 : ldb;
  t.b_cs = trans_b ? ldb : 1;
  t.ldc = ldc;
  return t;
}

bool OpenClDevice::own_gemm_takes(double work) const {
  const OwnGemmPolicy policy = own_gemm_policy_from_env();
  if (policy.mode != OwnGemmMode::auto_) return policy.mode == OwnGemmMode::always;
  // Auto leaves CPU devices to CLBlast: on PoCL the 16x16 work-groups with barriers ran the
  // seed CNN 5x slower than CLBlast's kernels (the own kernel is made for GPUs).
  return work <= policy.max_work && (policy.explicit_limit || info_.type == "gpu");
}

bool OpenClDevice::tiled_gemm(const TiledGemm& t) {
  if (own_gemm_policy_from_env().mode == OwnGemmMode::never) return false;
  if (t.m == 0 || t.n == 0 || t.batch == 0) return true;
  const double work = double(t.m) * double(t.n) * double(std::max<size_t>(t.k, 1)) * t.batch;
  if (t.k_last != size_t(-1) && t.k_last > t.k) return false;  // fits_int below checks k
  if (!own_gemm_takes(work)) return false;
  if (!fits_int(t.m, t.a_rs, t.k, t.a_cs) || !fits_int(t.k, t.b_rs, t.n, t.b_cs) ||
      !fits_int(t.m, t.c_plane ? t.n : t.ldc, t.n, 1) || t.k > size_t(INT_MAX / 2))
    return false;  // CLBlast takes matrices whose indices need 64 bits
  const int variant = pick_variant(t, info_.compute_units);
  const GemmTile& tile = kTiles[variant];
  const size_t global[3] = {(t.n + tile.n - 1) / tile.n * kGemmSide,
                            (t.m + tile.m - 1) / tile.m * kGemmSide, t.batch};
  const size_t local[3] = {kGemmSide, kGemmSide, 1};
  // NVIDIA maps the NDRange's 2nd and 3rd dimensions to CUDA grid y and z: at most 65535 groups.
  constexpr size_t kMaxGroupsYZ = 65535;
  if (global[0] > UINT_MAX || global[1] / kGemmSide > kMaxGroupsYZ || t.batch > kMaxGroupsYZ)
    return false;
  const cl_kernel shared = gemm_kernel(variant);  // builds the program on first use
  cl_kernel kernel = kernel_for_launch(gemm_programs_[variant], shared, "gemm_tiled");
  const bool has_bias = t.bias && t.bias_kind != 0;
  const size_t k_last = t.k_last == size_t(-1) ? t.k : t.k_last;
  set_args(kernel, 0, checked_u32(int64_t(t.m), "gemm m"), checked_u32(int64_t(t.n), "gemm n"),
           checked_u32(int64_t(t.k), "gemm k"), checked_u32(int64_t(k_last), "gemm k_last"),
           buffer(t.a, sizeof(float), "GEMM A"),
           cl_int(t.a_rs), cl_int(t.a_cs), cl_ulong(t.a_batch),
           buffer(t.b, sizeof(float), "GEMM B"), cl_int(t.b_rs), cl_int(t.b_cs),
           cl_ulong(t.b_batch), buffer(t.c, sizeof(float), "GEMM C"), cl_int(t.ldc),
           checked_u32(int64_t(t.c_plane), "conv plane"), cl_ulong(t.c_batch), t.alpha, t.beta,
           has_bias ? buffer(t.bias, sizeof(float), "bias") : BufferArg{},
           cl_int(has_bias ? t.bias_kind : 0), cl_int(t.relu));
  submit(kernel, 3, global, local, kTileKernelNames[variant]);
  return true;
}

}  // namespace trident::opencl
