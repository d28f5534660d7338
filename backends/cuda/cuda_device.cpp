// CudaDevice's plumbing: stream, GEMM policy and reduction scratch, memory, copies, fills,
// synchronisation, and the capture of a whole step into a CUDA graph.
#include "trident/backends/cuda/cuda_device.h"

#include "trident/backends/cuda/cublas_gemm.h"
#include "trident/backends/cuda/cuda_check.h"
#include "trident/core/env.h"
#include "trident/core/error.h"
#include "trident/core/log.h"
#include "trident/kernels/cuda/convert.h"
#include "trident/kernels/cuda/elementwise.h"
#include "trident/kernels/cuda/implicit_conv.h"
#include "trident/kernels/cuda/wgmma_conv.h"

namespace trident::cuda {
namespace {

// Reduction scratch: 2^17 partial results (1 MiB of doubles) cover a grid of thousands of
// blocks over tens of thousands of channels; channel counts past what fits run one block per
// channel, which needs no scratch (kernels/cuda/channel_reduce.cuh).
constexpr int64_t kPartialWords = int64_t(1) << 17;
constexpr int64_t kCoefficientWords = int64_t(1) << 17;
constexpr int64_t kCounterWords = 4097;  // the shared one and one per column tile of 32 channels

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
    // Side work (optimizer updates beside backward) yields the SMs to the main stream's kernels.
    int least = 0, greatest = 0;
    TRIDENT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), ordinal_);
    TRIDENT_CUDA_CHECK(
        cudaStreamCreateWithPriority(&main_stream_, cudaStreamNonBlocking, greatest), ordinal_);
    TRIDENT_CUDA_CHECK(
        cudaStreamCreateWithPriority(&side_stream_, cudaStreamNonBlocking, least), ordinal_);
    TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming), ordinal_);
    TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming), ordinal_);
    TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&last_beside_event_, cudaEventDisableTiming),
                       ordinal_);
    stream_ = main_stream_;
    gemm_ = std::make_unique<CublasGemm>(ordinal_, main_stream_, tf32_);
    side_gemm_ = std::make_unique<CublasGemm>(ordinal_, side_stream_, tf32_);
    direct_conv_ = env_flag("TRIDENT_CUDA_IMPLICIT_CONV", true);
    implicit_conv_ = direct_conv_ && implicit_conv_available();
    warpgroup_mma_ = implicit_conv_ && env_flag("TRIDENT_CUDA_WGMMA", true) &&
                     wgmma_conv_available();
    winograd_conv_ = env_flag("TRIDENT_CUDA_WINOGRAD", true);
    int cooperative = 0;
    TRIDENT_CUDA_CHECK(
        cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, ordinal_), ordinal_);
    cooperative_launch_ = cooperative != 0 && env_flag("TRIDENT_CUDA_COOPERATIVE", true);
    int major = 0;
    TRIDENT_CUDA_CHECK(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal_), ordinal_);
    dependent_launch_ = major >= 9 && env_flag("TRIDENT_CUDA_DEPENDENT_LAUNCH", true);
    const size_t partial_bytes = size_t(kPartialWords) * sizeof(double);
    const size_t coefficient_bytes = size_t(kCoefficientWords) * sizeof(float);
    // Each stream's scratch starts on 256 bytes (the partials are doubles, read in packs).
    const size_t one =
        (partial_bytes + coefficient_bytes + size_t(kCounterWords) * sizeof(unsigned) + 255) /
        256 * 256;
    TRIDENT_CUDA_CHECK(cudaMalloc(&scratch_memory_, 2 * one), ordinal_);
    TRIDENT_CUDA_CHECK(cudaMemset(scratch_memory_, 0, 2 * one), ordinal_);  // counters start at 0
    TRIDENT_CUDA_CHECK(cudaDeviceSynchronize(), ordinal_);
    for (int k = 0; k < 2; ++k) {
      char* base = static_cast<char*>(scratch_memory_) + k * one;
      ReduceScratch& r = k == 0 ? main_scratch_ : side_scratch_;
      r.partials = reinterpret_cast<double*>(base);
      r.partial_words = kPartialWords;
      r.coefficients = reinterpret_cast<float*>(base + partial_bytes);
      r.coefficient_words = kCoefficientWords;
      r.counter = reinterpret_cast<unsigned int*>(base + partial_bytes + coefficient_bytes);
      r.counter_words = kCounterWords;
    }
    scratch_ = main_scratch_;
  } catch (...) {
    side_gemm_.reset();
    gemm_.reset();
    if (scratch_memory_) cudaFree(scratch_memory_);
    if (fork_event_) cudaEventDestroy(fork_event_);
    if (join_event_) cudaEventDestroy(join_event_);
    if (last_beside_event_) cudaEventDestroy(last_beside_event_);
    if (side_stream_) cudaStreamDestroy(side_stream_);
    if (main_stream_) cudaStreamDestroy(main_stream_);
    throw;
  }
}

CudaDevice::~CudaDevice() {
  release_pool();
  make_current();
  // Errors are moot now; everything below is released anyway.
  cudaStreamSynchronize(side_stream_);
  cudaStreamSynchronize(main_stream_);
  side_gemm_.reset();
  gemm_.reset();
  cudaFree(scratch_memory_);
  cudaEventDestroy(fork_event_);
  cudaEventDestroy(join_event_);
  cudaEventDestroy(last_beside_event_);
  cudaStreamDestroy(side_stream_);
  cudaStreamDestroy(main_stream_);
  (void)cudaGetLastError();
}

void CudaDevice::make_current() const { TRIDENT_CUDA_CHECK(cudaSetDevice(ordinal_), ordinal_); }

KernelContext CudaDevice::kernel_context(bool with_error_flag) {
  make_current();
  KernelContext ctx;
  ctx.stream = stream_;
  ctx.sms = info_.compute_units;
  ctx.scratch = scratch_;
  // Not on the side stream: a grid that waits at a barrier for all its blocks could wait there
  // for SMs that a cooperative grid of the main stream holds, and that one for these.
  ctx.cooperative_launch = cooperative_launch_ && stream_ == main_stream_;
  ctx.dependent_launch = dependent_launch_;
  ctx.warpgroup_mma = warpgroup_mma_;
  if (with_error_flag) ctx.error_flag = device_ptr<int32_t>(error_flag());
  return ctx;
}

void CudaDevice::check_launch(const char* kernel) const {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    const std::string call = std::string("launch of kernel ") + kernel;
    throw_failure(call.c_str(), status, __FILE__, __LINE__, ordinal_);
  }
}

// ---- memory -------------------------------------------------------------------------------

void* CudaDevice::do_allocate(size_t bytes) {
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

void CudaDevice::do_free(void* handle) noexcept {
  if (!handle) return;
  // The block may still be used by queued work: wait for it first (cudaFree would wait for the
  // whole device anyway). Errors cannot be thrown from here; they are reported, not ignored.
  cudaError_t status = cudaSetDevice(ordinal_);
  if (status == cudaSuccess) status = cudaStreamSynchronize(side_stream_);
  if (status == cudaSuccess) status = cudaStreamSynchronize(main_stream_);
  const cudaError_t freed = cudaFree(handle);
  if (status == cudaSuccess) status = freed;
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    log_message(LogLevel::error,
                "cuda:" + std::to_string(ordinal_) +
                    ": freeing device memory failed: " + describe_status(status));
  }
}

void CudaDevice::do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) {
  make_current();
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(device_ptr<char>(dst), host, bytes, cudaMemcpyHostToDevice,
                                     stream_),
                     ordinal_);
  // The caller may reuse `host` on return (pageable memory: the copy may still be staging).
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream_), ordinal_);
}

void CudaDevice::do_copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  make_current();
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(host, device_ptr<char>(src), bytes, cudaMemcpyDeviceToHost,
                                     stream_),
                     ordinal_);
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream_), ordinal_);
}

void CudaDevice::do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  make_current();
  TRIDENT_CUDA_CHECK(cudaMemcpyAsync(device_ptr<char>(dst), device_ptr<char>(src), bytes,
                                     cudaMemcpyDeviceToDevice, stream_),
                     ordinal_);
}

void CudaDevice::do_fill(const Tensor& dst, float value) {
  const KernelContext ctx = kernel_context();
  if (value == 0.0f) {  // all-zero bytes: the zero of every dtype
    TRIDENT_CUDA_CHECK(cudaMemsetAsync(device_ptr<char>(dst), 0, dst.bytes(), stream_), ordinal_);
    return;
  }
  switch (dst.dtype()) {
    case DType::f32: launch_fill_f32(ctx, device_ptr<float>(dst), dst.numel(), value); break;
    case DType::i32:
      launch_fill_i32(ctx, device_ptr<int32_t>(dst), dst.numel(), int32_t(value));
      break;
    case DType::f16:
    case DType::bf16:
      launch_fill_half(ctx, device_ptr<void>(dst), dst.dtype(), dst.numel(), value);
      break;
    default:
      throw ShapeError(info_.id() + ": fill with a non-zero value supports floats and I32, not " +
                       dtype_name(dst.dtype()));
  }
  check_launch("fill");
}

bool CudaDevice::do_native(OpFamily, DType dtype) const { return is_half(dtype); }

void CudaDevice::do_convert(const Tensor& src, const Tensor& dst) {
  launch_convert(kernel_context(), device_ptr<const void>(src), src.dtype(),
                 device_ptr<void>(dst), dst.dtype(), src.numel());
  check_launch("convert");
}

void CudaDevice::do_scale(const Tensor& x, const Tensor& factor, const Tensor& y) {
  launch_scale(kernel_context(), device_ptr<const void>(x), x.dtype(),
               device_ptr<const float>(factor), device_ptr<void>(y), y.dtype(), x.numel());
  check_launch("scale");
}

void CudaDevice::do_synchronize() {
  make_current();
  TRIDENT_CUDA_CHECK(cudaStreamSynchronize(stream_), ordinal_);
}

// ---- the side stream -----------------------------------------------------------------------

void CudaDevice::fork_side_stream() {
  make_current();
  TRIDENT_CUDA_CHECK(cudaEventRecord(fork_event_, main_stream_), ordinal_);
  TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, fork_event_, 0), ordinal_);
}

KernelContext CudaDevice::side_kernel_context() {
  KernelContext ctx = kernel_context();
  ctx.stream = side_stream_;
  ctx.scratch = side_scratch_;
  ctx.cooperative_launch = false;
  return ctx;
}

void CudaDevice::do_begin_beside() {
  fork_side_stream();
  stream_ = side_stream_;
  scratch_ = side_scratch_;
}

void CudaDevice::do_end_beside() {
  // Where this call's work ends, for join_last_beside.
  TRIDENT_CUDA_CHECK(cudaEventRecord(last_beside_event_, side_stream_), ordinal_);
  stream_ = main_stream_;
  scratch_ = main_scratch_;
}

void CudaDevice::do_join_last_beside() {
  make_current();
  TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(main_stream_, last_beside_event_, 0), ordinal_);
}

void CudaDevice::do_join_beside() {
  make_current();
  TRIDENT_CUDA_CHECK(cudaEventRecord(join_event_, side_stream_), ordinal_);
  TRIDENT_CUDA_CHECK(cudaStreamWaitEvent(main_stream_, join_event_, 0), ordinal_);
}

// ---- capture ------------------------------------------------------------------------------

std::unique_ptr<CapturedWork> CudaDevice::do_capture(const std::function<void()>& step) {
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
    // Kernels keep the priority of the stream they were captured on (side work stays behind).
    const cudaError_t made =
        cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
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
