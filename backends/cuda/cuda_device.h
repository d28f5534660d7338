// CudaDevice: one NVIDIA GPU behind the Device interface (one non-blocking stream, cuBLAS and
// cuBLASLt handles with a persistent workspace, CUDA-graph capture, kernels from kernels/cuda).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "trident/backends/cuda/cuda_check.h"
#include "trident/core/device.h"

namespace trident::cuda {

// What selects a cuBLASLt plan: the shape, strides, fused epilogue and operand alignments.
struct LtKey {
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t align_a, align_b, align_c;
  uint8_t trans_a, trans_b, bias, relu;
  bool operator==(const LtKey& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
           align_a == o.align_a && align_b == o.align_b && align_c == o.align_c &&
           trans_a == o.trans_a && trans_b == o.trans_b && bias == o.bias && relu == o.relu;
  }
};
struct LtKeyHash {
  size_t operator()(const LtKey& key) const {
    const uint64_t words[] = {uint64_t(key.m), uint64_t(key.n), uint64_t(key.k),
                              uint64_t(key.lda), uint64_t(key.ldb), uint64_t(key.ldc),
                              uint64_t(key.align_a) | uint64_t(key.align_b) << 16 |
                                  uint64_t(key.align_c) << 32 | uint64_t(key.trans_a) << 48 |
                                  uint64_t(key.trans_b) << 50 | uint64_t(key.bias) << 52 |
                                  uint64_t(key.relu) << 54};
    uint64_t h = 1469598103934665603ull;
    for (uint64_t w : words) h = (h ^ w) * 1099511628211ull;
    return size_t(h);
  }
};

// A cached cuBLASLt plan for one GEMM shape: descriptors plus the algorithm the heuristic chose
// (or usable == false: this shape goes through cublasSgemm and the epilogue kernel).
struct LtPlan {
  bool usable = false;
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLAS order: B^T, A^T, C^T
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
};

class CudaDevice final : public Device {
 public:
  // Makes `ordinal` current on the calling thread and creates the stream, handles and workspace.
  CudaDevice(int ordinal, DeviceInfo info, bool tf32);
  ~CudaDevice() override;

  const DeviceInfo& info() const override { return info_; }

  // For the NCCL collective (backends/cuda/nccl_collective.cpp): every op of this device is
  // queued on stream(); ordinal() is the CUDA device number to cudaSetDevice.
  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return ordinal_; }
  bool tf32_enabled() const { return tf32_; }
  // Makes this device current on the calling thread (several threads drive several devices).
  void make_current() const;

  void* raw_allocate(size_t bytes) override;
  void raw_free(void* handle) noexcept override;
  void copy_from_host(DeviceMemory dst, const void* host, size_t bytes) override;
  void copy_to_host(void* host, DeviceMemory src, size_t bytes) override;
  void copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) override;
  void fill(DeviceMemory dst, int64_t count, float value) override;
  void synchronize() override;

  std::unique_ptr<CapturedWork> capture(const std::function<void()>& step) override;

  void gemm(const GemmArgs& args) override;
  void sum_rows(DeviceMemory dy, int64_t rows, int64_t cols, DeviceMemory db, float beta) override;
  void axpby(DeviceMemory x, DeviceMemory y, int64_t n, float a, float b) override;

  void relu_forward(DeviceMemory x, DeviceMemory y, int64_t n) override;
  void relu_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t n) override;
  void dropout(DeviceMemory x, DeviceMemory y, int64_t n, int64_t group, int64_t group_offset,
               float p, uint64_t seed, uint32_t stream, DeviceMemory step_state) override;

  size_t conv2d_workspace_bytes(const Conv2dShape& s) const override;
  void conv2d_forward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w, DeviceMemory b,
                      DeviceMemory y, DeviceMemory workspace) override;
  void conv2d_backward(const Conv2dShape& s, DeviceMemory x, DeviceMemory w, DeviceMemory dy,
                       DeviceMemory dx, DeviceMemory dw, DeviceMemory db,
                       DeviceMemory workspace,
                       bool after_forward) override;
  void maxpool2d_forward(const Pool2dShape& s, DeviceMemory x, DeviceMemory y,
                         DeviceMemory argmax) override;
  void maxpool2d_backward(const Pool2dShape& s, DeviceMemory dy, DeviceMemory argmax,
                          DeviceMemory dx) override;

  void log_softmax_forward(DeviceMemory x, DeviceMemory y, int64_t rows, int64_t cols) override;
  void log_softmax_backward(DeviceMemory y, DeviceMemory dy, DeviceMemory dx, int64_t rows,
                            int64_t cols) override;
  void nll_loss_forward(DeviceMemory logp, DeviceMemory labels, int64_t rows, int64_t cols,
                        DeviceMemory loss, bool accumulate) override;
  void nll_loss_backward(DeviceMemory labels, int64_t rows, int64_t cols, float scale,
                         DeviceMemory dlogp) override;
  void log_softmax_nll(DeviceMemory x, DeviceMemory labels, int64_t rows, int64_t cols,
                       float grad_scale, DeviceMemory y, DeviceMemory loss, bool accumulate,
                       DeviceMemory dx) override;
  void count_correct(DeviceMemory scores, DeviceMemory labels, int64_t rows, int64_t cols,
                     DeviceMemory correct) override;

  void gather_rows(DeviceMemory src, size_t row_bytes, DeviceMemory table, int64_t rows,
                   DeviceMemory step_state, DeviceMemory dst) override;
  void advance_step(DeviceMemory step_state) override;
  void sgd_update(DeviceMemory params, DeviceMemory grads, DeviceMemory momentum, int64_t n,
                  const SgdParams& hp) override;
  void adam_update(DeviceMemory params, DeviceMemory grads, DeviceMemory m, DeviceMemory v,
                   int64_t n, const AdamParams& hp, DeviceMemory step_state) override;

 private:
  // Row-major C[m,n] = alpha op(A) op(B) + beta C for `batch` matrices `stride_*` floats apart
  // (batch 1: one plain GEMM), through cublasSgemm(StridedBatched) with the operands swapped.
  void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
             int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
             int64_t batch = 1);
  // The cached cuBLASLt plan for this GEMM (bias per column and/or ReLU fused), built on first use.
  const LtPlan& lt_plan(const LtKey& key, const float* bias);
  // Throws BackendError naming the kernel if its launch failed.
  void check_launch(const char* kernel) const;

  DeviceInfo info_;
  int ordinal_ = 0;
  bool tf32_ = false;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  // Scratch for cuBLAS and cuBLASLt (one stream: never used by both at once). Allocated once,
  // so that no GEMM allocates, inside a CUDA graph capture or out of it.
  void* blas_workspace_ = nullptr;
  size_t blas_workspace_bytes_ = 0;

  std::mutex plans_mutex_;
  std::unordered_map<LtKey, LtPlan, LtKeyHash> plans_;
};

// The device address of a DeviceMemory (handle plus byte offset); nullptr for a null handle.
template <typename T>
T* device_ptr(DeviceMemory m) {
  return m.handle ? reinterpret_cast<T*>(static_cast<char*>(m.handle) + m.offset) : nullptr;
}

}  // namespace trident::cuda

namespace trident {
using cuda::CudaDevice;  // as the NCCL collective and tests name it
}  // namespace trident
