// Linear algebra on CUDA: row-major GEMM through cuBLAS (plain) or cuBLASLt (bias and/or ReLU
// fused in the epilogue, with plans cached per shape), bias gradients and axpby.
//
// Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: every call swaps
// the operands and passes (n, m, k). A per-column bias of C is then a per-row bias of C^T, which
// is what cuBLASLt's BIAS epilogues add (a vector of length N).
#include <climits>

#include "trident/backends/cuda/cuda_device.h"
#include "trident/core/error.h"
#include "trident/kernels/cuda/cuda_kernels.h"

namespace trident::cuda {
namespace {

int checked_int(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw ShapeError(std::string("CUDA gemm: ") + what + " = " + std::to_string(value) +
                     " does not fit cuBLAS's 32-bit sizes; split the operation");
  return static_cast<int>(value);
}

// The largest power of two (up to 256) dividing the address: cuBLASLt must only pick kernels
// that work for the actual alignment (parameters sit at any float offset of a flat buffer).
uint32_t alignment_of(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 4 && address % alignment != 0) alignment /= 2;
  return alignment;
}

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

void CudaDevice::sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                       int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                       int64_t batch) {
  const int M = checked_int(m, "m"), N = checked_int(n, "n"), K = checked_int(k, "k");
  const int LDA = checked_int(lda, "lda"), LDB = checked_int(ldb, "ldb");
  const int LDC = checked_int(ldc, "ldc");
  if (batch == 1) {
    TRIDENT_CUDA_CHECK(cublasSgemm(blas_, op(trans_b), op(trans_a), N, M, K, &alpha, b, LDB, a,
                                   LDA, &beta, c, LDC),
                       ordinal_);
  } else {
    TRIDENT_CUDA_CHECK(cublasSgemmStridedBatched(blas_, op(trans_b), op(trans_a), N, M, K, &alpha,
                                                 b, LDB, stride_b, a, LDA, stride_a, &beta, c,
                                                 LDC, stride_c, checked_int(batch, "batch")),
                       ordinal_);
  }
}

const LtPlan& CudaDevice::lt_plan(const LtKey& key, const float* bias) {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  LtPlan& plan = plans_[key];  // stays (unusable) if anything below throws
  const cublasComputeType_t compute = tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
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
  // Column-major views of the stored matrices (see the top of this file): first operand is B,
  // stored [K,N] row-major = [N,K] column-major (or [K,N] when trans_b); second is A likewise.
  const uint64_t b_rows = key.trans_b ? key.k : key.n, b_cols = key.trans_b ? key.n : key.k;
  const uint64_t a_rows = key.trans_a ? key.m : key.k, a_cols = key.trans_a ? key.k : key.m;
  TRIDENT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, b_rows, b_cols, key.ldb),
                     ordinal_);
  TRIDENT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, a_rows, a_cols, key.lda),
                     ordinal_);
  TRIDENT_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, key.n, key.m, key.ldc),
                     ordinal_);

  cublasLtMatmulPreference_t preference = nullptr;
  TRIDENT_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&preference), ordinal_);
  const uint64_t workspace = blas_workspace_bytes_;
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
      result.workspaceSize <= blas_workspace_bytes_) {
    plan.algo = result.algo;
    plan.workspace_bytes = result.workspaceSize;
    plan.usable = true;
  }
  return plan;
}

void CudaDevice::gemm(const GemmArgs& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0)
    throw ShapeError(info_.id() + ": gemm with negative size m=" + std::to_string(g.m) +
                     " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k));
  if (g.m == 0 || g.n == 0) return;
  // A zero stride means packed: A is [M,K] (or [K,M]), B is [K,N] (or [N,K]), C is [M,N].
  const int64_t lda = g.lda ? g.lda : (g.trans_a ? g.m : g.k);
  const int64_t ldb = g.ldb ? g.ldb : (g.trans_b ? g.k : g.n);
  const int64_t ldc = g.ldc ? g.ldc : g.n;
  const float* a = device_ptr<const float>(g.a);
  const float* b = device_ptr<const float>(g.b);
  float* c = device_ptr<float>(g.c);
  const float* bias =
      g.bias_kind != BiasKind::none ? device_ptr<const float>(g.bias) : nullptr;
  make_current();
  if (g.k == 0) {  // C = beta C (+ bias, ReLU): cuBLAS has nothing to multiply
    launch_gemm_epilogue(stream_, c, ldc, g.m, g.n, bias, g.bias_kind, g.relu, true, g.beta);
    return check_launch("gemm_epilogue");
  }
  // cuBLASLt adds a per-column bias (16-byte aligned, as its epilogue loads need) and/or ReLU.
  const bool lt_bias = bias && g.bias_kind == BiasKind::per_column && alignment_of(bias) >= 16;
  if ((bias || g.relu) && (lt_bias || !bias)) {
    const LtKey key{g.m, g.n, g.k, lda, ldb, ldc, alignment_of(a), alignment_of(b),
                    alignment_of(c), uint8_t(g.trans_a), uint8_t(g.trans_b), uint8_t(lt_bias),
                    uint8_t(g.relu)};
    const LtPlan& plan = lt_plan(key, bias);
    if (plan.usable) {
      if (lt_bias)
        TRIDENT_CUDA_CHECK(cublasLtMatmulDescSetAttribute(plan.operation,
                                                          CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                          &bias, sizeof bias),
                           ordinal_);
      TRIDENT_CUDA_CHECK(cublasLtMatmul(lt_, plan.operation, &g.alpha, b, plan.a, a, plan.b,
                                        &g.beta, c, plan.c, c, plan.c, &plan.algo,
                                        blas_workspace_, plan.workspace_bytes, stream_),
                         ordinal_);
      return;
    }
  }
  sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a, lda, 0, b, ldb, 0, g.beta, c, ldc, 0);
  if (bias || g.relu) {
    launch_gemm_epilogue(stream_, c, ldc, g.m, g.n, bias, g.bias_kind, g.relu, false, g.beta);
    check_launch("gemm_epilogue");
  }
}

void CudaDevice::sum_rows(DeviceMemory dy, int64_t rows, int64_t cols, DeviceMemory db,
                          float beta) {
  if (rows < 0 || cols < 0)
    throw ShapeError(info_.id() + ": sum_rows with negative size " + std::to_string(rows) + "x" +
                     std::to_string(cols));
  make_current();
  launch_sum_rows(stream_, device_ptr<const float>(dy), rows, cols, device_ptr<float>(db), beta);
  check_launch("sum_rows");
}

void CudaDevice::axpby(DeviceMemory x, DeviceMemory y, int64_t n, float a, float b) {
  make_current();
  launch_axpby(stream_, device_ptr<const float>(x), device_ptr<float>(y), n, a, b);
  check_launch("axpby");
}

}  // namespace trident::cuda
