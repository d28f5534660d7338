// The oneTBB CPU device: host memory, ops run at once on the calling thread inside the device's
// own tbb::task_arena, so several CPU "devices" (TRIDENT_CPU_DEVICES) split the cores between them.
#pragma once
#include <oneapi/tbb/task_arena.h>

#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/thread_annotations.h"

namespace trident {

// Not final: tests derive a fake that captures steps (tests/fake_collective.h).
class CpuDevice : public Device {
 public:
  // `threads` worker slots in this device's arena; `index` its position in the cpu backend.
  CpuDevice(int index, int threads, const std::string& cpu_name);
  ~CpuDevice() override;

  const DeviceInfo& info() const override { return info_; }
  const void* memory_space() const override;  // the host's: every CPU device shares it
  int threads() const { return threads_; }

 protected:
  void* do_allocate(size_t bytes) override;
  void do_free(void* handle) noexcept override;
  void do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) override;
  void do_copy_to_host(void* host, DeviceMemory src, size_t bytes) override;
  void do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) override;
  void do_fill(const Tensor& dst, float value) override;
  void do_convert(const Tensor& src, const Tensor& dst) override;
  bool do_native(OpFamily family, DType dtype) const override;
  bool do_native_mixed(OpFamily family) const override;
  void do_scale(const Tensor& x, const Tensor& factor, const Tensor& y) override;
  void do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                            const LossScaleParams& params) override;
  void do_synchronize() override {}  // every op has finished when it returns

  void do_gemm(const GemmArgs& args) override;
  void do_gemm_fused(const GemmArgs& args) override;
  void do_axpby(const Tensor& x, const Tensor& y, float a, float b) override;
  void do_axpby_activation(const Tensor& x, const Tensor& y, float a, float b,
                           UnaryOp activation, float alpha) override;
  void do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) override;
  void do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                         const Tensor& dx, float alpha) override;
  void do_dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset, float p,
                  uint64_t seed, uint32_t stream, const Tensor& step_state) override;
  void do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                         const Tensor& y, int64_t outer, int64_t channels,
                         int64_t inner) override;
  void do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out, int64_t outer,
                       int64_t channels, int64_t inner, float beta) override;

  size_t do_conv2d_workspace_bytes(const Conv2dShape& s) const override;
  bool do_conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor& b,
                         const Tensor& y, const Tensor& workspace) override;
  bool do_conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                          const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                          const Tensor& workspace, bool workspace_valid,
                          bool /*weight_gradient_beside*/) override;
  void do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) override;
  void do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) override;
  void do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                            const Tensor& argmax) override;
  void do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                             const Tensor& dx) override;
  void do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) override;
  void do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& dx) override;
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

  void do_gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                      const Tensor& dst) override;
  void do_gather_samples(const Tensor& src, const Tensor& table, const Tensor& step_state,
                         const SampleTransform& transform, const Tensor& dst) override;
  void do_advance_step(const Tensor& step_state) override;
  void do_sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                     const SgdParams& hp, const UpdateControl& control,
                     const Tensor& step_state) override;
  void do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                      const Tensor& v, const AdamParams& hp, const UpdateControl& control,
                      const Tensor& step_state) override;

 private:
  // Runs f inside this device's arena, so the kernels' tbb::parallel_for use its threads only
  // (on the calling thread, or on one of the arena's when its slots are taken).
  template <class F>
  void run(const F& f) {
    TsanForkJoin edges;
    arena_.execute(edges.around(f));
  }

  DeviceInfo info_;
  int threads_;
  tbb::task_arena arena_;
};

// How many CPU devices to expose and the threads of each: TRIDENT_CPU_DEVICES (default 1) splits
// TRIDENT_NUM_THREADS (default: the hardware threads this process may use) between them.
struct CpuSplit {
  int devices = 1;
  std::vector<int> threads;
};
CpuSplit cpu_device_split();

}  // namespace trident
