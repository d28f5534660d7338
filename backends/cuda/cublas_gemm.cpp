// CublasGemm: cuBLAS / cuBLASLt handles, the persistent workspace and the cuBLASLt plan cache.
#include "trident/backends/cuda/cublas_gemm.h"

#include <nvtx3/nvToolsExtMemCudaRt.h>

#include <climits>
#include <string>

#include "trident/backends/cuda/cuda_check.h"
#include "trident/core/error.h"

namespace trident::cuda {
namespace {

// cuBLAS and cuBLASLt scratch: NVIDIA's recommendation for Hopper is 32 MiB.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

int checked_int(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw ShapeError(std::string("CUDA gemm: ") + what + " = " + std::to_string(value) +
                     " does not fit cuBLAS's 32-bit sizes; split the operation");
  return static_cast<int>(value);
}

// The largest power of two (up to 256) dividing the address: cuBLASLt must only pick kernels
// that work for the actual alignment (parameters sit at any element offset of a flat buffer).
uint32_t alignment_of(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 2 && address % alignment != 0) alignment /= 2;
  return alignment;
}

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

cudaDataType_t cuda_type(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : t == DType::f16 ? CUDA_R_16F : CUDA_R_32F;
}

// Tells compute-sanitizer's initcheck that C was written: it does not see the stores of some
// cuBLAS kernels (a strided-batched bf16 product of 32 x 784 x 9, the ResNet stem's convolution,
// was reported element for element as uninitialised when read next, though a sentinel shows that
// every element was written). A dense C (rows ldc = n apart, matrices m * n apart) only: a C with
// padding between rows keeps the padding's state. Without a tool attached this is one load and
// a branch (NVTX's injection pointer is null).
void mark_written(const GemmCall& g, cudaStream_t stream) {
  const bool dense = g.ldc == g.n && (g.batch == 1 || g.stride_c == g.m * g.ldc);
  if (!dense || g.m == 0 || g.n == 0) return;
  static nvtxDomainHandle_t domain = nvtxDomainCreateA("Trident");
  nvtxMemVirtualRangeDesc_t range{size_t(g.batch * g.m * g.n) * dtype_size(g.c_type), g.c};
  nvtxMemMarkInitializedBatch_t written{};
  written.extCompatID = NVTX_EXT_COMPATID_MEM;
  written.structSize = sizeof written;
  written.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  written.regionDescCount = 1;
  written.regionDescElementSize = sizeof range;
  written.regionDescElements = &range;
  nvtxMemCudaMarkInitialized(domain, stream, 0, &written);
}

}  // namespace

bool CublasGemm::PlanKey::operator==(const PlanKey& o) const {
  return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
         align_a == o.align_a && align_b == o.align_b && align_c == o.align_c &&
         trans_a == o.trans_a && trans_b == o.trans_b && bias == o.bias && relu == o.relu &&
         ab_type == o.ab_type && c_type == o.c_type && tf32 == o.tf32;
}

size_t CublasGemm::PlanKeyHash::operator()(const PlanKey& key) const {
  const uint64_t words[] = {uint64_t(key.m), uint64_t(key.n), uint64_t(key.k),
                            uint64_t(key.lda), uint64_t(key.ldb), uint64_t(key.ldc),
                            uint64_t(key.align_a) | uint64_t(key.align_b) << 16 |
                                uint64_t(key.align_c) << 32 | uint64_t(key.trans_a) << 48 |
                                uint64_t(key.trans_b) << 50 | uint64_t(key.bias) << 52 |
                                uint64_t(key.relu) << 54 | uint64_t(key.ab_type) << 56 |
                                uint64_t(key.c_type) << 59 | uint64_t(key.tf32) << 62};
  uint64_t h = 1469598103934665603ull;
  for (uint64_t w : words) h = (h ^ w) * 1099511628211ull;
  return size_t(h);
}

CublasGemm::CublasGemm(int ordinal, cudaStream_t stream, bool tf32)
    : ordinal_(ordinal), tf32_(tf32), stream_(stream) {
  try {
    TRIDENT_CUDA_CHECK(cublasCreate(&blas_), ordinal_);
    TRIDENT_CUDA_CHECK(cublasSetStream(blas_, stream_), ordinal_);
    TRIDENT_CUDA_CHECK(
        cublasSetMathMode(blas_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        ordinal_);
    TRIDENT_CUDA_CHECK(cublasLtCreate(&lt_), ordinal_);
    TRIDENT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes), ordinal_);
    workspace_bytes_ = kWorkspaceBytes;
    TRIDENT_CUDA_CHECK(cublasSetWorkspace(blas_, workspace_, workspace_bytes_), ordinal_);
  } catch (...) {
    if (lt_) cublasLtDestroy(lt_);
    if (blas_) cublasDestroy(blas_);
    if (workspace_) cudaFree(workspace_);
    throw;
  }
}

// The owner has made the device current and drained the stream.
CublasGemm::~CublasGemm() {
  for (auto& entry : plans_) {
    Plan& plan = entry.second;
    if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
    if (plan.operation) cublasLtMatmulDescDestroy(plan.operation);
  }
  cublasLtDestroy(lt_);
  cublasDestroy(blas_);
  cudaFree(workspace_);
}

cublasComputeType_t CublasGemm::compute_type(DType ab_type, bool tf32) const {
  if (ab_type != DType::f32) return CUBLAS_COMPUTE_32F;  // 16-bit: tensor cores, float32 sums
  return tf32_ || tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

void CublasGemm::gemm(const GemmCall& g) {
  launch(g);
  mark_written(g, stream_);
}

void CublasGemm::launch(const GemmCall& g) {
  const int M = checked_int(g.m, "m"), N = checked_int(g.n, "n"), K = checked_int(g.k, "k");
  const int LDA = checked_int(g.lda, "lda"), LDB = checked_int(g.ldb, "ldb");
  const int LDC = checked_int(g.ldc, "ldc");
  // float32 as the device is set (TF32 or not): cublasSgemm, as before 16-bit types existed.
  if (g.ab_type == DType::f32 && g.c_type == DType::f32 && (tf32_ || !g.tf32)) {
    const float* a = static_cast<const float*>(g.a);
    const float* b = static_cast<const float*>(g.b);
    float* c = static_cast<float*>(g.c);
    if (g.batch == 1) {
      TRIDENT_CUDA_CHECK(cublasSgemm(blas_, op(g.trans_b), op(g.trans_a), N, M, K, &g.alpha, b,
                                     LDB, a, LDA, &g.beta, c, LDC),
                         ordinal_);
      return;
    }
    TRIDENT_CUDA_CHECK(cublasSgemmStridedBatched(blas_, op(g.trans_b), op(g.trans_a), N, M, K,
                                                 &g.alpha, b, LDB, g.stride_b, a, LDA,
                                                 g.stride_a, &g.beta, c, LDC, g.stride_c,
                                                 checked_int(g.batch, "batch")),
                       ordinal_);
    return;
  }
  const cudaDataType_t ab = cuda_type(g.ab_type), ct = cuda_type(g.c_type);
  const cublasComputeType_t compute = compute_type(g.ab_type, g.tf32);
  if (g.batch == 1) {
    TRIDENT_CUDA_CHECK(cublasGemmEx(blas_, op(g.trans_b), op(g.trans_a), N, M, K, &g.alpha, g.b,
                                    ab, LDB, g.a, ab, LDA, &g.beta, g.c, ct, LDC, compute,
                                    CUBLAS_GEMM_DEFAULT),
                       ordinal_);
    return;
  }
  TRIDENT_CUDA_CHECK(cublasGemmStridedBatchedEx(blas_, op(g.trans_b), op(g.trans_a), N, M, K,
                                                &g.alpha, g.b, ab, LDB, g.stride_b, g.a, ab, LDA,
                                                g.stride_a, &g.beta, g.c, ct, LDC, g.stride_c,
                                                checked_int(g.batch, "batch"), compute,
                                                CUBLAS_GEMM_DEFAULT),
                     ordinal_);
}

bool CublasGemm::gemm_bias_relu(const GemmCall& g, const void* bias, bool relu) {
  if (bias && alignment_of(bias) < 16) return false;  // its epilogue loads need 16 bytes
  const PlanKey key{g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    alignment_of(g.a),
                    alignment_of(g.b),
                    alignment_of(g.c),
                    uint8_t(g.trans_a),
                    uint8_t(g.trans_b),
                    uint8_t(bias != nullptr),
                    uint8_t(relu),
                    uint8_t(g.ab_type),
                    uint8_t(g.c_type),
                    uint8_t(g.tf32)};
  const Plan& p = plan(key, bias);
  if (!p.usable) return false;
  if (bias)
    TRIDENT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
                           p.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                       ordinal_);
  TRIDENT_CUDA_CHECK(cublasLtMatmul(lt_, p.operation, &g.alpha, g.b, p.a, g.a, p.b, &g.beta, g.c,
                                    p.c, g.c, p.c, &p.algo, workspace_, p.workspace_bytes,
                                    stream_),
                     ordinal_);
  mark_written(g, stream_);
  return true;
}

const CublasGemm::Plan& CublasGemm::plan(const PlanKey& key, const void* bias) {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  Plan& plan = plans_[key];  // stays (unusable) if anything below throws
  const cublasComputeType_t compute = compute_type(DType(key.ab_type), key.tf32 != 0);
  const cudaDataType_t ab = cuda_type(DType(key.ab_type)), ct = cuda_type(DType(key.c_type));
  TRIDENT_CUDA_CHECK(cublasLtMatmulDescCreate(&plan.operation, compute, CUDA_R_32F), ordinal_);
  const cublasOperation_t first_op = op(key.trans_b), second_op = op(key.trans_a);
  TRIDENT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &first_op, sizeof first_op),
                     ordinal_);
  TRIDENT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &second_op, sizeof second_op),
                     ordinal_);
  const cublasLtEpilogue_t epilogue = key.bias ? (key.relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                           : CUBLASLT_EPILOGUE_BIAS)
                                               : CUBLASLT_EPILOGUE_RELU;
  TRIDENT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                    &epilogue, sizeof epilogue),
                     ordinal_);
  if (key.bias)
    TRIDENT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(
                           plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                       ordinal_);
  // Column-major views of the stored matrices (see the top of cublas_gemm.h): the first operand
  // is B, stored [K,N] row-major = [N,K] column-major (or [K,N] when trans_b); second is A.
  const uint64_t b_rows = key.trans_b ? key.k : key.n, b_cols = key.trans_b ? key.n : key.k;
  const uint64_t a_rows = key.trans_a ? key.m : key.k, a_cols = key.trans_a ? key.k : key.m;
  TRIDENT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.a, ab, b_rows, b_cols, key.ldb), ordinal_);
  TRIDENT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.b, ab, a_rows, a_cols, key.lda), ordinal_);
  TRIDENT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.c, ct, key.n, key.m, key.ldc), ordinal_);

  cublasLtMatmulPreference_t preference = nullptr;
  TRIDENT_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&preference), ordinal_);
  const uint64_t workspace = workspace_bytes_;
  const uint32_t align_first = key.align_b, align_second = key.align_a, align_c = key.align_c;
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first, sizeof align_first);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second,
        sizeof align_second);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(lt_, plan.operation, plan.a, plan.b, plan.c, plan.c,
                                            preference, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(preference);
  // No algorithm for this shape (NOT_SUPPORTED, or none returned): the plain path serves it.
  if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED)
    TRIDENT_CUDA_CHECK(status, ordinal_);
  if (status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
      result.workspaceSize <= workspace_bytes_) {
    plan.algo = result.algo;
    plan.workspace_bytes = result.workspaceSize;
    plan.usable = true;
  }
  return plan;
}

}  // namespace trident::cuda
