// The validating front of every Device op: arguments are checked here once, for every backend,
// with messages that name the device, the op and the argument; then the backend's slot runs.
// Memory, GEMM, elementwise, channel, data and optimizer ops here; convolution, pooling and
// normalisation in device_ops_nn.cpp; the losses and the head in device_ops_head.cpp; the shared
// checks in op_check.h.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/half.h"
#include "trident/core/op_check.h"

namespace trident {
namespace {

using op_check::OpCheck;
using op_check::Staging;

// The stored matrix of `rows` x `cols` with row stride `ld`; fills ld = cols when it is 0.
void check_matrix(const OpCheck& check, const char* name, const Tensor& t, int64_t rows,
                  int64_t cols, int64_t& ld) {
  if (ld == 0) ld = std::max<int64_t>(cols, 1);
  if (ld < std::max<int64_t>(cols, 1))
    check.fail(std::string("the row stride of ") + name + " (" + std::to_string(ld) +
               ") is smaller than its " + std::to_string(cols) + " columns");
  check.floating(name, t, -1);
  const int64_t needed = rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
  if (t.numel() < needed)
    check.fail(std::string(name) + " has " + std::to_string(t.numel()) + " elements, a " +
               std::to_string(rows) + "x" + std::to_string(cols) + " matrix with row stride " +
               std::to_string(ld) + " needs " + std::to_string(needed));
}

void check_update_control(const OpCheck& check, const UpdateControl& c,
                          const Tensor& step_state) {
  if (c.schedule.defined()) {
    check.here("schedule", c.schedule);
    check.dtype("schedule", c.schedule, DType::f32);
    check.require(c.schedule.numel() >= 2 && c.schedule.numel() % 2 == 0,
                  "schedule must be [steps, 2], got " + shape_string(c.schedule.shape()));
  }
  if (c.grad_sumsq.defined()) {
    check.tensor("grad_sumsq", c.grad_sumsq, 1);
    check.require(std::isfinite(c.max_norm) &&
                      (c.max_norm > 0.0f || (c.max_norm == 0.0f && c.loss_scale.defined())),
                  "max_norm must be positive and finite (0 only with a loss scale: no clipping)");
  }
  if (c.loss_scale.defined()) {
    check.tensor("loss_scale", c.loss_scale, 1);
    check.require(c.grad_sumsq.defined(),
                  "a loss scale needs grad_sumsq (an overflowed step is skipped on its sum)");
  }
  if (c.schedule.defined() || c.grad_sumsq.defined() || step_state.defined())
    check.tensor("step_state", step_state, kStepStateCount, DType::i32);
}

// The optional compute copy of an optimizer update: a 16-bit tensor of the params' count that
// this device holds, apart from every other operand.
void check_compute_copy(const OpCheck& check, const Device& device, const Tensor& copy,
                        const Tensor& params, std::initializer_list<const Tensor*> others) {
  if (!copy.defined()) return;
  check.here("compute_copy", copy);
  check.require(is_half(copy.dtype()) && device.supports(copy.dtype()),
                std::string("compute_copy is ") + dtype_name(copy.dtype()) +
                    ", expected F16 or BF16 that this device holds");
  check.require(copy.numel() == params.numel(),
                "compute_copy has " + std::to_string(copy.numel()) + " elements, params " +
                    std::to_string(params.numel()));
  check.disjoint("compute_copy", copy, "params", params);
  for (const Tensor* other : others) check.disjoint("compute_copy", copy, "a state buffer", *other);
}

// unary_backward's operands (and unary_backward_sum's but its second part): dy, dx of its size
// (dx may be dy itself), and x or y, whichever the op's derivative reads. Returns the size.
int64_t check_unary_backward(const OpCheck& check, UnaryOp op, const Tensor& x, const Tensor& y,
                             const Tensor& dy, const Tensor& dx, float alpha) {
  check.floating("dy", dy, -1);
  const int64_t n = dy.numel();
  check.floating("dx", dx, n);
  if (unary_backward_needs_input(op, alpha))
    check.floating("x (the forward input)", x, n);
  else
    check.floating("y (the forward output)", y, n);
  check.optional_floating("x", x, n);
  check.optional_floating("y", y, n);
  check.disjoint("dx", dx, "dy", dy, true);
  check.disjoint("dx", dx, "x", x);
  check.disjoint("dx", dx, "y", y);
  return n;
}

}  // namespace

// ---- memory ------------------------------------------------------------------------------------

void Device::fill(const Tensor& dst, float value) {
  OpCheck check(*this, "fill");
  check.here("dst", dst);
  check.require(value == 0.0f || is_float(dst.dtype()) || dst.dtype() == DType::i32,
                std::string("a non-zero fill needs a float or I32 tensor, not ") +
                    dtype_name(dst.dtype()));
  if (is_half(dst.dtype()) && value != 0.0f) check.floating("dst", dst, -1);
  invalidate_claims(dst);
  if (dst.numel() == 0) return;
  if (value == 0.0f || !is_half(dst.dtype())) return do_fill(dst, value);
  Staging stage(*this, OpFamily::elementwise);
  do_fill(stage.out(dst), value);
  stage.finish();
}

void Device::convert(const Tensor& src, const Tensor& dst) {
  OpCheck check(*this, "convert");
  check.here("src", src);
  check.require(is_float(src.dtype()) || src.dtype() == DType::u8,
                std::string("src is ") + dtype_name(src.dtype()) + ", expected a float type or U8");
  if (is_half(src.dtype())) check.floating("src", src, -1);
  check.floating("dst", dst, src.numel());
  check.disjoint("dst", dst, "src", src);
  invalidate_claims(dst);
  if (src.numel() == 0) return;
  if (src.dtype() == dst.dtype()) return copy_on_device(dst.memory(), src.memory(), src.bytes());
  do_convert(src, dst);
}

void Device::scale(const Tensor& x, const Tensor& factor, const Tensor& y) {
  OpCheck check(*this, "scale");
  check.floating("x", x, -1);
  check.floating("y", y, x.numel());
  check.tensor("factor", factor, 1);
  check.disjoint("x", x, "y", y, true);
  check.disjoint("y", y, "factor", factor);
  invalidate_claims(y);
  if (x.numel() == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y});
  const Tensor xs = stage.in(x), ys = stage.out(y);
  do_scale(xs, factor, ys);
  stage.finish();
}

// ---- linear algebra ----------------------------------------------------------------------------

void Device::gemm(const GemmArgs& in) {
  OpCheck check(*this, "gemm");
  check.nonnegative("m", in.m);
  check.nonnegative("n", in.n);
  check.nonnegative("k", in.k);
  GemmArgs g = in;
  check_matrix(check, "a", g.a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda);
  check_matrix(check, "b", g.b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb);
  check_matrix(check, "c", g.c, g.m, g.n, g.ldc);
  if (g.bias.defined() != (g.bias_kind != BiasKind::none))
    check.fail(g.bias.defined() ? "a bias tensor was given with BiasKind::none"
                                : "BiasKind asks for a bias but none was given");
  if (g.bias.defined())
    check.tensor("bias", g.bias, g.bias_kind == BiasKind::per_column ? g.n : g.m);
  check.require(g.a.dtype() == g.b.dtype(), std::string("a is ") + dtype_name(g.a.dtype()) +
                                                 " but b is " + dtype_name(g.b.dtype()) +
                                                 ": A and B share one type");
  check.require(g.c.dtype() == DType::f32 || g.c.dtype() == g.a.dtype(),
                std::string("c is ") + dtype_name(g.c.dtype()) + ": C is float32 or A's type (" +
                    dtype_name(g.a.dtype()) + ")");
  check.disjoint("c", g.c, "a", g.a);
  check.disjoint("c", g.c, "b", g.b);
  check.disjoint("c", g.c, "bias", g.bias);
  invalidate_claims(g.c);
  if (g.m == 0 || g.n == 0) return;
  Staging stage(*this, OpFamily::gemm);
  g.a = stage.in(g.a);
  g.b = stage.in(g.b);
  // A staged C is written back whole: load it also where the tensor holds more than the m x n
  // matrix (a row stride past n, a tail), so that what lies outside the matrix comes back as it was.
  g.c = stage.out(g.c, g.beta != 0.0f || g.c.numel() != g.m * g.n);
  if (g.has_epilogue())
    do_gemm_fused(g);
  else
    do_gemm(g);
  stage.finish();
}

void Device::axpby(const Tensor& x, const Tensor& y, float a, float b, UnaryOp activation,
                   float alpha) {
  OpCheck check(*this, "axpby");
  check.floating("y", y, -1);
  check.floating("x", x, y.numel());
  check.disjoint("x", x, "y", y, true);
  invalidate_claims(y);
  if (y.numel() == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y});
  const Tensor xs = stage.in(x), ys = stage.out(y, b != 0.0f);
  if (activation == UnaryOp::identity)
    do_axpby(xs, ys, a, b);
  else
    do_axpby_activation(xs, ys, a, b, activation, alpha);
  stage.finish();
}

// ---- elementwise -------------------------------------------------------------------------------

void Device::unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) {
  OpCheck check(*this, "unary_forward");
  check.floating("x", x, -1);
  check.floating("y", y, x.numel());
  check.disjoint("x", x, "y", y, true);
  invalidate_claims(y);
  if (x.numel() == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y});
  const Tensor xs = stage.in(x), ys = stage.out(y);
  do_unary_forward(op, xs, ys, alpha);
  stage.finish();
}

void Device::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                            const Tensor& dx, float alpha) {
  OpCheck check(*this, "unary_backward");
  const int64_t n = check_unary_backward(check, op, x, y, dy, dx, alpha);
  invalidate_claims(dx);
  if (n == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y, dy, dx});
  const Tensor xs = stage.in(x), ys = stage.in(y), dys = stage.in(dy), dxs = stage.out(dx);
  do_unary_backward(op, xs, ys, dys, dxs, alpha);
  stage.finish();
}

void Device::unary_backward_sum(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                                const Tensor& dy_more, const Tensor& dx, float alpha) {
  OpCheck check(*this, "unary_backward_sum");
  const int64_t n = check_unary_backward(check, op, x, y, dy, dx, alpha);
  check.floating("dy_more", dy_more, n);
  check.disjoint("dx", dx, "dy_more", dy_more);
  invalidate_claims(dx);
  if (n == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y, dy, dy_more, dx});
  const Tensor xs = stage.in(x), ys = stage.in(y), dys = stage.in(dy), mores = stage.in(dy_more),
               dxs = stage.out(dx);
  do_unary_backward_sum(op, xs, ys, dys, mores, dxs, alpha);
  stage.finish();
}

void Device::dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset,
                     float p, uint64_t seed, uint32_t stream, const Tensor& step_state) {
  OpCheck check(*this, "dropout");
  check.floating("x", x, -1);
  check.floating("y", y, x.numel());
  check.tensor("step_state", step_state, kStepStateCount, DType::i32);
  check.positive("group", group);
  check.nonnegative("group_offset", group_offset);
  check.require(p >= 0.0f && p <= 1.0f, "p must be in [0, 1], got " + std::to_string(p));
  check.disjoint("x", x, "y", y, true);
  invalidate_claims(y);
  if (x.numel() == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y});
  const Tensor xs = stage.in(x), ys = stage.out(y);
  do_dropout(xs, ys, group, group_offset, p, seed, stream, step_state);
  stage.finish();
}

// ---- per-channel broadcast and reduction ---------------------------------------------------------

void Device::channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                            const Tensor& y, int64_t outer, int64_t channels, int64_t inner) {
  OpCheck check(*this, "channel_affine");
  check.nonnegative("outer", outer);
  check.positive("channels", channels);
  check.nonnegative("inner", inner);
  check.floating("x", x, outer * channels * inner);
  check.floating("y", y, x.numel());
  check.optional("scale", scale, channels);
  check.optional("shift", shift, channels);
  check.disjoint("x", x, "y", y, true);
  check.disjoint("y", y, "scale", scale);
  check.disjoint("y", y, "shift", shift);
  invalidate_claims(y);
  if (x.numel() == 0) return;
  Staging stage(*this, OpFamily::channel);
  const Tensor xs = stage.in(x), ys = stage.out(y);
  do_channel_affine(xs, scale, shift, ys, outer, channels, inner);
  stage.finish();
}

void Device::channel_sums(const Tensor& x, const Tensor& y, const Tensor& out, int64_t outer,
                          int64_t channels, int64_t inner, float beta) {
  OpCheck check(*this, "channel_sums");
  check.nonnegative("outer", outer);
  check.positive("channels", channels);
  check.nonnegative("inner", inner);
  check.floating("x", x, outer * channels * inner);
  check.optional_floating("y", y, x.numel());
  check.tensor("out", out, channels);
  check.disjoint("out", out, "x", x);
  check.disjoint("out", out, "y", y);
  invalidate_claims(out);
  Staging stage(*this, OpFamily::channel);
  do_channel_sums(stage.in(x), stage.in(y), out, outer, channels, inner, beta);
}

void Device::sum_rows(const Tensor& dy, int64_t rows, int64_t cols, const Tensor& db,
                      float beta) {
  channel_sums(dy, Tensor(), db, rows, cols, 1, beta);
}

// ---- data --------------------------------------------------------------------------------------

void Device::gather_rows(const Tensor& src, const Tensor& table, const Tensor& step_state,
                         const Tensor& dst) {
  OpCheck check(*this, "gather_rows");
  check.here("src", src);
  check.here("dst", dst);
  check.dtype("dst", dst, src.dtype());
  check.require(!src.shape().empty() && !dst.shape().empty(),
                "src and dst need a leading row dimension");
  const int64_t rows = dst.dim(0);
  const int64_t row_elements = rows ? dst.numel() / rows : 0;
  check.require(src.dim(0) == 0 || src.numel() / src.dim(0) == row_elements,
                "rows of src " + shape_string(src.shape()) + " and dst " +
                    shape_string(dst.shape()) + " differ in size");
  check.here("table", table);
  check.dtype("table", table, DType::i32);
  check.tensor("step_state", step_state, kStepStateCount, DType::i32);
  check.require(table.numel() >= rows, "the index table holds " +
                                           std::to_string(table.numel()) +
                                           " entries, fewer than one batch of " +
                                           std::to_string(rows));
  check.disjoint("dst", dst, "src", src);
  check.disjoint("dst", dst, "table", table);
  invalidate_claims(dst);
  if (rows == 0) return;
  error_flag();
  do_gather_rows(src, table, step_state, dst);
}

void Device::gather_samples(const Tensor& src, const Tensor& table, const Tensor& step_state,
                            const SampleTransform& t, const Tensor& dst) {
  OpCheck check(*this, "gather_samples");
  check.here("src", src);
  check.require(src.dtype() == DType::u8 || src.dtype() == DType::f32,
                std::string("src must be U8 or F32, got ") + dtype_name(src.dtype()));
  check.require(src.shape().size() == 4, "src must be [count, C, H, W], got " +
                                             shape_string(src.shape()));
  check.floating("dst", dst, -1);
  check.require(dst.shape().size() == 4 && dst.dim(1) == src.dim(1) && dst.dim(2) == src.dim(2) &&
                    dst.dim(3) == src.dim(3),
                "dst " + shape_string(dst.shape()) + " must be [rows] + the samples' shape " +
                    shape_string(src.shape()));
  const int64_t channels = src.dim(1);
  check.optional("mean", t.mean, channels);
  check.optional("inv_std", t.inv_std, channels);
  check.require(t.mean.defined() == t.inv_std.defined(), "mean and inv_std come together");
  check.nonnegative("crop_padding", t.crop_padding);
  check.nonnegative("sample_offset", t.sample_offset);
  check.here("table", table);
  check.dtype("table", table, DType::i32);
  check.tensor("step_state", step_state, kStepStateCount, DType::i32);
  check.require(table.numel() >= dst.dim(0), "the index table holds fewer entries than a batch");
  check.disjoint("dst", dst, "src", src);
  invalidate_claims(dst);
  if (dst.dim(0) == 0) return;
  error_flag();
  Staging stage(*this, OpFamily::gather);
  do_gather_samples(src, table, step_state, t, stage.out(dst));
  stage.finish();
}

void Device::advance_step(const Tensor& step_state) {
  OpCheck check(*this, "advance_step");
  check.tensor("step_state", step_state, kStepStateCount, DType::i32);
  invalidate_claims(step_state);
  do_advance_step(step_state);
}

// ---- optimizer updates ---------------------------------------------------------------------------

void Device::sgd_update(const Tensor& params, const Tensor& grads, const Tensor& momentum,
                        const SgdParams& hp, const UpdateControl& control,
                        const Tensor& step_state, const Tensor& compute_copy) {
  OpCheck check(*this, "sgd_update");
  check.here("params", params);
  check.dtype("params", params, DType::f32);
  const int64_t n = params.numel();
  check.tensor("grads", grads, n);
  const bool needs_momentum = hp.momentum != 0.0f || control.schedule.defined();
  if (needs_momentum)
    check.tensor("momentum", momentum, n);
  else
    check.optional("momentum", momentum, n);
  check_update_control(check, control, step_state);
  check.disjoint("params", params, "grads", grads);
  check.disjoint("params", params, "momentum", momentum);
  check.disjoint("grads", grads, "momentum", momentum);
  check_compute_copy(check, *this, compute_copy, params, {&grads, &momentum});
  invalidate_claims(params);
  invalidate_claims(momentum);
  if (n == 0) return;
  if (!compute_copy.defined())
    return do_sgd_update(params, grads, momentum, hp, control, step_state);
  invalidate_claims(compute_copy);
  do_sgd_update_with_copy(params, grads, momentum, hp, control, step_state, compute_copy);
}

void Device::adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                         const Tensor& v, const AdamParams& hp, const UpdateControl& control,
                         const Tensor& step_state, const Tensor& compute_copy) {
  OpCheck check(*this, "adam_update");
  check.here("params", params);
  check.dtype("params", params, DType::f32);
  const int64_t n = params.numel();
  check.tensor("grads", grads, n);
  check.tensor("m", m, n);
  check.tensor("v", v, n);
  check.tensor("step_state", step_state, kStepStateCount, DType::i32);
  check_update_control(check, control, step_state);
  check.require(hp.beta1 >= 0.0f && hp.beta1 < 1.0f && hp.beta2 >= 0.0f && hp.beta2 < 1.0f,
                "betas must be in [0, 1)");
  check.disjoint("params", params, "grads", grads);
  check.disjoint("params", params, "m", m);
  check.disjoint("params", params, "v", v);
  check.disjoint("m", m, "v", v);
  check_compute_copy(check, *this, compute_copy, params, {&grads, &m, &v});
  invalidate_claims(params);
  invalidate_claims(m);
  invalidate_claims(v);
  if (n == 0) return;
  if (!compute_copy.defined())
    return do_adam_update(params, grads, m, v, hp, control, step_state);
  invalidate_claims(compute_copy);
  do_adam_update_with_copy(params, grads, m, v, hp, control, step_state, compute_copy);
}

void Device::update_loss_scale(const Tensor& state, const Tensor& grad_sumsq,
                               const LossScaleParams& params) {
  OpCheck check(*this, "update_loss_scale");
  check.tensor("state", state, 2);
  check.tensor("grad_sumsq", grad_sumsq, 1);
  check.disjoint("state", state, "grad_sumsq", grad_sumsq);
  check.require(params.growth >= 1.0f && std::isfinite(params.growth), "growth must be >= 1");
  check.require(params.backoff > 0.0f && params.backoff < 1.0f, "backoff must be in (0, 1)");
  check.positive("interval", params.interval);
  invalidate_claims(state);
  do_update_loss_scale(state, grad_sumsq, params);
}

}  // namespace trident
