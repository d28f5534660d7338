// CudaDevice: one NVIDIA GPU behind the Device contract. It holds the stream (and the side
// stream of queue_beside), the GEMM policy (cuBLAS / cuBLASLt, backends/cuda/cublas_gemm.h) and
// the reduction scratch; every op queues kernels from kernels/cuda on the stream, never
// synchronises and never allocates, so that a whole training step can be captured as a CUDA
// graph. The ops' host sides are backends/cuda/ops_<family>.cpp, one file per op family as in
// kernels/cuda.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "trident/core/device.h"
#include "trident/kernels/cuda/kernel_context.h"

namespace trident::cuda {

class CublasGemm;

class CudaDevice final : public Device {
 public:
  // Makes `ordinal` current on the calling thread and creates the stream, handles and scratch.
  CudaDevice(int ordinal, DeviceInfo info, bool tf32);
  ~CudaDevice() override;

  const DeviceInfo& info() const override { return info_; }

  // For the NCCL collective (backends/cuda/nccl_collective.cpp): every op of this device is
  // queued on stream() (but queue_beside's work); ordinal() is the CUDA device number.
  cudaStream_t stream() const { return main_stream_; }
  int ordinal() const { return ordinal_; }
  bool tf32_enabled() const { return tf32_; }
  // Makes this device current on the calling thread (several threads drive several devices).
  void make_current() const;

 protected:
  // ---- cuda_device.cpp: memory, copies, ordering, capture
  void* do_allocate(size_t bytes) override;
  void do_free(void* handle) noexcept override;
  void do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) override;
  void do_copy_to_host(void* host, DeviceMemory src, size_t bytes) override;
  void do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) override;
  void do_fill(const Tensor& dst, float value) override;
  void do_synchronize() override;
  // 16-bit floats: every family computes them natively (float32 arithmetic inside the kernels).
  bool do_native(OpFamily family, DType dtype) const override;
  void do_convert(const Tensor& src, const Tensor& dst) override;
  void do_scale(const Tensor& x, const Tensor& factor, const Tensor& y) override;
  std::unique_ptr<CapturedWork> do_capture(const std::function<void()>& step) override;
  // queue_beside: a second stream of lower priority with its own reduction scratch, forked
  // from and joined to the main one by events (both recordable inside a graph capture).
  bool do_has_side_queue() const override { return true; }
  // The side stream has its own reduction scratch and cuBLAS handle, and no cooperative launches.
  bool do_side_queue_runs_every_op() const override { return true; }
  void do_begin_beside() override;
  void do_end_beside() override;
  void do_join_beside() override;
  void do_join_last_beside() override;

  // ---- ops_gemm.cpp
  void do_gemm(const GemmArgs& args) override;
  void do_gemm_fused(const GemmArgs& args) override;

  // ---- ops_elementwise.cpp
  void do_axpby(const Tensor& x, const Tensor& y, float a, float b) override;
  void do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                           UnaryOp activation, float alpha) override;
  void do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) override;
  void do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx, float alpha) override;
  void do_unary_backward_sum(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                             const Tensor& dy_more, const Tensor& dx, float alpha) override;
  void do_dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset, float p,
                  uint64_t seed, uint32_t stream, const Tensor& step_state) override;

  // ---- ops_channel.cpp
  void do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                         const Tensor& y, int64_t outer, int64_t channels,
                         int64_t inner) override;
  void do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out, int64_t outer,
                       int64_t channels, int64_t inner, float beta) override;

  // ---- ops_conv2d.cpp
  size_t do_conv2d_workspace_bytes(const Conv2dShape& s) const override;
  bool do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                         const Tensor& y, const Tensor& workspace) override;
  bool do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                          const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                          const Tensor& workspace, bool workspace_valid,
                          bool weight_gradient_beside) override;
  void do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) override;
  void do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) override;

  // ---- ops_pool2d.cpp
  void do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                            const Tensor& argmax) override;
  void do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                             const Tensor& dx) override;
  void do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) override;
  void do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& dx) override;

  // ---- ops_batchnorm.cpp
  void do_batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                            const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, const Tensor& y, const Tensor& save_mean,
                            const Tensor& save_invstd) override;
  void do_batchnorm_add_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                const Tensor& residual, const Tensor& gamma, const Tensor& beta,
                                const Tensor& running_mean, const Tensor& running_var,
                                const Tensor& y, const Tensor& save_mean,
                                const Tensor& save_invstd) override;
  void do_batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                             const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd, const Tensor& dx, const Tensor& dgamma,
                             const Tensor& dbeta, const Tensor& beta) override;

  // ---- ops_softmax_nll.cpp
  void do_log_softmax_forward(const Tensor& x, const Tensor& y) override;
  void do_log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
  void do_nll_loss_forward(const Tensor& logp, const Tensor& labels, const Tensor& loss,
                           bool accumulate, float label_smoothing) override;
  void do_nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                            float label_smoothing) override;
  void do_log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                          float label_smoothing, const Tensor& y, const Tensor& loss,
                          bool accumulate, const Tensor& dx) override;
  void do_mse_loss(const Tensor& x, const Tensor& labels, float grad_scale, const Tensor& loss,
                   bool accumulate, const Tensor& dx) override;
  void do_count_correct(const Tensor& scores, const Tensor& labels,
                        const Tensor& correct) override;

  // ---- ops_gather.cpp
  void do_gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                      const Tensor& dst) override;
  void do_gather_samples(const Tensor& src, const Tensor& table, const Tensor& step_state,
                         const SampleTransform& transform, const Tensor& dst) override;
  void do_advance_step(const Tensor& step_state) override;

  // ---- ops_optimizers.cpp
  void do_sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                     const SgdParams& hp, const UpdateControl& control,
                     const Tensor& step_state) override;
  void do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                      const Tensor& v, const AdamParams& hp, const UpdateControl& control,
                      const Tensor& step_state) override;
  void do_sgd_update_with_copy(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                               const SgdParams& hp, const UpdateControl& control,
                               const Tensor& step_state, const Tensor& compute_copy) override;
  void do_adam_update_with_copy(const Tensor& params, const Tensor& grads, const Tensor& m,
                                const Tensor& v, const AdamParams& hp,
                                const UpdateControl& control, const Tensor& step_state,
                                const Tensor& compute_copy) override;
  void do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                            const LossScaleParams& params) override;

 private:
  // Makes the device current and returns what its kernels are launched with; the error flag
  // only for ops that may meet bad data (it is allocated on first use, before any capture).
  KernelContext kernel_context(bool with_error_flag = false);
  // The side stream's context (its scratch, no cooperative launches), for work an op forks
  // there itself (conv2d_backward's weight gradient); fork_side_stream makes the side stream
  // wait for the main stream's work so far.
  KernelContext side_kernel_context();
  void fork_side_stream();
  // fork_side_stream for an op's own side work: the next join waits for it.
  void fork_work_beside() {
    fork_side_stream();
    note_work_beside();
  }
  // Throws BackendError naming the kernel if its launch failed (cudaGetLastError).
  void check_launch(const char* kernel) const;
  // Whether this convolution runs as implicit GEMM, or as a direct convolution (few input
  // channels) (backends/cuda/ops_conv2d.cpp says where).
  bool implicit_conv(const Conv2dShape& s) const;
  bool direct_conv(const Conv2dShape& s) const;
  // ---- ops_conv2d_winograd.cpp: float32 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3)
  bool winograd_conv(const Conv2dShape& s) const;
  size_t winograd_workspace_bytes(const Conv2dShape& s) const;
  void winograd_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                        const Tensor& y, const Tensor& workspace);
  void winograd_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                         const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                         const Tensor& workspace, bool weight_gradient_beside);

  DeviceInfo info_;
  int ordinal_ = 0;
  bool tf32_ = false;
  // Convolutions through kernels/cuda/implicit_conv.h where they fit (TRIDENT_CUDA_IMPLICIT_CONV,
  // default on, and sm_80 code in the binary); otherwise im2col + cuBLAS.
  bool implicit_conv_ = false;
  bool direct_conv_ = false;  // kernels/cuda/direct_conv.h where it fits (the same variable)
  bool winograd_conv_ = false;  // TRIDENT_CUDA_WINOGRAD (on): see ops_conv2d_winograd.cpp
  bool cooperative_launch_ = false;  // TRIDENT_CUDA_COOPERATIVE (on) and the device allows it
  // TRIDENT_CUDA_DEPENDENT_LAUNCH (on) and compute capability 9.0+ (kernels/cuda/launch.cuh).
  bool dependent_launch_ = false;
  bool warpgroup_mma_ = false;  // KernelContext::warpgroup_mma
  // The stream ops are queued on: main_stream_, or side_stream_ while queue_beside's work is
  // being queued (scratch_ then the side stream's own reduction scratch).
  cudaStream_t stream_ = nullptr;
  cudaStream_t main_stream_ = nullptr, side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  cudaEvent_t last_beside_event_ = nullptr;  // the end of the last queue_beside call's work
  // cuBLAS handles (and their workspaces) on the main and the side stream; gemm() picks the one
  // of the stream ops are queued on.
  std::unique_ptr<CublasGemm> gemm_, side_gemm_;
  CublasGemm& gemm() { return stream_ == side_stream_ ? *side_gemm_ : *gemm_; }
  void* scratch_memory_ = nullptr;  // both streams' ReduceScratch buffers, allocated once
  ReduceScratch scratch_, main_scratch_, side_scratch_;
};

// The device address of a DeviceMemory (handle plus byte offset); nullptr for a null handle.
template <typename T>
T* device_ptr(DeviceMemory m) {
  return m.handle ? reinterpret_cast<T*>(static_cast<char*>(m.handle) + m.offset) : nullptr;
}
// The device address of a tensor's data; nullptr for an undefined tensor (optional operands).
template <typename T = float>
T* device_ptr(const Tensor& t) {
  return device_ptr<T>(t.memory());
}
// A float tensor's data and type for the launchers of mixed types ({nullptr} when undefined).
inline FloatData float_data(const Tensor& t) {
  return t.defined() ? FloatData{device_ptr<void>(t), t.dtype()} : FloatData{};
}

}  // namespace trident::cuda

namespace trident {
using cuda::CudaDevice;  // as the NCCL collective and tests name it
}  // namespace trident
