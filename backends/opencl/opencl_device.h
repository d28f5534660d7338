// OpenClDevice: one OpenCL device behind the Device contract. The queue (ClQueue: context,
// in-order queue, programs, launches, capture) and the GEMM policy (GemmEngine: own tiled kernel
// or CLBlast, split-K) are its parts; the op slots live in ops_<family>.cpp beside the kernels of
// kernels/opencl/<family>.cl.
#pragma once
#include <CL/cl.h>

#include <cstdint>

#include "trident/backends/opencl/cl_queue.h"
#include "trident/backends/opencl/gemm_engine.h"
#include "trident/core/device.h"

namespace trident::opencl {

// Per-channel reductions in pieces (channel_sums, batch norm): how a channel's outer * inner
// values are cut so that the device is busy however few the channels (ops_channel.cpp).
struct ChannelSplit {
  cl_uint pieces = 1;     // ranges per channel; 1: each channel's group writes the result
  cl_uint per_piece = 0;  // positions per range (the last may be shorter)
};

class OpenClDevice final : public Device {
 public:
  OpenClDevice(cl_platform_id platform, cl_device_id device, DeviceInfo info);
  ~OpenClDevice() override;

  const DeviceInfo& info() const override { return info_; }
  // "opencl:0 (pthread-haswell-AMD EPYC)", for error messages.
  const std::string& label() const { return queue_.label(); }
  cl_device_id device_id() const { return queue_.device(); }
  // Compiles (or loads from the program cache) the main program now rather than at first use.
  void ensure_program() { queue_.ensure_program(); }

 protected:
  void* do_allocate(size_t bytes) override;
  void do_free(void* handle) noexcept override;
  void do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) override;
  void do_copy_to_host(void* host, DeviceMemory src, size_t bytes) override;
  void do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) override;
  void do_fill(const Tensor& dst, float value) override;
  // ops_convert.cpp
  bool do_native(OpFamily family, DType dtype) const override;
  void do_convert(const Tensor& src, const Tensor& dst) override;
  void do_scale(const Tensor& x, const Tensor& factor, const Tensor& y) override;
  void do_synchronize() override;
  std::unique_ptr<CapturedWork> do_capture(const std::function<void()>& step) override;
  // queue_beside: a second in-order queue, forked from and joined to the main one by markers
  // (ClQueue; recorded by a capture), on GPUs unless TRIDENT_OPENCL_SIDE_QUEUE says otherwise.
  // Every op may go there: the reductions and the GEMM engine have scratch per queue, and no
  // kernel waits for the whole device.
  bool do_has_side_queue() const override { return side_queue_; }
  bool do_side_queue_runs_every_op() const override { return true; }
  void do_begin_beside() override { queue_.fork_side(); }
  void do_end_beside() override { queue_.back_to_main(true); }
  void do_join_beside() override { queue_.join_side(); }
  void do_join_last_beside() override { queue_.join_marked_side(); }

  // ops_gemm.cpp
  void do_gemm(const GemmArgs& args) override;
  void do_gemm_fused(const GemmArgs& args) override;
  // ops_elementwise.cpp
  void do_axpby(const Tensor& x, const Tensor& y, float a, float b) override;
  void do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                           UnaryOp activation, float alpha) override;
  void do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) override;
  void do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx, float alpha) override;
  void do_dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset, float p,
                  uint64_t seed, uint32_t stream, const Tensor& step_state) override;
  // ops_channel.cpp
  void do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                         const Tensor& y, int64_t outer, int64_t channels,
                         int64_t inner) override;
  void do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out, int64_t outer,
                       int64_t channels, int64_t inner, float beta) override;
  // ops_conv2d.cpp
  size_t do_conv2d_workspace_bytes(const Conv2dShape& s) const override;
  bool do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                         const Tensor& y, const Tensor& workspace) override;
  bool do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                          const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                          const Tensor& workspace, bool workspace_valid,
                          bool weight_gradient_beside) override;
  // ops_im2col.cpp
  void do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) override;
  void do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) override;
  // ops_pool2d.cpp
  void do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                            const Tensor& argmax) override;
  void do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                             const Tensor& dx) override;
  void do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) override;
  void do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& dx) override;
  // ops_batchnorm.cpp
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
  // ops_softmax_nll.cpp
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
  // ops_gather.cpp
  void do_gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                      const Tensor& dst) override;
  void do_gather_samples(const Tensor& src, const Tensor& table, const Tensor& step_state,
                         const SampleTransform& transform, const Tensor& dst) override;
  void do_advance_step(const Tensor& step_state) override;
  // ops_optimizers.cpp
  void do_sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                     const SgdParams& hp, const UpdateControl& control,
                     const Tensor& step_state) override;
  void do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                      const Tensor& v, const AdamParams& hp, const UpdateControl& control,
                      const Tensor& step_state) override;
  void do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                            const LossScaleParams& params) override;

 private:
  // The device's error flag as a kernel argument (core/device.h).
  BufferArg error_flag_arg();
  // The float32 weights a convolution's float32 GEMMs multiply (ops_conv2d.cpp).
  DeviceMemory conv_weights(const Tensor& w, const Tensor& workspace, size_t w32_offset);
  // ops_conv2d_winograd.cpp: float32 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3).
  bool winograd_conv(const Conv2dShape& s) const;
  // TRIDENT_OPENCL_WINOGRAD (default: on for GPUs, off for CPUs) and local memory enough for
  // its kernels (asked once).
  bool winograd_available() const;
  size_t winograd_workspace_bytes(const Conv2dShape& s) const;
  void winograd_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                        const Tensor& y, const Tensor& workspace);
  // weight_gradient_beside: dw's and db's kernels on the side queue (conv2d_backward).
  void winograd_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                         const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                         const Tensor& workspace, bool weight_gradient_beside);
  // y = conv(x, the kernel transformed into U) + b (b may be undefined) for s.
  void winograd_convolution(const Conv2dShape& s, DeviceMemory x, DeviceMemory U,
                            const Tensor& b, DeviceMemory y);
  // ops_batchnorm.cpp: batchnorm_forward, and with a residual (undefined: none) its add form.
  void normalise(const BatchNormShape& s, bool training, const Tensor& x, const Tensor& residual,
                 const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                 const Tensor& running_var, const Tensor& y, const Tensor& save_mean,
                 const Tensor& save_invstd);
  // How to cut per-channel reductions of this shape; `floats_per_partial` partial values per
  // (piece, channel) and `reserved` more floats must fit in the reduction scratch.
  ChannelSplit channel_split(int64_t outer, int64_t channels, int64_t inner,
                             size_t floats_per_partial, size_t reserved) const;

  DeviceInfo info_;
  ClQueue queue_;
  GemmEngine gemm_;
  // Partial sums of the per-channel reductions (ChannelSplit), made with the device so that no
  // op allocates: one per queue (main, side), reduce_scratch() the current one's.
  ClBuffer reduce_scratch_[2];
  const ClBuffer& reduce_scratch() const { return reduce_scratch_[queue_.on_side()]; }
  bool winograd_ = false;  // winograd_available(), at construction
  // 16-bit layers too: only where TRIDENT_OPENCL_WINOGRAD=1 asks (not yet timed on a GPU).
  bool winograd_16bit_ = false;
  bool side_queue_ = false;  // TRIDENT_OPENCL_SIDE_QUEUE (default: on GPUs), at construction
};

}  // namespace trident::opencl
