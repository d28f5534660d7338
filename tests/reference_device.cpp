// ReferenceDevice: the required slots on host memory through kernels/reference (see the header).
#include "tests/reference_device.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "trident/core/error.h"
#include "trident/kernels/reference/reference_ops.h"

namespace trident::testing {
namespace {

template <class T = float>
T* at(const Tensor& t) {
  if (!t.defined()) return nullptr;
  const DeviceMemory m = t.memory();
  return reinterpret_cast<T*>(static_cast<char*>(m.handle) + m.offset);
}

char* at(DeviceMemory m) { return static_cast<char*>(m.handle) + m.offset; }

// Labels checked as a GPU kernel would: the row is never read past the scores.
void check_labels(const Tensor& labels, int64_t cols) {
  const int32_t* l = at<int32_t>(labels);
  for (int64_t r = 0; r < labels.numel(); ++r)
    if (l[r] < 0 || l[r] >= cols)
      throw ShapeError("reference device: label " + std::to_string(l[r]) + " outside [0, " +
                       std::to_string(cols) + ")");
}

void check_gather(const Tensor& src, const Tensor& table, const Tensor& step_state,
                  int64_t rows) {
  const uint32_t position = at<uint32_t>(step_state)[0];
  if ((int64_t(position) + 1) * rows > table.numel())
    throw ShapeError("reference device: batch position " + std::to_string(position) +
                     " runs past the index table");
  const int32_t* t = at<int32_t>(table) + int64_t(position) * rows;
  for (int64_t i = 0; i < rows; ++i)
    if (t[i] < 0 || t[i] >= src.dim(0))
      throw ShapeError("reference device: gather index " + std::to_string(t[i]) +
                       " outside the source");
}

reference::HostUpdateControl host_control(const UpdateControl& c) {
  reference::HostUpdateControl h;
  h.schedule = at(c.schedule);
  h.schedule_rows = c.schedule.defined() ? c.schedule.numel() / 2 : 0;
  h.grad_sumsq = at(c.grad_sumsq);
  h.max_norm = c.max_norm;
  h.loss_scale = at(c.loss_scale);
  return h;
}

}  // namespace

ReferenceDevice::ReferenceDevice(int index, const std::string& backend, const std::string& type) {
  info_.backend = backend;
  info_.index = index;
  info_.type = type;
  info_.name = "float64 reference loops (" + type + ")";
  info_.vendor = "trident tests";
  info_.driver = "none";
  info_.compute_units = 1;
}

ReferenceDevice::~ReferenceDevice() { release_pool(); }

void* ReferenceDevice::do_allocate(size_t bytes) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (!p) throw OutOfMemory(info_.id() + ": out of host memory");
  return p;
}
void ReferenceDevice::do_free(void* handle) noexcept { std::free(handle); }
void ReferenceDevice::do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) {
  std::memcpy(at(dst), host, bytes);
}
void ReferenceDevice::do_copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  std::memcpy(host, at(src), bytes);
}
void ReferenceDevice::do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  std::memmove(at(dst), at(src), bytes);
}
void ReferenceDevice::do_fill(const Tensor& dst, float value) {
  if (dst.dtype() == DType::i32) {
    for (int64_t i = 0; i < dst.numel(); ++i) at<int32_t>(dst)[i] = int32_t(value);
  } else if (dst.dtype() == DType::f32) {
    reference::fill(at(dst), dst.numel(), value);
  } else {
    if (value != 0.0f) throw ShapeError("reference device: non-zero fill of a 16/8-bit tensor");
    std::memset(at<void>(dst), 0, dst.bytes());
  }
}
void ReferenceDevice::do_gemm(const GemmArgs& g) {
  reference::HostGemmArgs h;
  h.trans_a = g.trans_a; h.trans_b = g.trans_b; h.m = g.m; h.n = g.n; h.k = g.k;
  h.alpha = g.alpha; h.beta = g.beta;
  h.a = at(g.a); h.b = at(g.b); h.c = at(g.c);
  h.lda = g.lda; h.ldb = g.ldb; h.ldc = g.ldc;
  reference::gemm(h);
}
void ReferenceDevice::do_axpby(const Tensor& x, const Tensor& y, float a, float b) {
  reference::axpby(at(x), at(y), y.numel(), a, b);
}
void ReferenceDevice::do_unary_forward(UnaryOp op, const Tensor& x, const Tensor& y,
                                       float alpha) {
  reference::unary_forward(op, at(x), at(y), x.numel(), alpha);
}
void ReferenceDevice::do_unary_backward(UnaryOp op, const Tensor& x, const Tensor& y,
                                        const Tensor& dy, const Tensor& dx, float alpha) {
  reference::unary_backward(op, at(x), at(y), at(dy), at(dx), dy.numel(), alpha);
}
void ReferenceDevice::do_dropout(const Tensor& x, const Tensor& y, int64_t group,
                                 int64_t group_offset, float p, uint64_t seed, uint32_t stream,
                                 const Tensor& step_state) {
  reference::dropout(at(x), at(y), x.numel(), group, group_offset, p, seed, stream,
                     at<uint32_t>(step_state));
}
void ReferenceDevice::do_channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                                        const Tensor& y, int64_t outer, int64_t channels,
                                        int64_t inner) {
  reference::channel_affine(at(x), at(scale), at(shift), at(y), outer, channels, inner);
}
void ReferenceDevice::do_channel_sums(const Tensor& x, const Tensor& y, const Tensor& out,
                                      int64_t outer, int64_t channels, int64_t inner,
                                      float beta) {
  reference::channel_sums(at(x), at(y), at(out), outer, channels, inner, beta);
}
void ReferenceDevice::do_im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  reference::im2col(s, at(x), at(col));
}
void ReferenceDevice::do_col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  reference::col2im(s, at(col), at(dx));
}
void ReferenceDevice::do_maxpool2d_forward(const Pool2dShape& s, const Tensor& x,
                                           const Tensor& y, const Tensor& argmax) {
  reference::maxpool2d_forward(s, at(x), at(y), at<int32_t>(argmax));
}
void ReferenceDevice::do_maxpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                            const Tensor& argmax, const Tensor& dx) {
  reference::maxpool2d_backward(s, at(dy), at<int32_t>(argmax), at(dx));
}
void ReferenceDevice::do_avgpool2d_forward(const Pool2dShape& s, const Tensor& x,
                                           const Tensor& y) {
  reference::avgpool2d_forward(s, at(x), at(y));
}
void ReferenceDevice::do_avgpool2d_backward(const Pool2dShape& s, const Tensor& dy,
                                            const Tensor& dx) {
  reference::avgpool2d_backward(s, at(dy), at(dx));
}
void ReferenceDevice::do_batchnorm_forward(const BatchNormShape& s, bool training,
                                           const Tensor& x, const Tensor& gamma,
                                           const Tensor& beta, const Tensor& running_mean,
                                           const Tensor& running_var, const Tensor& y,
                                           const Tensor& save_mean, const Tensor& save_invstd) {
  reference::batchnorm_forward(s, training, at(x), at(gamma), at(beta), at(running_mean),
                               at(running_var), at(y), at(save_mean), at(save_invstd));
}
void ReferenceDevice::do_batchnorm_backward(const BatchNormShape& s, const Tensor& x,
                                            const Tensor& dy, const Tensor& gamma,
                                            const Tensor& save_mean, const Tensor& save_invstd,
                                            const Tensor& dx, const Tensor& dgamma,
                                            const Tensor& dbeta, const Tensor& beta) {
  reference::batchnorm_backward(s, at(x), at(dy), at(gamma), at(save_mean), at(save_invstd),
                                at(dx), at(dgamma), at(dbeta), at(beta));
}
void ReferenceDevice::do_log_softmax_forward(const Tensor& x, const Tensor& y) {
  reference::log_softmax_forward(at(x), at(y), x.dim(0), x.dim(1));
}
void ReferenceDevice::do_log_softmax_backward(const Tensor& y, const Tensor& dy,
                                              const Tensor& dx) {
  reference::log_softmax_backward(at(y), at(dy), at(dx), y.dim(0), y.dim(1));
}
void ReferenceDevice::do_nll_loss_forward(const Tensor& logp, const Tensor& labels,
                                          const Tensor& loss, bool accumulate,
                                          float label_smoothing) {
  check_labels(labels, logp.dim(1));
  reference::nll_loss_forward(at(logp), at<int32_t>(labels), logp.dim(0), logp.dim(1), at(loss),
                              accumulate, label_smoothing);
}
void ReferenceDevice::do_nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                                           float label_smoothing) {
  check_labels(labels, dlogp.dim(1));
  reference::nll_loss_backward(at<int32_t>(labels), dlogp.dim(0), dlogp.dim(1), scale, at(dlogp),
                               label_smoothing);
}
void ReferenceDevice::do_mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                                  const Tensor& loss, bool accumulate, const Tensor& dx) {
  check_labels(labels, x.dim(1));
  reference::mse_loss(at(x), at<int32_t>(labels), x.dim(0), x.dim(1), grad_scale, at(loss),
                      accumulate, at(dx));
}
void ReferenceDevice::do_count_correct(const Tensor& scores, const Tensor& labels,
                                       const Tensor& correct) {
  check_labels(labels, scores.dim(1));
  reference::count_correct(at(scores), at<int32_t>(labels), scores.dim(0), scores.dim(1),
                           at(correct));
}
void ReferenceDevice::do_gather_rows(const Tensor& src, const Tensor& table,
                                     const Tensor& step_state, const Tensor& dst) {
  check_gather(src, table, step_state, dst.dim(0));
  reference::gather_rows(at<void>(src), dst.bytes() / size_t(dst.dim(0)), at<int32_t>(table),
                         dst.dim(0), at<uint32_t>(step_state), at<void>(dst));
}
void ReferenceDevice::do_gather_samples(const Tensor& src, const Tensor& table,
                                        const Tensor& step_state, const SampleTransform& t,
                                        const Tensor& dst) {
  check_gather(src, table, step_state, dst.dim(0));
  reference::HostSampleTransform h;
  h.scale = t.scale;
  h.mean = at(t.mean);
  h.inv_std = at(t.inv_std);
  h.crop_padding = t.crop_padding;
  h.horizontal_flip = t.horizontal_flip;
  h.seed = t.seed;
  h.stream = t.stream;
  h.sample_offset = t.sample_offset;
  reference::gather_samples(at<void>(src), src.dtype() == DType::u8, src.dim(1), src.dim(2),
                            src.dim(3), at<int32_t>(table), dst.dim(0), at<uint32_t>(step_state),
                            h, at(dst));
}
void ReferenceDevice::do_advance_step(const Tensor& step_state) {
  reference::advance_step(at<uint32_t>(step_state));
}
void ReferenceDevice::do_sgd_update(const Tensor& params, const Tensor& grads,
                                    const Tensor& momentum, const SgdParams& hp,
                                    const UpdateControl& control, const Tensor& step_state) {
  reference::sgd_update(at(params), at(grads), at(momentum), params.numel(), hp,
                        host_control(control), at<uint32_t>(step_state));
}
void ReferenceDevice::do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                                     const Tensor& v, const AdamParams& hp,
                                     const UpdateControl& control, const Tensor& step_state) {
  reference::adam_update(at(params), at(grads), at(m), at(v), params.numel(), hp,
                         at<uint32_t>(step_state), host_control(control));
}

}  // namespace trident::testing
