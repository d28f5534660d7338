// GemmEngine's policy and dispatch: split-K, the own kernel or CLBlast, and the epilogue.
#include "trident/backends/opencl/gemm_engine.h"

#include <clblast.h>

#include <algorithm>
#include <cstdlib>

#include "trident/backends/opencl/cl_info.h"
#include "trident/core/env.h"
#include "trident/core/error.h"

namespace trident::opencl {
namespace {

// Auto mode: products up to this many multiply-adds use the own kernel: the seed models' and
// the convolutions' GEMMs, and mlp-big's 784-wide first layer (512x4096x784 forward, 4096x784x512
// weight gradient: 1.6e9, where CLBlast reached only 14 TFLOP/s on an H200 against cuBLAS's 41);
// mlp-big's 4096x4096 layers (8.6e9) stay with CLBlast's tuned large-matrix kernels.
constexpr double kOwnGemmAutoWork = double(1u << 31);

}  // namespace

GemmPolicy GemmPolicy::from_env() {
  GemmPolicy p;
  p.mode = OwnGemmMode::auto_;
  p.max_work = kOwnGemmAutoWork;
  // auto (the default) was measured on an H200 through NVIDIA's driver: faster than CLBlast alone
  // on every model (seed MLP 0.164 -> 0.148 ms/step, mlp-big 4.69 -> 4.41) and the suite passes.
  if (const auto value = env_string("TRIDENT_OPENCL_OWN_GEMM"); value && *value != "auto") {
    char* end = nullptr;
    const double limit = std::strtod(value->c_str(), &end);
    if (*value == "always") {
      p.mode = OwnGemmMode::always;
    } else if (*value == "never") {
      p.mode = OwnGemmMode::never;
    } else if (end && *end == '\0' && limit > 0.0) {
      p.max_work = limit;
      p.explicit_limit = true;
    } else {
      throw UsageError("TRIDENT_OPENCL_OWN_GEMM='" + *value +
                       "' is not understood; use auto (the default), always, never (CLBlast "
                       "only), or the largest m*n*k*batch the own kernel should take (e.g. 4e9)");
    }
  }
  p.split_k = env_int("TRIDENT_OPENCL_SPLIT_K", 0, 1, 64);
  if (const auto value = env_string("TRIDENT_OPENCL_GEMM_TILE"); value && !value->empty()) {
    p.tile = gemm_tile_shape(*value);
    if (p.tile < 0)
      throw UsageError("TRIDENT_OPENCL_GEMM_TILE=" + *value +
                       " is not a tile shape; use one of " + gemm_tile_shape_names() +
                       " (or leave it unset)");
  }
  return p;
}

int nvidia_compute_capability(cl_device_id device) {
  if (device_string(device, CL_DEVICE_EXTENSIONS).find("cl_nv_device_attribute_query") ==
      std::string::npos)
    return 0;
  constexpr cl_device_info kMajor = 0x4000, kMinor = 0x4001;  // CL_DEVICE_COMPUTE_CAPABILITY_*_NV
  cl_uint major = 0, minor = 0;
  if (clGetDeviceInfo(device, kMajor, sizeof major, &major, nullptr) != CL_SUCCESS ||
      clGetDeviceInfo(device, kMinor, sizeof minor, &minor, nullptr) != CL_SUCCESS)
    return 0;
  return int(major * 10 + minor);
}

TensorCores opencl_tensor_cores(cl_device_id device) {
  const auto value = env_string("TRIDENT_OPENCL_TENSOR_CORES");
  if (value && *value == "emulate") return TensorCores::emulated;
  if (!env_flag("TRIDENT_OPENCL_TENSOR_CORES", true)) return TensorCores::off;
  return nvidia_compute_capability(device) >= 80 ? TensorCores::ptx : TensorCores::off;
}

GemmEngine::GemmEngine(ClQueue& queue, const DeviceInfo& info)
    : queue_(queue),
      policy_(GemmPolicy::from_env()),
      is_gpu_(info.type == "gpu"),
      compute_units_(std::max(info.compute_units, 1)),
      tensor_cores_(opencl_tensor_cores(queue.device())) {}

GemmEngine::~GemmEngine() {
  for (auto& by_ab : tile_programs_)
    for (auto& by_c : by_ab)
      for (TileProgram& t : by_c) {
        if (t.kernel) clReleaseKernel(t.kernel);
        if (t.program) clReleaseProgram(t.program);
      }
}

bool GemmEngine::own_kernel_takes(double work) const {
  if (policy_.mode != OwnGemmMode::auto_) return policy_.mode == OwnGemmMode::always;
  // Auto leaves CPU devices to CLBlast: on PoCL the 16x16 work-groups with barriers ran the
  // seed CNN 5x slower than CLBlast's kernels (the own kernel is made for GPUs).
  return work <= policy_.max_work && (policy_.explicit_limit || is_gpu_);
}

bool GemmEngine::takes_16bit(const TiledGemm& t) const {
  const double work =
      double(t.m) * double(t.n) * double(std::max<size_t>(t.k, 1)) * double(t.batch);
  return (tensor_cores_for(t) || own_kernel_takes(work)) && tile_variant(t) >= 0;
}

bool GemmEngine::takes(const TiledGemm& t) const {
  if (t.ab_type != DType::f32) return takes_16bit(t);
  const double work = double(t.m) * double(t.n) * double(std::max<size_t>(t.k, 1)) *
                      double(t.batch);
  return policy_.mode != OwnGemmMode::never && own_kernel_takes(work) && tile_variant(t) >= 0;
}

bool GemmEngine::gemm(const GemmCall& g) {
  TiledGemm t = TiledGemm::of(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b,
                              g.ldb, g.beta, g.c, g.ldc);
  t.ab_type = g.ab_type;
  t.c_type = g.c_type;
  // 16-bit operands: the own kernel for the whole product, or nothing.
  if (g.ab_type != DType::f32 && !takes_16bit(t)) return false;
  if (split_k(g)) return true;  // epilogue included
  // One launch with the bias and ReLU fused, when the own kernel takes this shape; another
  // activation then takes one epilogue pass.
  t.bias = g.bias;
  t.bias_kind = g.bias_kind;
  t.relu = g.activation == UnaryOp::relu;
  const bool tiled_ran = tiled(t);
  if (!tiled_ran && g.ab_type != DType::f32)
    throw BackendError(queue_.label() + ": internal: the own GEMM refused a 16-bit product it "
                       "was checked to take");
  const bool activation_left = g.activation != UnaryOp::identity && !t.relu;
  if (tiled_ran && !activation_left) return true;
  if (!tiled_ran && g.k > 0)
    clblast(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c,
            g.ldc);
  const bool bias_left = !tiled_ran && g.bias_kind != 0;
  const bool rescale = !tiled_ran && g.k == 0;  // CLBlast refuses k == 0: C = beta C here
  if (!bias_left && !rescale && g.activation == UnaryOp::identity) return true;
  queue_.launch_typed(Kernel::gemm_epilogue, g.c_type, LaunchRange::items(g.m * g.n),
                      queue_.buffer(g.c, dtype_size(g.c_type), "GEMM C"), cl_uint(g.ldc),
                      cl_uint(g.m), cl_uint(g.n),
                      bias_left ? queue_.buffer(g.bias, sizeof(float), "bias") : BufferArg{},
                      cl_int(bias_left ? g.bias_kind : 0), cl_int(g.activation),
                      g.activation_alpha, cl_int(rescale), g.beta);
  return true;
}

void GemmEngine::plain(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                       DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
                       DeviceMemory c, size_t ldc) {
  if (tiled(TiledGemm::of(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)))
    return;
  clblast(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void GemmEngine::clblast(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                         DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
                         DeviceMemory c, size_t ldc) {
  using clblast::Transpose;
  const BufferArg A = queue_.buffer(a, sizeof(float), "GEMM A");
  const BufferArg B = queue_.buffer(b, sizeof(float), "GEMM B");
  const BufferArg C = queue_.buffer(c, sizeof(float), "GEMM C");
  const Transpose op_a = trans_a ? Transpose::kYes : Transpose::kNo;
  const Transpose op_b = trans_b ? Transpose::kYes : Transpose::kNo;
  // CLBlast pads awkward shapes through a scratch buffer; without one it would create (and
  // free) a buffer on every call. The size depends on shapes and offsets: remember each answer.
  const auto key = std::make_tuple(int(trans_a), int(trans_b), m, n, k, size_t(A.offset), lda,
                                   size_t(B.offset), ldb, size_t(C.offset), ldc);
  auto known = clblast_scratch_sizes_.find(key);
  if (known == clblast_scratch_sizes_.end()) {
    size_t bytes = 0;
    TRIDENT_CLBLAST_CHECK(clblast::GemmTempBufferSize<float>(
                              clblast::Layout::kRowMajor, op_a, op_b, m, n, k, A.offset, lda,
                              B.offset, ldb, C.offset, ldc, queue_.queue(), bytes),
                          queue_.label());
    known = clblast_scratch_sizes_.emplace(key, bytes).first;
  }
  const size_t scratch_bytes = known->second;
  queue_.grow_pair(clblast_scratch_, scratch_bytes);
  const ClBuffer& scratch = clblast_scratch_[queue_.on_side()];
  const auto run = [=, &scratch] {
    cl_event event = nullptr;  // CLBlast's event covers its last kernel only
    TRIDENT_CLBLAST_CHECK(
        clblast::Gemm<float>(clblast::Layout::kRowMajor, op_a, op_b, m, n, k, alpha, A.mem,
                             A.offset, lda, B.mem, B.offset, ldb, beta, C.mem, C.offset, ldc,
                             queue_.queue(), queue_.profile_slot(event),
                             scratch_bytes > 0 ? scratch.mem : nullptr),
        queue_.label());
    queue_.profiled("clblast_gemm (last kernel)", event);
  };
  if (!queue_.record(run)) run();
}

void GemmEngine::strided_batched(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                                 float alpha, DeviceMemory a, size_t lda, size_t a_stride,
                                 DeviceMemory b, size_t ldb, size_t b_stride, DeviceMemory c,
                                 size_t ldc, size_t c_stride, size_t batch, size_t k_last,
                                 DType ab_type) {
  if (batch == 0) return;
  TiledGemm t = TiledGemm::of(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
  t.ab_type = ab_type;
  t.batch = batch;
  t.k_last = k_last;
  t.a_batch = a_stride;
  t.b_batch = b_stride;
  t.c_batch = c_stride;
  if (tiled(t)) return;
  if (ab_type != DType::f32)
    throw BackendError(queue_.label() + ": internal: the own GEMM refused 16-bit split-K slices");
  // CLBlast: the entries alike in one call, a different last one on its own.
  const size_t alike = k_last == k ? batch : batch - 1;
  if (k_last != k) {
    const size_t last = batch - 1;
    clblast(trans_a, trans_b, m, n, k_last, alpha, a.at(last * a_stride * sizeof(float)), lda,
            b.at(last * b_stride * sizeof(float)), ldb, 0.0f,
            c.at(last * c_stride * sizeof(float)), ldc);
  }
  if (alike == 0) return;
  using clblast::Transpose;
  const BufferArg A = queue_.buffer(a, sizeof(float), "batched GEMM A");
  const BufferArg B = queue_.buffer(b, sizeof(float), "batched GEMM B");
  const BufferArg C = queue_.buffer(c, sizeof(float), "batched GEMM C");
  const auto run = [=] {
    cl_event event = nullptr;  // CLBlast's event covers its last kernel only
    TRIDENT_CLBLAST_CHECK(
        clblast::GemmStridedBatched<float>(
            clblast::Layout::kRowMajor, trans_a ? Transpose::kYes : Transpose::kNo,
            trans_b ? Transpose::kYes : Transpose::kNo, m, n, k, alpha, A.mem, A.offset, lda,
            a_stride, B.mem, B.offset, ldb, b_stride, 0.0f, C.mem, C.offset, ldc, c_stride,
            alike, queue_.queue(), queue_.profile_slot(event)),
        queue_.label());
    queue_.profiled("clblast_gemm_batched (last kernel)", event);
  };
  if (!queue_.record(run)) run();
}

// Split-K: K cut into S slices, one strided batched GEMM into partial products [S, M, N] kept in
// a persistent scratch, then one split_k_sum launch adds them up with the whole epilogue
// (beta C, bias, activation). It pays where one GEMM would keep most of the device idle, each
// work-group walking a long K loop: a 10-class head over 4096 features (512x10x4096), or the
// seed MLP's first layer (200x512x784: 32 64x64 tiles for 132 compute units).
// TRIDENT_OPENCL_SPLIT_K: auto (default), or S (1: never) for every product with K >= 2S.
size_t GemmEngine::split_k_slices(const GemmCall& g) const {
  const size_t m = g.m, n = g.n, k = g.k;
  if (policy_.split_k > 0) return k >= size_t(2 * policy_.split_k) ? size_t(policy_.split_k) : 1;
  // Long K, small C (CLBlast or the own kernel): slices of 512.
  if (k >= 2048 && m * n <= 16384) return std::min<size_t>(k / 512, 16);
  // The own kernel's shapes: more than half the compute units idle with 64x64 tiles, and work
  // enough that a second launch (~4 us through NVIDIA's driver) is worth it; slices >= 128.
  const double work = double(m) * double(n) * double(k);
  const size_t tiles = ((m + 63) / 64) * ((n + 63) / 64);
  const size_t units = size_t(compute_units_);
  // (Splitting the small ones too - 200x10x512, the MLP's head - measured faster in a loop of
  // GEMMs but slower in a training step on an H100: 0.104 -> 0.110-0.122 ms/step.)
  if (!own_kernel_takes(work) || work < double(1 << 25) || tiles * 2 > units || k < 256) return 1;
  return std::min<size_t>({(units + tiles - 1) / tiles, k / 128, 8});
}

bool GemmEngine::split_k(const GemmCall& g) {
  const size_t slices = split_k_slices(g);
  if (slices < 2) return false;
  const size_t m = g.m, n = g.n, k = g.k;
  const size_t slice_k = k / slices;
  const size_t done = slices * slice_k, rows = slices + (k > done ? 1 : 0);
  queue_.grow_pair(split_k_scratch_, rows * m * n * sizeof(float));
  const DeviceMemory partial{split_k_scratch_[queue_.on_side()].mem, 0};
  // Slice s of op(A) is columns [s*slice_k, ...): a step of slice_k elements along a row of A,
  // or slice_k rows of the stored [K, M]; likewise rows of op(B).
  const size_t a_step = g.trans_a ? slice_k * g.lda : slice_k;
  const size_t b_step = g.trans_b ? slice_k : slice_k * g.ldb;
  // The tail slice (k - done terms, starting at slice `slices`) is the last batch entry.
  strided_batched(g.trans_a, g.trans_b, m, n, slice_k, g.alpha, g.a, g.lda, a_step, g.b, g.ldb,
                  b_step, partial, n, m * n, rows, rows > slices ? k - done : slice_k,
                  g.ab_type);
  queue_.launch_typed(Kernel::split_k_sum, g.c_type, LaunchRange::items(m * n),
                      queue_.buffer(partial, sizeof(float), "split-K partial sums"),
                      cl_uint(rows), cl_uint(m), cl_uint(n),
                      queue_.buffer(g.c, dtype_size(g.c_type), "GEMM C"), cl_uint(g.ldc), g.beta,
                      g.bias_kind ? queue_.buffer(g.bias, sizeof(float), "bias") : BufferArg{},
                      cl_int(g.bias_kind), cl_int(g.activation), g.activation_alpha);
  return true;
}

}  // namespace trident::opencl
