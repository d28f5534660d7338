// ClQueue: one OpenCL device's context and in-order queue with what every op needs to run work
// on it (memory, copies and uploads, the main program and its kernels, kernel launches that a
// capture records instead of enqueuing, the profiler hookup), and nothing about which op runs.
#pragma once
#include <CL/cl.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "trident/backends/opencl/cl_errors.h"
#include "trident/backends/opencl/kernel_source.h"
#include "trident/backends/opencl/profiler.h"
#include "trident/core/device.h"

namespace trident::opencl {

// A kernel's buffer argument: the cl_mem and an offset in elements; a kernel declares it as
// (__global T* name, ulong name_off).
struct BufferArg {
  cl_mem mem = nullptr;
  cl_ulong offset = 0;
};
// A buffer argument that may be absent: (__global T* name, ulong name_off, int has_name).
struct OptionalBufferArg {
  cl_mem mem = nullptr;
  cl_ulong offset = 0;
  cl_int present = 0;
};

// An NDRange: `items` work-items in groups of `group` (rounded up), or `count` whole groups.
struct LaunchRange {
  cl_uint dims = 1;
  size_t global[3] = {0, 1, 1};
  size_t local[3] = {256, 1, 1};
  static LaunchRange items(size_t count, size_t group = 256) {
    LaunchRange r;
    r.global[0] = (count + group - 1) / group * group;
    r.local[0] = group;
    return r;
  }
  static LaunchRange groups(size_t count, size_t group) {
    LaunchRange r;
    r.global[0] = count * group;
    r.local[0] = group;
    return r;
  }
};

// A device buffer owned outside the caching pool (scratch kept for the device's lifetime).
struct ClBuffer {
  cl_mem mem = nullptr;
  size_t bytes = 0;
  ClBuffer() = default;
  ClBuffer(const ClBuffer&) = delete;
  ClBuffer& operator=(const ClBuffer&) = delete;
  ~ClBuffer() {
    if (mem) clReleaseMemObject(mem);
  }
};

// A captured step (capture.cpp): kernel launches with their arguments set, in order, between
// re-run host-side operations.
struct CaptureRecording {
  struct Step {
    cl_kernel kernel = nullptr;  // null: `op` instead
    LaunchRange range;
    const char* name = "";
    std::function<void()> op;
  };
  std::vector<Step> steps;
  std::vector<cl_kernel> kernels;  // owned, one per launch; released with the recording
  std::string failure;             // what the step did that cannot be captured ("" if none)
  CaptureRecording() = default;
  CaptureRecording(const CaptureRecording&) = delete;
  CaptureRecording& operator=(const CaptureRecording&) = delete;
  ~CaptureRecording() {
    for (cl_kernel kernel : kernels) clReleaseKernel(kernel);
  }
};

class ClQueue {
 public:
  // `info` describes the device (for messages and the memory size an OutOfMemory reports).
  ClQueue(cl_platform_id platform, cl_device_id device, const DeviceInfo& info);
  ~ClQueue();
  ClQueue(const ClQueue&) = delete;
  ClQueue& operator=(const ClQueue&) = delete;

  // "opencl:0 (pthread-haswell-AMD EPYC)", for error messages.
  const std::string& label() const { return label_; }
  cl_platform_id platform() const { return platform_; }
  cl_device_id device() const { return device_; }
  cl_context context() const { return context_; }
  // The queue that launches, copies and fills go to now: the main queue, or the side queue
  // between fork_side() and back_to_main(). CLBlast takes a pointer.
  cl_command_queue* queue() { return &active_; }

  // ---- memory (enqueued in order; read waits for everything queued before it) ----------------
  // A new buffer; OutOfMemory with the device's sizes when the driver refuses it. Not while
  // capturing (the capture then fails).
  cl_mem allocate(size_t bytes);
  void release(cl_mem mem) noexcept;
  // Makes `buffer` at least `needed` bytes; the outgrown buffer is retired, not released: a
  // captured step's kernels may still hold it as an argument (clSetKernelArg keeps no reference).
  void grow(ClBuffer& buffer, size_t needed);
  // `host` may be reused on return: small uploads are staged in host memory and queued.
  void write(DeviceMemory dst, const void* host, size_t bytes);
  void read(void* host, DeviceMemory src, size_t bytes);
  void copy(DeviceMemory dst, DeviceMemory src, size_t bytes);
  // `bytes` of dst set to the repeated `pattern` of pattern_bytes (1, 2 or 4).
  void fill(DeviceMemory dst, const void* pattern, size_t pattern_bytes, size_t bytes);
  // Waits for all queued work; rethrows a failed staged upload.
  void finish();

  // ---- kernels -------------------------------------------------------------------------------
  // Argument helpers: a tensor's (or memory's) cl_mem and element offset; an undefined tensor
  // is an absent OptionalBufferArg.
  BufferArg buffer(DeviceMemory m, size_t element_bytes, const char* what) const;
  BufferArg buffer(const Tensor& t, const char* what) const;
  OptionalBufferArg optional(const Tensor& t, const char* what) const;
  // Sets the arguments of a main-program kernel and enqueues it (records it while capturing);
  // an empty range enqueues nothing.
  template <typename... Args>
  void launch(Kernel kernel, const LaunchRange& range, const Args&... args) {
    launch_typed(kernel, DType::f32, range, args...);
  }
  // The same from the main program built for activations (act_t) stored as `storage`: f32, f16
  // or bf16 (kernel_source.h).
  template <typename... Args>
  void launch_typed(Kernel kernel, DType storage, const LaunchRange& range, const Args&... args);
  // The same for `kernel`, named `function` in `program` (the own GEMM's tile programs);
  // `label` names the launch in errors and profiles.
  template <typename... Args>
  void launch_from(cl_program program, cl_kernel kernel, const char* function,
                   const char* label, const LaunchRange& range, const Args&... args);
  // Builds (or loads from the on-disk cache) a program with these kernels.
  cl_program build_program(const std::string& options, const std::string& source,
                           const std::vector<const char*>& kernel_names);
  // Builds the main program for `storage` on first use.
  void ensure_program(DType storage = DType::f32);

  // ---- the side queue (Device::queue_beside): a second in-order queue, joined by events ------
  // Each of these is recorded while capturing and run again at every replay, so that a replay
  // switches queues at the same points (kernels and recorded work go to queue() as it is then).
  // Later launches, copies and fills go to the side queue; they start once everything queued
  // on the main queue so far has run.
  void fork_side();
  // Later launches, copies and fills go to the main queue again. mark_end: keep an event where
  // the side work so far ends (join_marked_side waits for it).
  void back_to_main(bool mark_end);
  // fork_side(), `work`, back_to_main(false) (also when `work` throws).
  void run_on_side(const std::function<void()>& work);
  // Main-queue work queued after this waits for all side work queued so far.
  void join_side();
  // Main-queue work queued after this waits for the side work up to the last mark only.
  void join_marked_side();
  // Whether work queued (or recorded) now goes to the side queue: each queue has its own
  // scratch (the reductions', the GEMM engine's), picked by this.
  bool on_side() const { return on_side_; }
  // Grows both queues' scratch `pair` to `needed` bytes together, so that work that first runs
  // in order (where allocating is allowed) has made room for its later runs beside.
  void grow_pair(ClBuffer (&pair)[2], size_t needed);

  // ---- capture (capture.cpp) -----------------------------------------------------------------
  // While capturing: records `op` to be run again at every replay and returns true (host-side
  // work such as CLBlast calls, fills and copies); otherwise returns false.
  bool record(std::function<void()> op);
  // While capturing: marks the capture as failed (`what` cannot be recorded); no-op otherwise.
  void refuse_in_capture(const char* what) noexcept;
  // Records the kernels `step` launches, with their arguments set (one kernel object each),
  // and its recorded host-side work; replay() only enqueues. nullptr (with a note on stderr)
  // when the step did something that cannot be recorded: nothing of it ran.
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& step);

  // ---- profiling (TRIDENT_OPENCL_PROFILE, profiler.h) -----------------------------------------
  // The event slot for an enqueue: &event while profiling, else null (no event is made).
  cl_event* profile_slot(cl_event& event) { return profile_ ? &event : nullptr; }
  // Keeps a profiled command's event (no-op when not profiling).
  void profiled(const char* name, cl_event event) {
    if (profile_) profile_->add(name, event);
  }

 private:
  void set_args(cl_kernel, cl_uint) {}
  template <typename T, typename... Rest>
  void set_args(cl_kernel kernel, cl_uint index, const T& value, const Rest&... rest);
  // The kernel object to set arguments on: `shared`, or while capturing a fresh one from
  // `program`, owned by the recording (a replay keeps its own arguments).
  cl_kernel kernel_for_launch(cl_program program, cl_kernel shared, const char* name);
  // Enqueues `kernel` now, or records it while capturing.
  void submit(cl_kernel kernel, const LaunchRange& range, const char* name);
  void reap_uploads(bool wait);

  std::string label_;
  uint64_t memory_bytes_ = 0, max_alloc_bytes_ = 0;
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;  // main
  cl_command_queue side_ = nullptr;
  cl_command_queue active_ = nullptr;  // queue_ or side_ (queue())
  cl_event side_mark_ = nullptr;       // back_to_main(true)'s end of side work, or null
  bool on_side_ = false;               // on_side(): set while recording too
  // A marker on `from` that `to`'s later commands wait for.
  void order_after(cl_command_queue from, cl_command_queue to);

  // The main program per storage type (f32, f16, bf16), each built on first use.
  struct MainProgram {
    std::once_flag once;
    cl_program program = nullptr;
    std::vector<cl_kernel> kernels;  // indexed by Kernel
  };
  static size_t storage_index(DType storage);
  MainProgram main_[3];

  std::vector<cl_mem> retired_;     // outgrown scratch (grow), released with the queue
  std::unique_ptr<KernelProfile> profile_;
  std::unique_ptr<CaptureRecording> recording_;  // the capture in progress, or null

  // Host copies of small uploads in flight (write returns before the transfer runs).
  struct Upload {
    cl_event done;
    std::unique_ptr<unsigned char[]> bytes;
  };
  std::vector<Upload> uploads_;
};

template <typename T, typename... Rest>
void ClQueue::set_args(cl_kernel kernel, cl_uint index, const T& value, const Rest&... rest) {
  if constexpr (std::is_same_v<T, BufferArg> || std::is_same_v<T, OptionalBufferArg>) {
    TRIDENT_CL_CHECK(clSetKernelArg(kernel, index, sizeof(cl_mem), &value.mem), label_);
    TRIDENT_CL_CHECK(clSetKernelArg(kernel, index + 1, sizeof(cl_ulong), &value.offset), label_);
    if constexpr (std::is_same_v<T, OptionalBufferArg>) {
      TRIDENT_CL_CHECK(clSetKernelArg(kernel, index + 2, sizeof(cl_int), &value.present),
                       label_);
      set_args(kernel, index + 3, rest...);
    } else {
      set_args(kernel, index + 2, rest...);
    }
  } else {
    static_assert(std::is_arithmetic_v<T>, "kernel arguments are buffers or cl_ scalars");
    TRIDENT_CL_CHECK(clSetKernelArg(kernel, index, sizeof(T), &value), label_);
    set_args(kernel, index + 1, rest...);
  }
}

template <typename... Args>
void ClQueue::launch_typed(Kernel kernel, DType storage, const LaunchRange& range,
                           const Args&... args) {
  ensure_program(storage);
  const MainProgram& main = main_[storage_index(storage)];
  const char* name = kernel_name(kernel);
  launch_from(main.program, main.kernels[static_cast<int>(kernel)], name, name, range, args...);
}

template <typename... Args>
void ClQueue::launch_from(cl_program program, cl_kernel kernel, const char* function,
                          const char* label, const LaunchRange& range, const Args&... args) {
  for (cl_uint d = 0; d < range.dims; ++d)
    if (range.global[d] == 0) return;
  cl_kernel k = kernel_for_launch(program, kernel, function);
  set_args(k, 0, args...);
  submit(k, range, label);
}

}  // namespace trident::opencl
