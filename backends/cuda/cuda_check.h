// The one check macro for CUDA runtime, cuBLAS / cuBLASLt and NCCL calls: a failure throws a
// trident exception naming the call, file, line, device and the vendor's error name and text.
// NCCL is optional (TRIDENT_HAVE_NCCL, cmake/TridentCuda.cmake).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef TRIDENT_HAVE_NCCL
#include <nccl.h>
#endif

#include <string>

namespace trident::cuda {

inline bool succeeded(cudaError_t status) { return status == cudaSuccess; }
inline bool succeeded(cublasStatus_t status) { return status == CUBLAS_STATUS_SUCCESS; }
#ifdef TRIDENT_HAVE_NCCL
inline bool succeeded(ncclResult_t status) { return status == ncclSuccess; }
#endif

// "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version".
std::string describe_status(cudaError_t status);
std::string describe_status(cublasStatus_t status);
#ifdef TRIDENT_HAVE_NCCL
std::string describe_status(ncclResult_t status);
#endif

// Throw BackendError: "<call> failed with <name: text> at <file>:<line> on cuda:<device>".
// cudaErrorMemoryAllocation and CUBLAS_STATUS_ALLOC_FAILED throw OutOfMemory with the free bytes.
// `device` is the CUDA ordinal (-1 when no device is concerned).
[[noreturn]] void throw_failure(const char* call, cudaError_t status, const char* file, int line,
                                int device);
[[noreturn]] void throw_failure(const char* call, cublasStatus_t status, const char* file,
                                int line, int device);
#ifdef TRIDENT_HAVE_NCCL
[[noreturn]] void throw_failure(const char* call, ncclResult_t status, const char* file, int line,
                                int device);
#endif

// Free and total bytes of the current device, or zeros when the query itself fails.
void memory_info(size_t& free_bytes, size_t& total_bytes) noexcept;

}  // namespace trident::cuda

// Works for cudaError_t, cublasStatus_t (cuBLAS and cuBLASLt) and ncclResult_t alike.
#define TRIDENT_CUDA_CHECK(call, device)                                                   \
  do {                                                                                     \
    const auto trident_cuda_status_ = (call);                                              \
    if (!::trident::cuda::succeeded(trident_cuda_status_))                                 \
      ::trident::cuda::throw_failure(#call, trident_cuda_status_, __FILE__, __LINE__,      \
                                     (device));                                            \
  } while (0)
