// Error text for CUDA, cuBLAS and NCCL status codes, and the throwers behind TRIDENT_CUDA_CHECK.
#include "trident/backends/cuda/cuda_check.h"

#include "trident/core/error.h"

namespace trident::cuda {
namespace {

std::string location(const char* call, const std::string& status, const char* file, int line,
                     int device) {
  std::string text = std::string(call) + " failed with " + status + " at " + file + ":" +
                     std::to_string(line);
  if (device >= 0) text += " on cuda:" + std::to_string(device);
  return text;
}

[[noreturn]] void throw_out_of_memory(const std::string& what) {
  size_t free_bytes = 0, total_bytes = 0;
  memory_info(free_bytes, total_bytes);
  throw OutOfMemory(what + " (" + std::to_string(free_bytes) + " of " +
                    std::to_string(total_bytes) +
                    " bytes free on the device); use a smaller batch or model, or free memory "
                    "held by other processes");
}

}  // namespace

std::string describe_status(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

std::string describe_status(cublasStatus_t status) {
  return std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status);
}

#ifdef TRIDENT_HAVE_NCCL
std::string describe_status(ncclResult_t status) {
  return "ncclResult " + std::to_string(static_cast<int>(status)) + ": " +
         ncclGetErrorString(status);
}
#endif

void memory_info(size_t& free_bytes, size_t& total_bytes) noexcept {
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    free_bytes = total_bytes = 0;
  }
}

void throw_failure(const char* call, cudaError_t status, const char* file, int line, int device) {
  // Clears the error if it is not sticky, so the next call does not report it again.
  (void)cudaGetLastError();
  const std::string what = location(call, describe_status(status), file, line, device);
  if (status == cudaErrorMemoryAllocation) throw_out_of_memory(what);
  throw BackendError(what);
}

void throw_failure(const char* call, cublasStatus_t status, const char* file, int line,
                   int device) {
  const std::string what = location(call, describe_status(status), file, line, device);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw_out_of_memory(what);
  throw BackendError(what);
}

#ifdef TRIDENT_HAVE_NCCL
void throw_failure(const char* call, ncclResult_t status, const char* file, int line,
                   int device) {
  throw BackendError(location(call, describe_status(status), file, line, device));
}
#endif

}  // namespace trident::cuda
