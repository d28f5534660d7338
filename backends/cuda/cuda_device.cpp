// CudaDevice's plumbing: stream and library handles, memory, copies, synchronisation, and the
// capture of a whole step into a CUDA graph.
#include "trident/backends/cuda/cuda_device.h"

#include "trident/core/error.h"
#include "trident/core/log.h"
#include "trident/kernels/cuda/cuda_kernels.h"

namespace trident::cuda {
namespace {

// cuBLAS and cuBLASLt scratch: NVIDIA's recommendation for Hopper is 32 MiB.
constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;

// A recorded step: an instantiated CUDA graph replayed on the device's stream.
class CudaGraphWork final : public CapturedWork {
 public:
  CudaGraphWork(const CudaDevice& device, cudaGraphExec_t exec) : device_(device), exec_(exec) {}
  ~CudaGraphWork() override {
    device_.make_current();
    cudaGraphExecDestroy(exec_);
  }
  void replay() override {
    device_.make_current();
    TRIDENT_CUDA_CHECK(cudaGraphLaunch(exec_, device_.stream()), device_.ordinal());
  }

 private:
  const CudaDevice& device_;
  cudaGraphExec_t exec_;
};

}  // namespace

CudaDevice::CudaDevice(int ordinal, DeviceInfo info, bool tf32)
    : info_(std::move(info)), ordinal_(ordinal), tf32_(tf32) {
  make_current();
  try {
    TRIDENT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), ordinal_);
    TRIDENT_CUDA_CHECK(cublasCreate(&blas_), ordinal_);
    TRIDENT_CUDA_CHECK(cublasSetStream(blas_, stream_), ordinal_);
    TRIDENT_CUDA_CHECK(
        cublasSetMathMode(blas_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        ordinal_);
    TRIDENT_CUDA_CHECK(cublasLtCreate(&lt_), ordinal_);
    TRIDENT_CUDA_CHECK(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes), ordinal_);
    blas_workspace_bytes_ = kBlasWorkspaceBytes;
    TRIDENT_CUDA_CHECK(cublasSetWorkspace(blas_, blas_workspace_, blas_workspace_bytes_),
                       ordinal_);
  } catch (...) {
    if (lt_) cublasLtDestroy(lt_);
    if (blas_) cublasDestroy(blas_);
    if (blas_workspace_) cudaFree(blas_workspace_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

CudaDevice::~CudaDevice() {
  release_pool();
  make_current();
  cudaStreamSynchronize(stream_);  // errors are moot now; everything below is released anyway
  for (auto& entry : plans_) {
    LtPlan& plan = entry.second;
    if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.c) cublasLtMatrixLayoutDestroy(plan.c);
    if (plan.operation) cublasLtMatmulDescDestroy(plan.operation);
  }
  cublasLtDestroy(lt_);
  cublasDestroy(blas_);
  cudaFree(blas_workspace_);
  cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

void CudaDevice::make_current() const {
  TRIDENT_CUDA_CHECK(cudaSetDevice(ordinal_), ordinal_);
}

void CudaDevice::check_launch(const char* kernel) const {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    const std::string call = std::string("launch of kernel ") + kernel;
    throw_failure(call.c_str(), status, __FILE__, __LINE__, ordinal_);
  }
}

// ---- memory -------------------------------------------------------------------------------

void* CudaDevice::raw_allocate(size_t bytes) {
  make_current();
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    memory_info(free_bytes, total_bytes);
    throw OutOfMemory(info_.id() + " (" + info_.name + "): cannot allocate " +
                      std::to_string(bytes) + " bytes: " + std::to_string(free_bytes) + " of " +
                      std::to_string(total_bytes) +
                      " bytes are free. Use a smaller batch or model, or stop other processes "
                      "using this GPU.");
  }
  TRIDENT_CUDA_CHECK(status, ordinal_);
  return pointer;
}

void CudaDevice::raw_free(void* handle) noexcept {
  if (!handle) return;
  // The block may still be used by queued work: wait for it first (cudaFree would wait for the
  // whole device anyway). Errors cannot be thrown from here; they are reported, not ignored.
  cudaError_t status = cudaSetDevice(ordinal_);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream_);
  const cudaError_t freed = cudaFree(handle);
  if (status == cudaSuccess) status = freed;
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    log_message(LogLevel::error,
                "cuda:" + std::to_string(ordinal_) +
                    ": freeing device memory failed: " + describe_status(status));
  }
}

void CudaDevice::copy_from_host(DeviceMemory dst, const void* host, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(device_ptr<char>(dst), host, bytes, cudaMemcpyHostToDevice,
                                     stream_),
                     ordinal_);
  // The caller may reuse `host` on return (pageable memory: the copy may still be staging).
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream_), ordinal_);
}

void CudaDevice::copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  if (bytes == 0) return synchronize();
  make_current();
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(host, device_ptr<char>(src), bytes, cudaMemcpyDeviceToHost,
                                     stream_),
                     ordinal_);
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream_), ordinal_);
}

void CudaDevice::copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(device_ptr<char>(dst), device_ptr<char>(src), bytes,
                                     cudaMemcpyDeviceToDevice, stream_),
                     ordinal_);
}

void CudaDevice::fill(DeviceMemory dst, int64_t count, float value) {
  if (count <= 0) return;
  make_current();
  if (value == 0.0f) {  // all-zero bytes: also the int32 zero
    TRIDENT_CUDA_CHECK(cudaMemsetAsync(device_ptr<char>(dst), 0, size_t(count) * sizeof(float),
                                       stream_),
                       ordinal_);
    return;
  }
  launch_fill(stream_, device_ptr<float>(dst), count, value);
  check_launch("fill");
}

void CudaDevice::synchronize() {
  make_current();
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream_), ordinal_);
}

// ---- capture ------------------------------------------------------------------------------

std::unique_ptr<CapturedWork> CudaDevice::capture(const std::function<void()>& step) {
  make_current();
  // Thread-local mode: other threads driving other GPUs are not disturbed by this capture.
  TRIDENT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), ordinal_);
  std::string failure;
  try {
    step();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);  // always leave capture mode
  if (failure.empty() && ended != cudaSuccess) failure = describe_status(ended);
  if (failure.empty() && graph == nullptr) failure = "the capture produced no graph";
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) failure = "cudaGraphInstantiate: " + describe_status(made);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!failure.empty()) {
    (void)cudaGetLastError();
    // The caller runs the step eagerly instead; say why once, since it costs speed.
    log_warning(info_.id() + ": the step could not be captured as a CUDA graph (" + failure +
                "); running it without a graph");
    return nullptr;
  }
  auto work = std::make_unique<CudaGraphWork>(*this, exec);
  TRIDENT_CUDA_CHECK(cudaGraphUpload(exec, stream_), ordinal_);  // first replay starts faster
  return work;
}

}  // namespace trident::cuda
