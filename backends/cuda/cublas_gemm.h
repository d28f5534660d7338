// The GEMM policy of a CudaDevice: cuBLAS for plain products (and strided batches of them), and
// cuBLASLt where a bias and/or ReLU can ride in the epilogue, with one persistent workspace (no
// GEMM allocates, so every product can be captured in a CUDA graph) and plans cached per shape.
//
// Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: every call swaps
// the operands and passes (n, m, k). A per-column bias of C is then a per-row bias of C^T, which
// is what cuBLASLt's BIAS epilogues add (a vector of length N).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace trident::cuda {

// One row-major product C[m, n] = alpha * op(A) op(B) + beta * C with device pointers and row
// strides; `batch` matrices stride_* floats apart (batch 1: one product).
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const float* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  float* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

class CublasGemm {
 public:
  // Handles on `stream` of device `ordinal` (current on the calling thread); TF32 tensor cores
  // when tf32.
  CublasGemm(int ordinal, cudaStream_t stream, bool tf32);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // cublasSgemm(StridedBatched); k must be positive. Throws ShapeError where a size does not
  // fit cuBLAS's 32-bit arguments.
  void sgemm(const GemmCall& g);
  // One product (batch 1) with bias[n] per column (null: none) and/or ReLU fused through
  // cuBLASLt. Returns false, queuing nothing, where cuBLASLt has no plan for the shape or the
  // bias is not 16-byte aligned; the caller then runs sgemm and its own epilogue.
  bool sgemm_bias_relu(const GemmCall& g, const float* bias, bool relu);

 private:
  // What selects a cuBLASLt plan: the shape, strides, fused epilogue and operand alignments.
  struct PlanKey {
    int64_t m, n, k, lda, ldb, ldc;
    uint32_t align_a, align_b, align_c;
    uint8_t trans_a, trans_b, bias, relu;
    bool operator==(const PlanKey& o) const;
  };
  struct PlanKeyHash {
    size_t operator()(const PlanKey& key) const;
  };
  // A cached plan: descriptors plus the algorithm the heuristic chose (or usable == false).
  struct Plan {
    bool usable = false;
    cublasLtMatmulDesc_t operation = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLAS order: B^T, A^T, C^T
    cublasLtMatmulAlgo_t algo{};
    size_t workspace_bytes = 0;
  };
  const Plan& plan(const PlanKey& key, const float* bias);

  int ordinal_;
  bool tf32_;
  cudaStream_t stream_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  // Scratch for cuBLAS and cuBLASLt (one stream: never used by both at once), allocated once.
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::mutex plans_mutex_;
  std::unordered_map<PlanKey, Plan, PlanKeyHash> plans_;
};

}  // namespace trident::cuda
