// ClQueue's memory, transfers, programs and enqueues (capture.cpp holds the recording side).
#include "trident/backends/opencl/cl_queue.h"

#include <cstring>

#include "trident/backends/opencl/cl_info.h"
#include "trident/backends/opencl/program_cache.h"
#include "trident/core/error.h"

namespace trident::opencl {
namespace {

const char* const kBuildOptions = "-cl-std=CL1.2";
// Uploads up to this size are staged in host memory and queued without waiting.
constexpr size_t kStagedUploadLimit = size_t(64) << 20;

}  // namespace

ClQueue::ClQueue(cl_platform_id platform, cl_device_id device, const DeviceInfo& info)
    : label_(info.id() + " (" + info.name + ")"),
      memory_bytes_(info.memory_bytes),
      platform_(platform),
      device_(device) {
  cl_int status = CL_SUCCESS;
  context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &status);
  TRIDENT_CL_CHECK(status, label_);
  // In order; profiled only on request (profiler.h).
  if (opencl_profiling_requested()) profile_ = std::make_unique<KernelProfile>(label_);
  queue_ = clCreateCommandQueue(context_, device_, profile_ ? CL_QUEUE_PROFILING_ENABLE : 0,
                                &status);
  if (status != CL_SUCCESS) clReleaseContext(context_);
  TRIDENT_CL_CHECK(status, label_);
  side_ = clCreateCommandQueue(context_, device_, profile_ ? CL_QUEUE_PROFILING_ENABLE : 0,
                               &status);
  if (status != CL_SUCCESS) {
    clReleaseCommandQueue(queue_);
    clReleaseContext(context_);
  }
  TRIDENT_CL_CHECK(status, label_ + " (a second queue)");
  active_ = queue_;
  max_alloc_bytes_ = device_value<cl_ulong>(device_, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
}

ClQueue::~ClQueue() {
  clFinish(side_);  // errors are moot now; every object below is released regardless
  clFinish(queue_);
  if (side_mark_) clReleaseEvent(side_mark_);
  if (profile_) {
    profile_->collect();
    profile_.reset();  // prints the table
  }
  recording_.reset();
  for (Upload& upload : uploads_) clReleaseEvent(upload.done);
  for (MainProgram& main : main_) {
    for (cl_kernel kernel : main.kernels)
      if (kernel) clReleaseKernel(kernel);
    if (main.program) clReleaseProgram(main.program);
  }
  for (cl_mem retired : retired_) clReleaseMemObject(retired);
  clReleaseCommandQueue(side_);
  clReleaseCommandQueue(queue_);
  clReleaseContext(context_);
}

// ---- memory ----------------------------------------------------------------------------------

cl_mem ClQueue::allocate(size_t bytes) {
  refuse_in_capture("an allocation");
  cl_int status = CL_SUCCESS;
  // Checked here: NVIDIA's driver allocates lazily and accepts even 1 PiB until first use.
  const bool too_large = max_alloc_bytes_ > 0 && bytes > max_alloc_bytes_;
  cl_mem mem = too_large ? nullptr
                         : clCreateBuffer(context_, CL_MEM_READ_WRITE, bytes, nullptr, &status);
  if (too_large) status = CL_INVALID_BUFFER_SIZE;
  if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES ||
      status == CL_OUT_OF_HOST_MEMORY || status == CL_INVALID_BUFFER_SIZE)
    throw OutOfMemory(label_ + ": cannot allocate " + std::to_string(bytes) + " bytes (" +
                      cl_error_name(status) + "); the device has " +
                      std::to_string(memory_bytes_) + " bytes of global memory and allows " +
                      std::to_string(max_alloc_bytes_) + " bytes in one buffer (OpenCL does not "
                      "report free memory). Use a smaller batch or model.");
  TRIDENT_CL_CHECK(status, label_);
  return mem;
}

void ClQueue::release(cl_mem mem) noexcept {
  // The runtime keeps the buffer alive until queued commands that use it have finished.
  if (!mem) return;
  refuse_in_capture("a release of device memory");
  clReleaseMemObject(mem);
}

void ClQueue::grow(ClBuffer& buffer, size_t needed) {
  if (needed <= buffer.bytes) return;
  cl_mem fresh = allocate(needed);
  if (buffer.mem) retired_.push_back(buffer.mem);
  buffer.mem = fresh;
  buffer.bytes = needed;
}

void ClQueue::grow_pair(ClBuffer (&pair)[2], size_t needed) {
  grow(pair[0], needed);
  grow(pair[1], needed);
}

void ClQueue::reap_uploads(bool wait) {
  std::string failure;
  for (size_t i = 0; i < uploads_.size();) {
    cl_int state = CL_COMPLETE;
    if (wait) clWaitForEvents(1, &uploads_[i].done);
    const cl_int query = clGetEventInfo(uploads_[i].done, CL_EVENT_COMMAND_EXECUTION_STATUS,
                                        sizeof state, &state, nullptr);
    if (query == CL_SUCCESS && state > CL_COMPLETE) {  // still queued or running
      ++i;
      continue;
    }
    if (query != CL_SUCCESS || state < 0)
      failure = describe_cl_failure("clEnqueueWriteBuffer (staged upload)",
                                    query != CL_SUCCESS ? query : state, __FILE__, __LINE__,
                                    label_);
    clReleaseEvent(uploads_[i].done);
    uploads_.erase(uploads_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  if (!failure.empty()) throw BackendError(failure);
}

void ClQueue::write(DeviceMemory dst, const void* host, size_t bytes) {
  refuse_in_capture("a copy from the host");
  reap_uploads(false);
  cl_mem mem = static_cast<cl_mem>(dst.handle);
  if (bytes > kStagedUploadLimit) {  // a data set: wait rather than hold a second host copy
    TRIDENT_CL_CHECK(clEnqueueWriteBuffer(queue_, mem, CL_TRUE, dst.offset, bytes, host, 0,
                                          nullptr, nullptr),
                     label_);
    return;
  }
  Upload upload{nullptr, std::make_unique<unsigned char[]>(bytes)};
  std::memcpy(upload.bytes.get(), host, bytes);
  TRIDENT_CL_CHECK(clEnqueueWriteBuffer(queue_, mem, CL_FALSE, dst.offset, bytes,
                                        upload.bytes.get(), 0, nullptr, &upload.done),
                   label_);
  uploads_.push_back(std::move(upload));
}

void ClQueue::read(void* host, DeviceMemory src, size_t bytes) {
  refuse_in_capture("a copy to the host");
  TRIDENT_CL_CHECK(clEnqueueReadBuffer(queue_, static_cast<cl_mem>(src.handle), CL_TRUE,
                                       src.offset, bytes, host, 0, nullptr, nullptr),
                   label_);
  reap_uploads(false);
}

void ClQueue::copy(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  if (record([=] { copy(dst, src, bytes); })) return;
  cl_event event = nullptr;
  TRIDENT_CL_CHECK(clEnqueueCopyBuffer(active_, static_cast<cl_mem>(src.handle),
                                       static_cast<cl_mem>(dst.handle), src.offset, dst.offset,
                                       bytes, 0, nullptr, profile_slot(event)),
                   label_);
  profiled("copy_on_device", event);
}

void ClQueue::fill(DeviceMemory dst, const void* pattern, size_t pattern_bytes, size_t bytes) {
  uint32_t word = 0;  // the pattern, kept by value for a replay
  std::memcpy(&word, pattern, pattern_bytes);
  if (record([=] { fill(dst, &word, pattern_bytes, bytes); })) return;
  cl_event event = nullptr;
  TRIDENT_CL_CHECK(clEnqueueFillBuffer(active_, static_cast<cl_mem>(dst.handle), &word,
                                       pattern_bytes, dst.offset, bytes, 0, nullptr,
                                       profile_slot(event)),
                   label_);
  profiled("fill", event);
}

void ClQueue::finish() {
  refuse_in_capture("synchronize");
  TRIDENT_CL_CHECK(clFinish(side_), label_);
  TRIDENT_CL_CHECK(clFinish(queue_), label_);
  if (profile_) profile_->collect();
  reap_uploads(true);
}

// ---- programs and kernels ----------------------------------------------------------------------

BufferArg ClQueue::buffer(DeviceMemory m, size_t element_bytes, const char* what) const {
  if (m.offset % element_bytes != 0)
    throw ShapeError(label_ + ": " + what + " starts " + std::to_string(m.offset) +
                     " bytes into its buffer, not a multiple of its element size " +
                     std::to_string(element_bytes));
  return BufferArg{static_cast<cl_mem>(m.handle), m.offset / element_bytes};
}

BufferArg ClQueue::buffer(const Tensor& t, const char* what) const {
  return buffer(t.memory(), dtype_size(t.dtype()), what);
}

OptionalBufferArg ClQueue::optional(const Tensor& t, const char* what) const {
  if (!t.defined()) return OptionalBufferArg{};
  const BufferArg b = buffer(t, what);
  return OptionalBufferArg{b.mem, b.offset, 1};
}

cl_program ClQueue::build_program(const std::string& options, const std::string& source,
                                  const std::vector<const char*>& kernel_names) {
  return build_program_cached(context_, platform_, device_, options, source, kernel_names,
                              label_);
}

size_t ClQueue::storage_index(DType storage) {
  switch (storage) {
    case DType::f32: return 0;
    case DType::f16: return 1;
    case DType::bf16: return 2;
    default: throw ShapeError(std::string("OpenCL kernels store activations as F32, F16 or BF16, "
                                          "not ") + dtype_name(storage));
  }
}

void ClQueue::ensure_program(DType storage) {
  MainProgram& main = main_[storage_index(storage)];
  std::call_once(main.once, [this, storage, &main] {
    std::vector<const char*> names;
    for (int k = 0; k < static_cast<int>(Kernel::count_); ++k)
      names.push_back(kernel_name(static_cast<Kernel>(k)));
    cl_program program = build_program(kBuildOptions, main_program_source(storage), names);
    std::vector<cl_kernel> kernels;
    for (const char* name : names) {
      cl_int status = CL_SUCCESS;
      kernels.push_back(clCreateKernel(program, name, &status));
      if (status != CL_SUCCESS) {
        for (cl_kernel k : kernels)
          if (k) clReleaseKernel(k);
        clReleaseProgram(program);
        TRIDENT_CL_CHECK(status, label_ + ", kernel " + name);
      }
    }
    main.program = program;
    main.kernels = std::move(kernels);
  });
}

// ---- the side queue --------------------------------------------------------------------------

void ClQueue::order_after(cl_command_queue from, cl_command_queue to) {
  cl_event marker = nullptr;
  TRIDENT_CL_CHECK(clEnqueueMarkerWithWaitList(from, 0, nullptr, &marker), label_);
  const cl_int status = clEnqueueBarrierWithWaitList(to, 1, &marker, nullptr);
  clReleaseEvent(marker);  // the barrier keeps what it waits for
  TRIDENT_CL_CHECK(status, label_);
}

void ClQueue::fork_side() {
  on_side_ = true;
  if (record([this] { fork_side(); })) return;
  order_after(queue_, side_);
  active_ = side_;
}

void ClQueue::back_to_main(bool mark_end) {
  on_side_ = false;
  if (record([this, mark_end] { back_to_main(mark_end); })) return;
  active_ = queue_;
  if (!mark_end) return;
  cl_event marker = nullptr;
  TRIDENT_CL_CHECK(clEnqueueMarkerWithWaitList(side_, 0, nullptr, &marker), label_);
  if (side_mark_) clReleaseEvent(side_mark_);
  side_mark_ = marker;
}

void ClQueue::run_on_side(const std::function<void()>& work) {
  fork_side();
  try {
    work();
  } catch (...) {
    back_to_main(false);
    throw;
  }
  back_to_main(false);
}

void ClQueue::join_side() {
  if (record([this] { join_side(); })) return;
  order_after(side_, queue_);
}

void ClQueue::join_marked_side() {
  if (record([this] { join_marked_side(); })) return;
  if (!side_mark_) return;
  TRIDENT_CL_CHECK(clEnqueueBarrierWithWaitList(queue_, 1, &side_mark_, nullptr), label_);
}

}  // namespace trident::opencl
