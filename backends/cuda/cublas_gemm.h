// The GEMM policy of a CudaDevice: cuBLAS for plain products (and strided batches of them), and
// cuBLASLt where a bias and/or ReLU can ride in the epilogue, with one persistent workspace (no
// GEMM allocates, so every product can be captured in a CUDA graph) and plans cached per shape.
// Operands: A and B float32, float16 or bfloat16 (one type), C float32 or A's type; 16-bit
// products run on tensor cores with float32 accumulation (CUBLAS_COMPUTE_32F), float32 ones in
// float32, or TF32 where the call or the device (TRIDENT_CUDA_TF32) allows it.
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

#include "trident/core/dtype.h"
#include <unordered_map>

namespace trident::cuda {

// One row-major product C[m, n] = alpha * op(A) op(B) + beta * C with device pointers and row
// strides; `batch` matrices stride_* elements apart (batch 1: one product). ab_type is A's and
// B's type, c_type C's (f32 or ab_type); tf32: float32 operands may use TF32 tensor cores.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  DType ab_type = DType::f32, c_type = DType::f32;
  bool tf32 = false;
};

class CublasGemm {
 public:
  // Handles on `stream` of device `ordinal` (current on the calling thread); TF32 tensor cores
  // for every float32 product when tf32 (else where a call asks for them).
  CublasGemm(int ordinal, cudaStream_t stream, bool tf32);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // cublasSgemm or cublasGemmEx (StridedBatched); k must be positive. Throws ShapeError where a
  // size does not fit cuBLAS's 32-bit arguments.
  void gemm(const GemmCall& g);
  // One product (batch 1) with a bias[n] per column of C's type (null: none; cuBLASLt adds a
  // bias of the output's type only) and/or ReLU fused through cuBLASLt. Returns false, queuing nothing, where cuBLASLt has no plan for the shape
  // and types or the bias is not 16-byte aligned; the caller then runs gemm and its own epilogue.
  bool gemm_bias_relu(const GemmCall& g, const void* bias, bool relu);

 private:
  // What selects a cuBLASLt plan: the shape, strides, types, fused epilogue and alignments.
  struct PlanKey {
    int64_t m, n, k, lda, ldb, ldc;
    uint32_t align_a, align_b, align_c;
    uint8_t trans_a, trans_b, bias, relu, ab_type, c_type, tf32;
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
  const Plan& plan(const PlanKey& key, const void* bias);
  // gemm's cuBLAS call.
  void launch(const GemmCall& g);
  // The compute type of a product of these operands.
  cublasComputeType_t compute_type(DType ab_type, bool tf32) const;

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
