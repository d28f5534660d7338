// The validating front of Device's convolution, pooling and normalisation ops (the losses and
// the head: device_ops_head.cpp; the rest: device_ops.cpp): arguments are checked here once, for every backend, then the backend's slot
// runs.
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

bool same_shape(const Conv2dShape& a, const Conv2dShape& b) {
  return a.batch == b.batch && a.in_channels == b.in_channels && a.height == b.height &&
         a.width == b.width && a.out_channels == b.out_channels && a.kernel_h == b.kernel_h &&
         a.kernel_w == b.kernel_w && a.stride_h == b.stride_h && a.stride_w == b.stride_w &&
         a.pad_h == b.pad_h && a.pad_w == b.pad_w && a.dtype == b.dtype;
}

// Whether tensor t's memory begins where m does (a workspace claim's record of it).
bool starts_at(const DeviceMemory& m, const Tensor& t) {
  return m.handle == t.memory().handle && m.offset == t.memory().offset;
}

void check_conv(const OpCheck& check, const Conv2dShape& s) {
  check.nonnegative("batch", s.batch);
  check.positive("in_channels", s.in_channels);
  check.positive("out_channels", s.out_channels);
  check.positive("kernel height", s.kernel_h);
  check.positive("kernel width", s.kernel_w);
  check.positive("stride height", s.stride_h);
  check.positive("stride width", s.stride_w);
  check.nonnegative("padding height", s.pad_h);
  check.nonnegative("padding width", s.pad_w);
  check.positive("height", s.height);
  check.positive("width", s.width);
  if (s.height + 2 * s.pad_h < s.kernel_h || s.width + 2 * s.pad_w < s.kernel_w)
    check.fail("the " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
               " kernel is larger than the padded " + std::to_string(s.height) + "x" +
               std::to_string(s.width) + " input");
}

void check_pool(const OpCheck& check, const Pool2dShape& s) {
  check.nonnegative("batch", s.batch);
  check.nonnegative("channels", s.channels);
  check.positive("kernel height", s.kernel_h);
  check.positive("kernel width", s.kernel_w);
  check.positive("stride height", s.stride_h);
  check.positive("stride width", s.stride_w);
  check.nonnegative("padding height", s.pad_h);
  check.nonnegative("padding width", s.pad_w);
  // An empty plane with padding would still have windows, all of them empty.
  check.positive("height", s.height);
  check.positive("width", s.width);
  // PyTorch: "pad should be at most half of effective kernel size".
  if (2 * s.pad_h > s.kernel_h || 2 * s.pad_w > s.kernel_w)
    check.fail("padding must be at most half the kernel");
  if (s.height + 2 * s.pad_h < s.kernel_h || s.width + 2 * s.pad_w < s.kernel_w)
    check.fail("the " + std::to_string(s.kernel_h) + "x" + std::to_string(s.kernel_w) +
               " window is larger than the padded " + std::to_string(s.height) + "x" +
               std::to_string(s.width) + " input");
}

void check_batchnorm(const OpCheck& check, const BatchNormShape& s) {
  check.nonnegative("outer", s.outer);
  check.positive("channels", s.channels);
  check.nonnegative("inner", s.inner);
  check.require(s.eps > 0.0f && std::isfinite(s.eps), "eps must be positive");
  check.require(s.momentum >= 0.0f && s.momentum <= 1.0f, "momentum must be in [0, 1]");
}

}  // namespace

// ---- convolution -------------------------------------------------------------------------------

// The shape a backend's conv2d slots see: s itself when it computes s.dtype natively, else the
// float32 shape its staged operands have.
Conv2dShape Device::conv_compute_shape(const Conv2dShape& s) const {
  Conv2dShape staged = s;
  if (!native(OpFamily::conv2d, s.dtype)) staged.dtype = DType::f32;
  return staged;
}

size_t Device::conv2d_workspace_bytes(const Conv2dShape& s) const {
  OpCheck check(*this, "conv2d_workspace_bytes");
  check_conv(check, s);
  check.require(is_float(s.dtype) && supports(s.dtype),
                std::string("dtype ") + dtype_name(s.dtype) + " is not a float type this device holds");
  return do_conv2d_workspace_bytes(conv_compute_shape(s));
}

void Device::conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                            const Tensor& b, const Tensor& y, const Tensor& workspace) {
  OpCheck check(*this, "conv2d_forward");
  check_conv(check, s);
  check.same_float("x", x, s.input_numel(), s.dtype);
  check.same_float("w", w, s.weight_numel(), s.dtype);
  check.optional("b", b, s.out_channels);
  check.same_float("y", y, s.output_numel(), s.dtype);
  const Conv2dShape cs = conv_compute_shape(s);
  const size_t ws_bytes = do_conv2d_workspace_bytes(cs);
  if (ws_bytes > 0) {
    check.here("workspace", workspace);
    check.require(workspace.bytes() >= ws_bytes,
                  "workspace has " + std::to_string(workspace.bytes()) + " bytes, needs " +
                      std::to_string(ws_bytes) + " (conv2d_workspace_bytes)");
  }
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"w", &w},
                                {"b", &b}, {"workspace", &workspace}})
    check.disjoint("y", y, name, *t);
  check.disjoint("workspace", workspace, "x", x);
  check.disjoint("workspace", workspace, "w", w);
  invalidate_claims(y);
  invalidate_claims(workspace);
  if (s.batch == 0) return;
  Staging stage(*this, OpFamily::conv2d);
  const bool holds =
      do_conv2d_forward(cs, stage.in(x), stage.in(w), b, stage.out(y), workspace);
  stage.finish();
  if (holds && workspace.defined()) {
    std::lock_guard<std::mutex> lock(claims_mutex_);
    claims_.push_back(
        {workspace.memory(), x.memory(), w.memory(), workspace.bytes(), x.bytes(), w.bytes(), s});
  }
}

void Device::conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                             const Tensor& dy, const Tensor& dx, const Tensor& dw,
                             const Tensor& db, const Tensor& workspace,
                             bool weight_gradient_beside) {
  OpCheck check(*this, "conv2d_backward");
  check_conv(check, s);
  check.same_float("x", x, s.input_numel(), s.dtype);
  check.same_float("w", w, s.weight_numel(), s.dtype);
  check.same_float("dy", dy, s.output_numel(), s.dtype);
  check.optional_same_float("dx", dx, s.input_numel(), s.dtype);
  check.tensor("dw", dw, s.weight_numel());
  check.optional("db", db, s.out_channels);
  const Conv2dShape cs = conv_compute_shape(s);
  const size_t ws_bytes = do_conv2d_workspace_bytes(cs);
  if (ws_bytes > 0) {
    check.here("workspace", workspace);
    check.require(workspace.bytes() >= ws_bytes,
                  "workspace has " + std::to_string(workspace.bytes()) + " bytes, needs " +
                      std::to_string(ws_bytes) + " (conv2d_workspace_bytes)");
  }
  const Tensor* outputs[] = {&dx, &dw, &db};
  const char* output_names[] = {"dx", "dw", "db"};
  for (int o = 0; o < 3; ++o) {
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"w", &w},
                                  {"dy", &dy}, {"workspace", &workspace}})
      check.disjoint(output_names[o], *outputs[o], name, *t);
    for (int p = o + 1; p < 3; ++p)
      check.disjoint(output_names[o], *outputs[o], output_names[p], *outputs[p]);
  }
  // Was the workspace left by a forward of this x, w and shape, none of them written since? Take
  // the claim: the backward may consume what it holds.
  bool valid = false;
  if (workspace.defined()) {
    std::lock_guard<std::mutex> lock(claims_mutex_);
    for (size_t i = 0; i < claims_.size(); ++i) {
      const WorkspaceClaim& c = claims_[i];
      if (starts_at(c.workspace, workspace) && starts_at(c.input, x) &&
          c.input_bytes == x.bytes() && starts_at(c.weights, w) && c.weights_bytes == w.bytes() &&
          same_shape(c.shape, s)) {
        valid = true;
        claims_.erase(claims_.begin() + static_cast<std::ptrdiff_t>(i));
        break;
      }
    }
  }
  for (const Tensor* t : outputs) invalidate_claims(*t);
  if (s.batch == 0) {  // nothing flows: every gradient is zero
    do_fill(dw, 0.0f);
    if (db.defined()) do_fill(db, 0.0f);
    return;
  }
  Staging stage(*this, OpFamily::conv2d);
  // Beside only from the main queue, and only with nothing staged (staging copies back after).
  // A backend that does queue work there says so (note_work_beside), so that the next join
  // waits for it; one that does not leaves the side queue out of a captured step.
  const bool beside = weight_gradient_beside && has_side_queue() && !beside_ &&
                      native(OpFamily::conv2d, s.dtype);
  const bool still_holds = do_conv2d_backward(cs, stage.in(x), stage.in(w), stage.in(dy),
                                              stage.out(dx), dw, db, workspace, valid, beside);
  stage.finish();
  if (valid && still_holds) {
    std::lock_guard<std::mutex> lock(claims_mutex_);
    claims_.push_back(
        {workspace.memory(), x.memory(), w.memory(), workspace.bytes(), x.bytes(), w.bytes(), s});
  }
}

void Device::im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  OpCheck check(*this, "im2col");
  check_conv(check, s);
  check.same_float("x", x, s.in_channels * s.height * s.width, s.dtype);
  check.same_float("col", col, s.patch_size() * s.out_height() * s.out_width(), s.dtype);
  check.disjoint("col", col, "x", x);
  invalidate_claims(col);
  Staging stage(*this, OpFamily::conv2d);
  do_im2col(conv_compute_shape(s), stage.in(x), stage.out(col));
  stage.finish();
}

void Device::col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  OpCheck check(*this, "col2im");
  check_conv(check, s);
  check.same_float("col", col, s.patch_size() * s.out_height() * s.out_width(), s.dtype);
  check.same_float("dx", dx, s.in_channels * s.height * s.width, s.dtype);
  check.disjoint("dx", dx, "col", col);
  invalidate_claims(dx);
  Staging stage(*this, OpFamily::conv2d);
  do_col2im(conv_compute_shape(s), stage.in(col), stage.out(dx));
  stage.finish();
}

// ---- pooling -----------------------------------------------------------------------------------

void Device::maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                               const Tensor& argmax) {
  OpCheck check(*this, "maxpool2d_forward");
  check_pool(check, s);
  check.require(s.height * s.width <= INT32_MAX,
                "a plane of " + std::to_string(s.height * s.width) +
                    " pixels does not fit the i32 argmax");
  check.floating("x", x, s.input_numel());
  check.same_float("y", y, s.output_numel(), x.dtype());
  check.tensor("argmax", argmax, s.output_numel(), DType::i32);
  check.disjoint("y", y, "x", x);
  check.disjoint("argmax", argmax, "x", x);
  check.disjoint("argmax", argmax, "y", y);
  invalidate_claims(y);
  invalidate_claims(argmax);
  if (s.output_numel() == 0) return;
  Staging stage(*this, OpFamily::pool);
  do_maxpool2d_forward(s, stage.in(x), stage.out(y), argmax);
  stage.finish();
}

void Device::maxpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                                const Tensor& dx) {
  OpCheck check(*this, "maxpool2d_backward");
  check_pool(check, s);
  check.floating("dy", dy, s.output_numel());
  check.tensor("argmax", argmax, s.output_numel(), DType::i32);
  check.same_float("dx", dx, s.input_numel(), dy.dtype());
  check.disjoint("dx", dx, "dy", dy);
  check.disjoint("dx", dx, "argmax", argmax);
  invalidate_claims(dx);
  if (s.input_numel() == 0) return;
  Staging stage(*this, OpFamily::pool);
  do_maxpool2d_backward(s, stage.in(dy), argmax, stage.out(dx));
  stage.finish();
}

void Device::avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) {
  OpCheck check(*this, "avgpool2d_forward");
  check_pool(check, s);
  check.require(!s.relu, "relu is fused into max pooling only");
  check.floating("x", x, s.input_numel());
  check.same_float("y", y, s.output_numel(), x.dtype());
  check.disjoint("y", y, "x", x);
  invalidate_claims(y);
  if (s.output_numel() == 0) return;
  Staging stage(*this, OpFamily::pool);
  do_avgpool2d_forward(s, stage.in(x), stage.out(y));
  stage.finish();
}

void Device::avgpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& dx) {
  OpCheck check(*this, "avgpool2d_backward");
  check_pool(check, s);
  check.require(!s.relu, "relu is fused into max pooling only");
  check.floating("dy", dy, s.output_numel());
  check.same_float("dx", dx, s.input_numel(), dy.dtype());
  check.disjoint("dx", dx, "dy", dy);
  invalidate_claims(dx);
  if (s.input_numel() == 0) return;
  Staging stage(*this, OpFamily::pool);
  do_avgpool2d_backward(s, stage.in(dy), stage.out(dx));
  stage.finish();
}

// ---- normalisation -----------------------------------------------------------------------------

void Device::batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                               const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const Tensor& y, const Tensor& save_mean,
                               const Tensor& save_invstd) {
  batchnorm_front("batchnorm_forward", s, training, x, Tensor(), gamma, beta, running_mean,
                  running_var, y, save_mean, save_invstd);
}

void Device::batchnorm_add_forward(const BatchNormShape& s, bool training, const Tensor& x,
                                   const Tensor& residual, const Tensor& gamma,
                                   const Tensor& beta, const Tensor& running_mean,
                                   const Tensor& running_var, const Tensor& y,
                                   const Tensor& save_mean, const Tensor& save_invstd) {
  OpCheck(*this, "batchnorm_add_forward").here("residual", residual);
  batchnorm_front("batchnorm_add_forward", s, training, x, residual, gamma, beta, running_mean,
                  running_var, y, save_mean, save_invstd);
}

void Device::batchnorm_front(const char* op, const BatchNormShape& s, bool training,
                             const Tensor& x, const Tensor& residual, const Tensor& gamma,
                             const Tensor& beta, const Tensor& running_mean,
                             const Tensor& running_var, const Tensor& y, const Tensor& save_mean,
                             const Tensor& save_invstd) {
  OpCheck check(*this, op);
  check_batchnorm(check, s);
  const int64_t c = s.channels;
  check.floating("x", x, s.numel());
  check.same_float("y", y, s.numel(), x.dtype());
  if (residual.defined()) check.same_float("residual", residual, s.numel(), x.dtype());
  check.optional("gamma", gamma, c);
  check.optional("beta", beta, c);
  check.tensor("running_mean", running_mean, c);
  check.tensor("running_var", running_var, c);
  if (training) {
    check.require(s.outer * s.inner > 1,
                  "training needs more than one value per channel (got " +
                      std::to_string(s.outer * s.inner) + "), as in PyTorch");
    check.tensor("save_mean", save_mean, c);
    check.tensor("save_invstd", save_invstd, c);
  }
  check.disjoint("y", y, "x", x, true);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"gamma", &gamma},
                                {"beta", &beta}, {"running_mean", &running_mean},
                                {"running_var", &running_var}, {"save_mean", &save_mean},
                                {"save_invstd", &save_invstd}, {"residual", &residual}})
    check.disjoint("y", y, name, *t);
  invalidate_claims(y);
  if (training) {
    invalidate_claims(running_mean);
    invalidate_claims(running_var);
    invalidate_claims(save_mean);
    invalidate_claims(save_invstd);
  }
  if (s.numel() == 0) return;
  Staging stage(*this, OpFamily::batchnorm);
  if (residual.defined())
    do_batchnorm_add_forward(s, training, stage.in(x), stage.in(residual), gamma, beta,
                             running_mean, running_var, stage.out(y), save_mean, save_invstd);
  else
    do_batchnorm_forward(s, training, stage.in(x), gamma, beta, running_mean, running_var,
                         stage.out(y), save_mean, save_invstd);
  stage.finish();
}

void Device::batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                                const Tensor& gamma, const Tensor& save_mean,
                                const Tensor& save_invstd, const Tensor& dx,
                                const Tensor& dgamma, const Tensor& dbeta, const Tensor& beta) {
  OpCheck check(*this, "batchnorm_backward");
  check_batchnorm(check, s);
  const int64_t c = s.channels;
  check.floating("x", x, s.numel());
  check.same_float("dy", dy, s.numel(), x.dtype());
  check.same_float("dx", dx, s.numel(), x.dtype());
  check.require(s.relu || !beta.defined(),
                "beta is read only with a fused ReLU (relu set: the mask is recomputed from x)");
  check.optional("gamma", gamma, c);
  check.optional("beta", beta, c);
  check.tensor("save_mean", save_mean, c);
  check.tensor("save_invstd", save_invstd, c);
  check.optional("dgamma", dgamma, c);
  check.optional("dbeta", dbeta, c);
  check.disjoint("dx", dx, "dy", dy, true);
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"x", &x}, {"gamma", &gamma}, {"beta", &beta},
        {"save_mean", &save_mean}, {"save_invstd", &save_invstd}, {"dgamma", &dgamma},
        {"dbeta", &dbeta}})
    check.disjoint("dx", dx, name, *t);
  check.disjoint("dgamma", dgamma, "dbeta", dbeta);
  check.disjoint("dgamma", dgamma, "dy", dy);
  check.disjoint("dbeta", dbeta, "dy", dy);
  check.disjoint("dgamma", dgamma, "beta", beta);
  check.disjoint("dbeta", dbeta, "beta", beta);
  invalidate_claims(dx);
  invalidate_claims(dgamma);
  invalidate_claims(dbeta);
  Staging stage(*this, OpFamily::batchnorm);
  do_batchnorm_backward(s, stage.in(x), stage.in(dy), gamma, save_mean, save_invstd,
                        stage.out(dx), dgamma, dbeta, beta);
  stage.finish();
}

}  // namespace trident
