// A test backend that implements only the required Device slots, each with the float64
// reference loops (kernels/reference), on host memory. Every optional slot (fused GEMM
// epilogue, convolution, the fused training head, capture) runs core's default: this is the
// proof that a new backend works once it has the required core.
#pragma once
#include <string>

#include "trident/core/device.h"

namespace trident::testing {

class ReferenceDevice : public Device {
 public:
  explicit ReferenceDevice(int index = 0, const std::string& backend = "reference",
                           const std::string& type = "cpu");
  ~ReferenceDevice() override;
  const DeviceInfo& info() const override { return info_; }

 protected:
  void* do_allocate(size_t bytes) override;
  void do_free(void* handle) noexcept override;
  void do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) override;
  void do_copy_to_host(void* host, DeviceMemory src, size_t bytes) override;
  void do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) override;
  void do_fill(const Tensor& dst, float value) override;
  void do_synchronize() override {}
  void do_gemm(const GemmArgs& args) override;
  void do_axpby(const Tensor& x, const Tensor& y, float a, float b) override;
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
  DeviceInfo info_;
};

}  // namespace trident::testing
