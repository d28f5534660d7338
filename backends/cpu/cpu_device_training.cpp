// CpuDevice's training-side slots: the losses and the classification head, the batch gather,
// and the optimizers (the others: cpu_device.cpp). Each forwards to kernels/cpu in the arena.
#include "trident/backends/cpu/cpu_device.h"
#include "trident/backends/cpu/tensor_access.h"
#include "trident/kernels/cpu/gather.h"
#include "trident/kernels/cpu/optimizers.h"
#include "trident/kernels/cpu/softmax_nll.h"

namespace trident {
using cpu::at;
using cpu::with_storage;

// ---- losses and the classification head --------------------------------------------------------

void CpuDevice::do_log_softmax_forward(const Tensor& x, const Tensor& y) {
  run([&] { cpu::log_softmax_forward(at(x), at(y), x.dim(0), x.dim(1)); });
}

void CpuDevice::do_log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  run([&] { cpu::log_softmax_backward(at(y), at(dy), at(dx), y.dim(0), y.dim(1)); });
}

void CpuDevice::do_nll_loss_forward(const Tensor& logp, const Tensor& labels, const Tensor& loss,
                                    bool accumulate, float label_smoothing) {
  run([&] {
    cpu::nll_loss_forward(at(logp), at<int32_t>(labels), logp.dim(0), logp.dim(1), at(loss),
                          accumulate, label_smoothing);
  });
}

void CpuDevice::do_nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                                     float label_smoothing) {
  run([&] {
    cpu::nll_loss_backward(at<int32_t>(labels), dlogp.dim(0), dlogp.dim(1), scale, at(dlogp),
                           label_smoothing);
  });
}

void CpuDevice::do_log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                                   float label_smoothing, const Tensor& y, const Tensor& loss,
                                   bool accumulate, const Tensor& dx) {
  run([&] {
    cpu::log_softmax_nll(at(x), at<int32_t>(labels), x.dim(0), x.dim(1), grad_scale,
                         label_smoothing, at(y), at(loss), accumulate, at(dx));
  });
}

void CpuDevice::do_mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                            const Tensor& loss, bool accumulate, const Tensor& dx) {
  run([&] {
    cpu::mse_loss(at(x), at<int32_t>(labels), x.dim(0), x.dim(1), grad_scale, at(loss),
                  accumulate, at(dx));
  });
}

void CpuDevice::do_count_correct(const Tensor& scores, const Tensor& labels,
                                 const Tensor& correct) {
  run([&] {
    cpu::count_correct(at(scores), at<int32_t>(labels), scores.dim(0), scores.dim(1),
                       at(correct));
  });
}

// ---- data and optimizer ------------------------------------------------------------------------

void CpuDevice::do_gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                               const Tensor& dst) {
  const int64_t rows = dst.dim(0);
  run([&] {
    cpu::gather_rows(at<void>(src), src.dim(0), dst.bytes() / size_t(rows), at<int32_t>(table),
                     table.numel(), rows, at<uint32_t>(step_state)[0], at<void>(dst));
  });
}

void CpuDevice::do_gather_samples(const Tensor& src, const Tensor& table,
                                  const Tensor& step_state, const SampleTransform& t,
                                  const Tensor& dst) {
  cpu::SampleTransformHost host;
  host.scale = t.scale;
  host.mean = at(t.mean);
  host.inv_std = at(t.inv_std);
  host.crop_padding = t.crop_padding;
  host.horizontal_flip = t.horizontal_flip;
  host.seed = t.seed;
  host.stream = t.stream;
  host.sample_offset = t.sample_offset;
  const uint32_t* state = at<uint32_t>(step_state);
  run([&] {
    with_storage(dst.dtype(), [&](auto zero) {
      using X = decltype(zero);
      cpu::gather_samples(at<void>(src), src.dtype() == DType::u8, src.dim(0), src.dim(1),
                          src.dim(2), src.dim(3), at<int32_t>(table), table.numel(), dst.dim(0),
                          state[0], state[1], host, at<X>(dst));
    });
  });
}

void CpuDevice::do_advance_step(const Tensor& step_state) {
  cpu::advance_step(at<uint32_t>(step_state));
}

namespace {

cpu::ResolvedStep resolve(float lr, float momentum, float grad_scale, const UpdateControl& c,
                          const Tensor& step_state) {
  return cpu::resolve_step(lr, momentum, grad_scale, at(c.schedule),
                           c.schedule.defined() ? c.schedule.numel() / 2 : 0, at(c.grad_sumsq),
                           c.max_norm, at(c.loss_scale),
                           step_state.defined() ? at<uint32_t>(step_state)[1] : 0u);
}

}  // namespace

void CpuDevice::do_sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                              const SgdParams& hp, const UpdateControl& control,
                              const Tensor& step_state) {
  const cpu::ResolvedStep r = resolve(hp.lr, hp.momentum, hp.grad_scale, control, step_state);
  SgdParams resolved = hp;
  resolved.lr = r.lr;
  resolved.momentum = r.momentum;
  resolved.grad_scale = r.grad_scale;
  if (r.skip) return;  // an overflowed fp16 step: nothing changes
  run([&] { cpu::sgd_update(at(params), at(grads), at(momentum), params.numel(), resolved); });
}

void CpuDevice::do_adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                               const Tensor& v, const AdamParams& hp,
                               const UpdateControl& control, const Tensor& step_state) {
  const cpu::ResolvedStep r = resolve(hp.lr, hp.beta1, hp.grad_scale, control, step_state);
  AdamParams resolved = hp;
  resolved.lr = r.lr;
  resolved.beta1 = r.momentum;
  resolved.grad_scale = r.grad_scale;
  if (r.skip) return;
  run([&] {
    cpu::adam_update(at(params), at(grads), at(m), at(v), params.numel(), resolved,
                     at<uint32_t>(step_state)[1]);
  });
}

void CpuDevice::do_update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                                     const LossScaleParams& params) {
  cpu::update_loss_scale(at(state), at(grad_sumsq)[0], params);
}

}  // namespace trident
