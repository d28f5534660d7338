// A test backend that holds float16 and bfloat16 and computes the gemm, elementwise, channel and
// conv2d families natively on 16-bit storage (float64 loops of kernels/reference, each stored
// 16-bit value rounded once to nearest even), the other families staged through float32 by the
// front. It runs core's default compositions at 16 bits (the fused GEMM epilogue after C is
// rounded, the convolution through 16-bit columns), which the tolerances of the 16-bit
// conformance suite must admit, and it differs from the CPU backend in every float32 rounding,
// as another backend would: the training checks compare it with cpu:0 in bf16 and fp16.
#pragma once
#include <string>

#include "tests/reference_device.h"

namespace trident::testing {

class HalfReferenceDevice : public ReferenceDevice {
 public:
  explicit HalfReferenceDevice(int index = 0) : ReferenceDevice(index, "half-reference", "cpu") {}

 protected:
  bool do_native(OpFamily family, DType dtype) const override;
  void do_convert(const Tensor& src, const Tensor& dst) override;
  void do_fill(const Tensor& dst, float value) override;
  void do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                            const LossScaleParams& params) override;
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
};

}  // namespace trident::testing
