// The own tiled GEMM (kernels/opencl/gemm.cl): which tile shape, whether a shape fits its
// 32-bit indexing, and its launch: one enqueue with the bias and ReLU fused, no host-side
// scratch; A and B in float32, float16 or bfloat16, C in float32 or 16-bit, float accumulation.
#include <algorithm>
#include <climits>
#include <string>

#include "trident/backends/opencl/gemm_engine.h"
#include "trident/core/error.h"
#include "trident/core/log.h"

namespace trident::opencl {
namespace {

// Tile shapes (TS_M x TS_N, K slice); each is a separate program (-D options; one more per
// operand types), so every loop bound in the kernel is a compile-time constant and the
// accumulators stay in registers. The small square tile serves long-K products with few output
// tiles (200x10x512): a deep K slice halves the number of latency-bound load/barrier rounds.
// The wide ones serve a convolution's products, whose output has few rows (its 32 to 128
// channels) and hundreds of thousands of columns (the batch's pixels).
struct GemmTile {
  size_t m, n, k;
  const char* name;  // TRIDENT_OPENCL_GEMM_TILE's value for it
  const char* options;
};
// The last entry is the tensor-core kernel (gemm.cl under -DMMA: 16-bit A and B on NVIDIA GPUs of
// compute capability 8.0+, work-groups of 128), never picked by pick_variant.
const GemmTile kTiles[kGemmTileShapes + 1] = {
    {32, 32, 32, "32", "-cl-std=CL1.2 -DTS_M=32 -DTS_N=32 -DTS_K=32"},
    {64, 64, 16, "64", "-cl-std=CL1.2 -DTS_M=64 -DTS_N=64 -DTS_K=16"},
    {128, 128, 8, "128", "-cl-std=CL1.2 -DTS_M=128 -DTS_N=128 -DTS_K=8"},
    {32, 128, 16, "32x128", "-cl-std=CL1.2 -DTS_M=32 -DTS_N=128 -DTS_K=16"},
    {64, 64, 32, "", "-cl-std=CL1.2 -DTS_M=64 -DTS_N=64 -DTS_K=32 -DMMA"},
};
const char* const kTileKernelNames[kGemmTileShapes + 1] = {
    "gemm_tiled (32x32 tiles)", "gemm_tiled (64x64 tiles)", "gemm_tiled (128x128 tiles)",
    "gemm_tiled (32x128 tiles)", "gemm_tiled (tensor cores, 64x64 tiles)"};
constexpr int kMmaVariant = kGemmTileShapes;
constexpr size_t kGemmSide = 16;      // work-groups are 16 x 16 (gemm.cl's GEMM_SIDE)
constexpr size_t kMmaThreads = 128;   // the tensor-core kernel's work-groups (MMA_THREADS)

size_t groups_for(const GemmTile& tile, const TiledGemm& t) {
  return (t.m + tile.m - 1) / tile.m * ((t.n + tile.n - 1) / tile.n) * t.batch;
}

// The first of these tiles that gives half the compute units a work-group (one work-group per
// compute unit is not starved: its loads are prefetched) and wastes at most a third of its work
// on edge padding (a conv's 20 x 12800 output would be 84% padding in 128-row tiles), else
// the 32x32 tile; `forced` (TRIDENT_OPENCL_GEMM_TILE) picks one (tests run every variant).
// The order is measured (H200, NVIDIA's driver, the ResNet's convolution products in float32,
// GFLOP/s): 32x128 where 32 rows hold the output (32 x 200704 x 288: 20.2k against 12.6k in
// 32x32 and 12.8k in 64x64 tiles), else 64x64 (288 x 200704 x 32: 13.5k against 12.1k in
// 128x128; 128 x 12544 x 1152: 24.4k against 21.7k; 576 x 50176 x 64: 20.9k against 19.2k; the
// ResNet's step, every product in 64x64 tiles: 5.52 ms against 5.70 as the largest tile that
// passed was picked). 128x128 (and 64x128 and 128x64 tiles, tried) were never faster than both
// by more than 3%; it stays for TRIDENT_OPENCL_GEMM_TILE.
int pick_variant(const TiledGemm& t, int compute_units, int forced) {
  if (forced >= 0) return forced;
  constexpr int kSquare32 = 0, kSquare64 = 1, kWide32 = 3;
  const size_t wanted = size_t(std::max(compute_units / 2, 1));
  const double useful = double(t.m) * double(t.n) * double(t.batch);
  const auto padded = [&](int v) {
    return double(groups_for(kTiles[v], t)) * double(kTiles[v].m) * double(kTiles[v].n);
  };
  const auto fits = [&](int v, double reference) {
    return groups_for(kTiles[v], t) >= wanted && padded(v) <= 1.5 * reference;
  };
  // The wide tile pads rows as the 32x32 one does: only its column padding counts.
  if (t.m <= kTiles[kWide32].m && fits(kWide32, padded(kSquare32))) return kWide32;
  if (fits(kSquare64, useful)) return kSquare64;
  return kSquare32;
}

// Whether (rows-1)*row_stride + (cols-1)*col_stride, the last index the kernel forms in one
// matrix, stays within the kernel's 31-bit int arithmetic.
bool fits_int(size_t rows, size_t row_stride, size_t cols, size_t col_stride) {
  const double last = double(rows ? rows - 1 : 0) * double(row_stride) +
                      double(cols ? cols - 1 : 0) * double(col_stride);
  return last < double(INT_MAX) && row_stride < size_t(INT_MAX) && col_stride < size_t(INT_MAX);
}

}  // namespace

int gemm_tile_shape(const std::string& name) {
  for (int v = 0; v < kGemmTileShapes; ++v)
    if (name == kTiles[v].name) return v;
  return -1;
}

std::string gemm_tile_shape_names() {
  std::string names;
  for (int v = 0; v < kGemmTileShapes; ++v)
    names += (v ? ", " : "") + std::string(kTiles[v].name);
  return names;
}

TiledGemm TiledGemm::of(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                        DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
                        DeviceMemory c, size_t ldc) {
  TiledGemm t;
  t.m = m;
  t.n = n;
  t.k = k;
  t.alpha = alpha;
  t.beta = beta;
  t.a = a;
  t.b = b;
  t.c = c;
  // op(A)[i, p] is A[i, p] (stored [M,K]) or A[p, i] (stored [K,M]); likewise op(B).
  t.a_rs = trans_a ? 1 : lda;
  t.a_cs = trans_a ? lda : 1;
  t.b_rs = trans_b ? 1 : ldb;
  t.b_cs = trans_b ? ldb : 1;
  t.ldc = ldc;
  return t;
}

GemmEngine::TileProgram& GemmEngine::tile_program(int variant, DType ab_type, DType c_type) {
  const auto index = [](DType t) { return t == DType::f16 ? 1 : t == DType::bf16 ? 2 : 0; };
  const char* const kTypeNames[] = {"", "F16", "BF16"};
  TileProgram& tp = tile_programs_[variant][index(ab_type)][index(c_type)];
  std::call_once(tp.once, [&] {
    std::string options = kTiles[variant].options;
    if (index(ab_type)) options += std::string(" -DAB_") + kTypeNames[index(ab_type)];
    if (index(c_type)) options += std::string(" -DC_") + kTypeNames[index(c_type)];
    if (variant == kMmaVariant && tensor_cores_ == TensorCores::emulated)
      options += " -DMMA_EMULATE";
    cl_program program = queue_.build_program(
        options, kernel_file_text("storage") + kernel_file_text("gemm"), {"gemm_tiled"});
    cl_int status = CL_SUCCESS;
    cl_kernel kernel = clCreateKernel(program, "gemm_tiled", &status);
    if (status != CL_SUCCESS) clReleaseProgram(program);
    TRIDENT_CL_CHECK(status, queue_.label() + ", kernel gemm_tiled");
    tp.program = program;
    tp.kernel = kernel;
  });
  return tp;
}

bool GemmEngine::tensor_cores_for(const TiledGemm& t) const {
  if (tensor_cores_ == TensorCores::off || t.ab_type == DType::f32) return false;
  // The first product of these types builds its program; a driver that refuses the inline PTX
  // turns the path off for good (the float-arithmetic kernels take over) and says so once.
  try {
    const_cast<GemmEngine*>(this)->tile_program(kMmaVariant, t.ab_type, t.c_type);
    return true;
  } catch (const std::exception& e) {
    tensor_cores_ = TensorCores::off;
    log_warning(queue_.label() + ": tensor cores through inline PTX are off: " + e.what());
    return false;
  }
}

int GemmEngine::tile_variant(const TiledGemm& t) const {
  if (t.k_last != size_t(-1) && t.k_last > t.k) return -1;  // fits_int below checks k
  if (!fits_int(t.m, t.a_rs, t.k, t.a_cs) || !fits_int(t.k, t.b_rs, t.n, t.b_cs) ||
      !fits_int(t.m, t.c_plane ? t.n : t.ldc, t.n, 1) || t.k > size_t(INT_MAX / 2))
    return -1;  // CLBlast takes matrices whose indices need 64 bits
  const int variant =
      tensor_cores_for(t) ? kMmaVariant : pick_variant(t, compute_units_, policy_.tile);
  const GemmTile& tile = kTiles[variant];
  // NVIDIA maps the NDRange's 2nd and 3rd dimensions to CUDA grid y and z: at most 65535 groups.
  constexpr size_t kMaxGroupsYZ = 65535;
  const size_t side = variant == kMmaVariant ? kMmaThreads : kGemmSide;
  if ((t.n + tile.n - 1) / tile.n * side > UINT_MAX ||
      (t.m + tile.m - 1) / tile.m > kMaxGroupsYZ || t.batch > kMaxGroupsYZ)
    return -1;
  return variant;
}

bool GemmEngine::tiled(const TiledGemm& t) {
  const bool float_operands = t.ab_type == DType::f32;
  if (float_operands && policy_.mode == OwnGemmMode::never) return false;
  if (t.m == 0 || t.n == 0 || t.batch == 0) return true;
  const double work = double(t.m) * double(t.n) * double(std::max<size_t>(t.k, 1)) * t.batch;
  if (float_operands && !own_kernel_takes(work)) return false;
  const int variant = tile_variant(t);
  if (variant < 0) return false;
  const GemmTile& tile = kTiles[variant];
  const bool mma = variant == kMmaVariant;
  LaunchRange range;
  range.dims = 3;
  range.global[0] = (t.n + tile.n - 1) / tile.n * (mma ? kMmaThreads : kGemmSide);
  range.global[1] = (t.m + tile.m - 1) / tile.m * (mma ? 1 : kGemmSide);
  range.global[2] = t.batch;
  range.local[0] = mma ? kMmaThreads : kGemmSide;
  range.local[1] = mma ? 1 : kGemmSide;
  range.local[2] = 1;
  const TileProgram& program = tile_program(variant, t.ab_type, t.c_type);  // built on first use
  const bool has_bias = t.bias && t.bias_kind != 0;
  const size_t k_last = t.k_last == size_t(-1) ? t.k : t.k_last;
  const size_t ab_size = dtype_size(t.ab_type), c_size = dtype_size(t.c_type);
  queue_.launch_from(
      program.program, program.kernel, "gemm_tiled", kTileKernelNames[variant], range,
      cl_uint(t.m), cl_uint(t.n), cl_uint(t.k), cl_uint(k_last),
      queue_.buffer(t.a, ab_size, "GEMM A"), cl_int(t.a_rs), cl_int(t.a_cs),
      cl_ulong(t.a_batch), queue_.buffer(t.b, ab_size, "GEMM B"), cl_int(t.b_rs),
      cl_int(t.b_cs), cl_ulong(t.b_batch), queue_.buffer(t.c, c_size, "GEMM C"),
      cl_int(t.ldc), cl_uint(t.c_plane), cl_ulong(t.c_batch), t.alpha, t.beta,
      has_bias ? queue_.buffer(t.bias, sizeof(float), "bias") : BufferArg{},
      cl_int(has_bias ? t.bias_kind : 0), cl_int(t.relu));
  return true;
}

}  // namespace trident::opencl
