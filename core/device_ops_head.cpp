// The validating front of Device's losses and classification head ops (log-softmax, NLL, the
// fused cross-entropy, MSE, the count of correct predictions): arguments are checked here once,
// for every backend, then the backend's slot runs.
#include <string>

#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/op_check.h"

namespace trident {
namespace {

using op_check::OpCheck;
using op_check::Staging;

// x and friends of a [rows, cols] head op: the rows and columns of x's 2-D shape.
void head_shape(const OpCheck& check, const char* name, const Tensor& x, int64_t& rows,
                int64_t& cols) {
  check.floating(name, x, -1);
  if (x.shape().size() != 2)
    check.fail(std::string(name) + " must be [rows, classes], got " + shape_string(x.shape()));
  rows = x.dim(0);
  cols = x.dim(1);
  check.positive("classes", cols);
}

void check_smoothing(const OpCheck& check, float e) {
  check.require(e >= 0.0f && e < 1.0f, "label smoothing must be in [0, 1), got " +
                                           std::to_string(e));
}

}  // namespace

// ---- losses and the classification head --------------------------------------------------------

void Device::log_softmax_forward(const Tensor& x, const Tensor& y) {
  OpCheck check(*this, "log_softmax_forward");
  int64_t rows = 0, cols = 0;
  head_shape(check, "x", x, rows, cols);
  check.floating("y", y, rows * cols);
  check.disjoint("y", y, "x", x);
  invalidate_claims(y);
  if (rows == 0) return;
  Staging stage(*this, OpFamily::head);
  do_log_softmax_forward(stage.in(x), stage.out(y.reshape({rows, cols})));
  stage.finish();
}

void Device::log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  OpCheck check(*this, "log_softmax_backward");
  int64_t rows = 0, cols = 0;
  head_shape(check, "y", y, rows, cols);
  check.floating("dy", dy, rows * cols);
  check.floating("dx", dx, rows * cols);
  check.disjoint("dx", dx, "y", y);
  check.disjoint("dx", dx, "dy", dy, true);
  invalidate_claims(dx);
  if (rows == 0) return;
  Staging stage(*this, OpFamily::head);
  do_log_softmax_backward(stage.in(y), stage.in(dy.reshape({rows, cols})),
                          stage.out(dx.reshape({rows, cols})));
  stage.finish();
}

void Device::nll_loss_forward(const Tensor& logp, const Tensor& labels, const Tensor& loss,
                              bool accumulate, float label_smoothing) {
  OpCheck check(*this, "nll_loss_forward");
  int64_t rows = 0, cols = 0;
  head_shape(check, "logp", logp, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check.tensor("loss", loss, 1);
  check_smoothing(check, label_smoothing);
  check.disjoint("loss", loss, "logp", logp);
  invalidate_claims(loss);
  Staging stage(*this, OpFamily::head);
  do_nll_loss_forward(stage.in(logp), labels, loss, accumulate, label_smoothing);
}

void Device::nll_loss_backward(const Tensor& labels, const Tensor& dlogp, float scale,
                               float label_smoothing) {
  OpCheck check(*this, "nll_loss_backward");
  int64_t rows = 0, cols = 0;
  head_shape(check, "dlogp", dlogp, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check_smoothing(check, label_smoothing);
  check.disjoint("dlogp", dlogp, "labels", labels);
  invalidate_claims(dlogp);
  if (rows == 0) return;
  Staging stage(*this, OpFamily::head);
  do_nll_loss_backward(labels, stage.out(dlogp), scale, label_smoothing);
  stage.finish();
}

void Device::log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                             float label_smoothing, const Tensor& y, const Tensor& loss,
                             bool accumulate, const Tensor& dx) {
  OpCheck check(*this, "log_softmax_nll");
  int64_t rows = 0, cols = 0;
  head_shape(check, "x", x, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check.floating("y", y, rows * cols);
  check.tensor("loss", loss, 1);
  check.floating("dx", dx, rows * cols);
  check_smoothing(check, label_smoothing);
  check.disjoint("y", y, "x", x);
  check.disjoint("dx", dx, "x", x);
  check.disjoint("dx", dx, "y", y);
  check.disjoint("loss", loss, "x", x);
  check.disjoint("loss", loss, "y", y);
  check.disjoint("loss", loss, "dx", dx);
  invalidate_claims(y);
  invalidate_claims(loss);
  invalidate_claims(dx);
  Staging stage(*this, OpFamily::head);
  do_log_softmax_nll(stage.in(x), labels, grad_scale, label_smoothing,
                     stage.out(y.reshape({rows, cols})), loss, accumulate,
                     stage.out(dx.reshape({rows, cols})));
  stage.finish();
}

void Device::mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                      const Tensor& loss, bool accumulate, const Tensor& dx) {
  OpCheck check(*this, "mse_loss");
  int64_t rows = 0, cols = 0;
  head_shape(check, "x", x, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check.tensor("loss", loss, 1);
  check.optional_floating("dx", dx, rows * cols);
  check.disjoint("dx", dx, "x", x);
  check.disjoint("loss", loss, "x", x);
  check.disjoint("loss", loss, "dx", dx);
  invalidate_claims(loss);
  invalidate_claims(dx);
  Staging stage(*this, OpFamily::head);
  do_mse_loss(stage.in(x), labels, grad_scale, loss, accumulate,
              stage.out(dx.defined() ? dx.reshape({rows, cols}) : dx));
  stage.finish();
}

void Device::count_correct(const Tensor& scores, const Tensor& labels, const Tensor& correct) {
  OpCheck check(*this, "count_correct");
  int64_t rows = 0, cols = 0;
  head_shape(check, "scores", scores, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check.tensor("correct", correct, 1);
  check.disjoint("correct", correct, "scores", scores);
  invalidate_claims(correct);
  if (rows == 0) return;
  Staging stage(*this, OpFamily::head);
  do_count_correct(stage.in(scores), labels, correct);
}

}  // namespace trident
