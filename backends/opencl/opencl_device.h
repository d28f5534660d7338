// OpenClDevice: one OpenCL device behind the Device interface (one context, one in-order queue,
// one program holding the kernels of kernels/opencl, GEMM through an own tiled kernel or CLBlast).
#pragma once
#include <CL/cl.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "trident/backends/opencl/cl_errors.h"
#include "trident/backends/opencl/profiler.h"
#include "trident/core/device.h"

namespace trident::opencl {

// The text of kernels/opencl/<name>.cl (embedded, or read from disk in a developer build).
std::string kernel_file_text(const char* name);

// When Device::gemm runs the own tiled kernel (gemm.cl) instead of CLBlast:
// TRIDENT_OPENCL_OWN_GEMM=auto (default: on GPUs, products up to 2^31 multiply-adds, where
// CLBlast's per-call host work and its extra pad/transpose/epilogue launches cost more than its
// faster large-matrix kernels gain), always, never, or a number (the largest m*n*k*batch it
// takes, on any device type).
enum class OwnGemmMode : int { auto_, always, never };
struct OwnGemmPolicy {
  OwnGemmMode mode;
  double max_work;      // auto: the largest m*n*k*batch for the own kernel
  bool explicit_limit;  // max_work came from the variable: any device type
};
OwnGemmPolicy own_gemm_policy_from_env();

// One call of the own GEMM kernel: `batch` products C_i = alpha op(A_i) op(B_i) + beta C_i
// (+ bias, ReLU), op(A)[i, p] = A[i * a_rs + p * a_cs], op(B)[p, j] = B[p * b_rs + j * b_cs],
// operand i starting `*_batch` floats after operand i-1.
struct TiledGemm {
  size_t m = 0, n = 0, k = 0, batch = 1;
  size_t k_last = size_t(-1);  // K of the last batch entry (a split-K tail); -1: k
  size_t c_plane = 0;          // > 0: C is a conv output [N, M, c_plane] (see gemm.cl)
  float alpha = 1.0f, beta = 0.0f;
  DeviceMemory a, b, c;
  size_t a_rs = 0, a_cs = 0, a_batch = 0, b_rs = 0, b_cs = 0, b_batch = 0, ldc = 0, c_batch = 0;
  DeviceMemory bias;
  int bias_kind = 0;  // 0 none, 1 per column, 2 per row
  bool relu = false;
};

// Every kernel of the program; kKernelNames (opencl_device.cpp) holds their names in this order.
enum class Kernel : int {
  relu_forward, relu_backward, axpby, gemm_epilogue, dropout,
  sum_rows, log_softmax_forward, log_softmax_backward, nll_loss_forward,
  nll_loss_backward, log_softmax_nll, count_correct, split_k_sum,
  im2col, col2im, conv_output_nchw, conv_grad_channel_major, conv_grad_sum, maxpool2d_forward,
  maxpool2d_backward,
  gather_rows_u32, gather_rows_u8, advance_step, sgd_update, adam_update,
  count_
};

// A kernel's buffer argument: the cl_mem and an offset in elements of `element_bytes`.
struct BufferArg {
  cl_mem mem;
  cl_ulong offset;
};

// An NDRange: `items` work-items in groups of `group` (rounded up), or an explicit 2-D shape.
struct LaunchRange {
  cl_uint dims = 1;
  size_t global[2] = {0, 1};
  size_t local[2] = {256, 1};
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

// A captured step (capture.cpp): kernel launches with their arguments set, in order, between
// re-run host-side operations (CLBlast calls, fills, copies).
struct CaptureRecording {
  struct Step {
    cl_kernel kernel = nullptr;  // null: `op` instead
    cl_uint dims = 1;
    size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
    const char* name = "";
    std::function<void()> op;
  };
  std::vector<Step> steps;
  std::vector<cl_kernel> kernels;  // owned, one per launch; released with the recording
  std::string failure;             // what the step called that cannot be captured ("" if none)
  CaptureRecording() = default;
  CaptureRecording(const CaptureRecording&) = delete;
  CaptureRecording& operator=(const CaptureRecording&) = delete;
  ~CaptureRecording() {
    for (cl_kernel kernel : kernels) clReleaseKernel(kernel);
  }
};

class OpenClDevice final : public Device {
 public:
  OpenClDevice(cl_platform_id platform, cl_device_id device, DeviceInfo info);
  ~OpenClDevice() override;

  const DeviceInfo& info() const override { return info_; }

  void* raw_allocate(size_t bytes) override;
  void raw_free(void* handle) noexcept override;
  void copy_from_host(DeviceMemory dst, const void* host, size_t bytes) override;
  void copy_to_host(void* host, DeviceMemory src, size_t bytes) override;
  void copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) override;
  void fill(DeviceMemory dst, int64_t count, float value) override;
  void synchronize() override;

  // Records the step's kernels with their arguments already set (one kernel object each) and
  // its CLBlast calls, fills and copies; replay() only enqueues (capture.cpp).
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

  // "opencl:0 (pthread-haswell-AMD EPYC)", for error messages.
  const std::string& label() const { return label_; }
  cl_device_id device_id() const { return device_; }
  // Compiles (or loads from the program cache) on first use.
  void ensure_program();

 private:
  // Argument helpers for launch(): buffers expand to (cl_mem, element offset).
  BufferArg buffer(DeviceMemory m, size_t element_bytes, const char* what) const;
  void set_args(cl_kernel, cl_uint) {}
  template <typename T, typename... Rest>
  void set_args(cl_kernel kernel, cl_uint index, const T& value, const Rest&... rest);
  // Sets the arguments and enqueues; an empty range enqueues nothing.
  template <typename... Args>
  void launch(Kernel kernel, const LaunchRange& range, const Args&... args);
  // Enqueues `kernel` now, or records it while capturing (`name` is for error messages).
  void submit(cl_kernel kernel, cl_uint dims, const size_t* global, const size_t* local,
              const char* name);
  // The kernel object to set arguments on: `shared`, or while capturing a fresh one from
  // `program` owned by the recording (replays keep their own arguments).
  cl_kernel kernel_for_launch(cl_program program, cl_kernel shared, const char* name);
  // While capturing: records `op` to be run at replay and returns true; else returns false.
  bool record(std::function<void()> op);
  // While capturing: marks the capture as failed (`what` cannot be recorded); no-op otherwise.
  void refuse_in_capture(const char* what) noexcept;
  static const char* kernel_name(Kernel kernel);
  void sgemm_clblast(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
                     DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta,
                     DeviceMemory c, size_t ldc);

  void sgemm(bool trans_a, bool trans_b, size_t m, size_t n, size_t k, float alpha,
             DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb, float beta, DeviceMemory c,
             size_t ldc);
  // batch GEMMs C_i = alpha op(A_i) op(B_i) (beta 0) with X_i = X + i * x_stride floats; the
  // last one multiplies k_last terms (a split-K tail; k_last == k: all alike).
  void sgemm_strided_batched(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                             float alpha, DeviceMemory a, size_t lda, size_t a_stride, DeviceMemory b,
                             size_t ldb, size_t b_stride, DeviceMemory c, size_t ldc,
                             size_t c_stride, size_t batch, size_t k_last);
  // How many K slices split_k_gemm cuts this product into (1: none; ops_blas.cpp says when).
  size_t split_k_slices(const GemmArgs& g) const;
  // The product as a split-K sum with its epilogue; false when the shape does not call for it.
  bool split_k_gemm(const GemmArgs& g, size_t lda, size_t ldb, size_t ldc);
  // Whether the own tiled kernel takes a product of `work` multiply-adds on this device (the
  // TRIDENT_OPENCL_OWN_GEMM policy; shape limits aside).
  bool own_gemm_takes(double work) const;
  void reap_uploads(bool wait);
  // Runs `t` on the own tiled kernel and returns true, or returns false (nothing queued) when the
  // mode or the shape leaves it to CLBlast.
  bool tiled_gemm(const TiledGemm& t);
  // The same as sgemm / sgemm_strided_batched's arguments, as a TiledGemm.
  static TiledGemm tiled_args(bool trans_a, bool trans_b, size_t m, size_t n, size_t k,
                              float alpha, DeviceMemory a, size_t lda, DeviceMemory b, size_t ldb,
                              float beta, DeviceMemory c, size_t ldc);
  cl_kernel gemm_kernel(int variant);

  DeviceInfo info_;
  std::string label_;
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  uint64_t max_alloc_bytes_ = 0;

  std::once_flag program_once_;
  cl_program program_ = nullptr;
  std::vector<cl_kernel> kernels_;

  // The own GEMM kernel, one program per tile shape (ops_gemm_tiled.cpp), built on first use.
  static constexpr int kGemmVariants = 3;
  std::once_flag gemm_once_[kGemmVariants];
  cl_program gemm_programs_[kGemmVariants] = {};
  cl_kernel gemm_kernels_[kGemmVariants] = {};

  // CLBlast's scratch for padded GEMMs, grown to the largest need and kept (no per-call malloc).
  cl_mem gemm_temp_ = nullptr;
  size_t gemm_temp_bytes_ = 0;
  // split_k_gemm's partial products, grown to the largest need and kept.
  cl_mem split_k_ = nullptr;
  size_t split_k_bytes_ = 0;
  // Scratch buffers outgrown by grow_scratch, released with the device.
  std::vector<cl_mem> retired_scratch_;
  // Makes `scratch` (of `bytes`) at least `needed` bytes, retiring the old buffer.
  void grow_scratch(cl_mem& scratch, size_t& bytes, size_t needed);
  std::map<std::tuple<int, int, size_t, size_t, size_t, size_t, size_t, size_t, size_t, size_t,
                      size_t>, size_t> gemm_temp_sizes_;

  // TRIDENT_OPENCL_PROFILE: event timestamps of every command (null when off; profiler.h).
  std::unique_ptr<KernelProfile> profile_;
  // The event slot for an enqueue: &event while profiling, else null (no event is made).
  cl_event* profile_slot(cl_event& event) { return profile_ ? &event : nullptr; }

  // The capture in progress (null when none): recorded work and the kernel objects it owns.
  std::unique_ptr<CaptureRecording> recording_;

  // Host copies of small uploads in flight (copy_from_host returns before the write runs).
  struct Upload { cl_event done; std::unique_ptr<unsigned char[]> bytes; };
  std::vector<Upload> uploads_;
};

template <typename T, typename... Rest>
void OpenClDevice::set_args(cl_kernel kernel, cl_uint index, const T& value, const Rest&... rest) {
  if constexpr (std::is_same_v<T, BufferArg>) {
    TRIDENT_CL_CHECK(clSetKernelArg(kernel, index, sizeof(cl_mem), &value.mem), label_);
    TRIDENT_CL_CHECK(clSetKernelArg(kernel, index + 1, sizeof(cl_ulong), &value.offset), label_);
    set_args(kernel, index + 2, rest...);
  } else {
    static_assert(std::is_arithmetic_v<T>, "kernel arguments are BufferArg or cl_ scalars");
    TRIDENT_CL_CHECK(clSetKernelArg(kernel, index, sizeof(T), &value), label_);
    set_args(kernel, index + 1, rest...);
  }
}

template <typename... Args>
void OpenClDevice::launch(Kernel kernel, const LaunchRange& range, const Args&... args) {
  if (range.global[0] == 0 || range.global[1] == 0) return;
  ensure_program();
  const char* name = kernel_name(kernel);
  cl_kernel k = kernel_for_launch(program_, kernels_[static_cast<int>(kernel)], name);
  set_args(k, 0, args...);
  submit(k, range.dims, range.global, range.local, name);
}

// Sizes the kernels index with 32-bit integers; larger ones are refused with a clear message.
cl_uint checked_u32(int64_t value, const char* what);

}  // namespace trident::opencl
