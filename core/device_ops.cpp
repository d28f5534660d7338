// The validating front of every Device op: arguments are checked here once, for every backend,
// with messages that name the device, the op and the argument; then the backend's slot runs.
#include <cmath>
#include <string>

#include "core/device.h"
#include "core/error.h"

namespace trident {
namespace {

bool same_shape(const Conv2dShape& a, const Conv2dShape& b) {
  return a.batch == b.batch && a.in_channels == b.in_channels && a.height == b.height &&
         a.width == b.width && a.out_channels == b.out_channels && a.kernel_h == b.kernel_h &&
         a.kernel_w == b.kernel_w && a.stride_h == b.stride_h && a.stride_w == b.stride_w &&
         a.pad_h == b.pad_h && a.pad_w == b.pad_w;
}

// Argument checks of one op call; every failure is a ShapeError "<device>: <op>: <problem>".
class OpCheck {
 public:
  OpCheck(const Device& device, const char* op) : device_(device), op_(op) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw ShapeError(device_.info().id() + ": " + op_ + ": " + problem);
  }
  void require(bool ok, const std::string& problem) const {
    if (!ok) fail(problem);
  }
  // A defined tensor of this device.
  void here(const char* name, const Tensor& t) const {
    if (!t.defined()) fail(std::string(name) + " is undefined");
    if (&t.device() != &device_ && t.device().memory_space() != device_.memory_space())
      fail(std::string(name) + " lives on " + t.device().info().id() + ", not on this device");
    if (t.numel() > device_.info().limits.max_elements)
      fail(std::string(name) + " has " + std::to_string(t.numel()) +
           " elements, more than this device takes in one op (" +
           std::to_string(device_.info().limits.max_elements) + ")");
  }
  void dtype(const char* name, const Tensor& t, DType want) const {
    if (t.dtype() != want)
      fail(std::string(name) + " is " + dtype_name(t.dtype()) + ", expected " + dtype_name(want));
  }
  // A defined tensor of this device, of dtype `want`, with exactly `count` elements.
  void tensor(const char* name, const Tensor& t, int64_t count, DType want = DType::f32) const {
    here(name, t);
    dtype(name, t, want);
    if (t.numel() != count)
      fail(std::string(name) + " has " + std::to_string(t.numel()) + " elements (shape " +
           shape_string(t.shape()) + "), expected " + std::to_string(count));
  }
  // The same, where an undefined tensor means "not wanted".
  void optional(const char* name, const Tensor& t, int64_t count, DType want = DType::f32) const {
    if (t.defined()) tensor(name, t, count, want);
  }
  void nonnegative(const char* what, int64_t value) const {
    if (value < 0) fail(std::string(what) + " is negative (" + std::to_string(value) + ")");
  }
  void positive(const char* what, int64_t value) const {
    if (value < 1) fail(std::string(what) + " must be at least 1, got " + std::to_string(value));
  }
  // Two tensors whose memory overlaps, unless they are the same memory and `same_ok`.
  void disjoint(const char* a_name, const Tensor& a, const char* b_name, const Tensor& b,
                bool same_ok = false) const {
    if (!a.defined() || !b.defined()) return;
    const DeviceMemory ma = a.memory(), mb = b.memory();
    if (ma.handle != mb.handle) return;
    const bool overlap = ma.offset < mb.offset + b.bytes() && mb.offset < ma.offset + a.bytes();
    if (!overlap) return;
    if (same_ok && ma.offset == mb.offset && a.bytes() == b.bytes()) return;
    fail(std::string(a_name) + " and " + b_name +
         (same_ok ? " must be the same memory or not overlap" : " overlap"));
  }

 private:
  const Device& device_;
  const char* op_;
};

// The stored matrix of `rows` x `cols` with row stride `ld`; fills ld = cols when it is 0.
void check_matrix(const OpCheck& check, const char* name, const Tensor& t, int64_t rows,
                  int64_t cols, int64_t& ld) {
  if (ld == 0) ld = std::max<int64_t>(cols, 1);
  if (ld < std::max<int64_t>(cols, 1))
    check.fail(std::string("the row stride of ") + name + " (" + std::to_string(ld) +
               ") is smaller than its " + std::to_string(cols) + " columns");
  check.here(name, t);
  check.dtype(name, t, DType::f32);
  const int64_t needed = rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
  if (t.numel() < needed)
    check.fail(std::string(name) + " has " + std::to_string(t.numel()) + " elements, a " +
               std::to_string(rows) + "x" + std::to_string(cols) + " matrix with row stride " +
               std::to_string(ld) + " needs " + std::to_string(needed));
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

// x and friends of a [rows, cols] head op: the rows and columns of x's 2-D shape.
void head_shape(const OpCheck& check, const char* name, const Tensor& x, int64_t& rows,
                int64_t& cols) {
  check.here(name, x);
  check.dtype(name, x, DType::f32);
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
    check.require(c.max_norm > 0.0f && std::isfinite(c.max_norm),
                  "max_norm must be positive and finite");
  }
  if (c.schedule.defined() || c.grad_sumsq.defined() || step_state.defined())
    check.tensor("step_state", step_state, kStepStateCount, DType::i32);
}

}  // namespace

// ---- memory ------------------------------------------------------------------------------------

void Device::fill(const Tensor& dst, float value) {
  OpCheck check(*this, "fill");
  check.here("dst", dst);
  check.require(value == 0.0f || dst.dtype() == DType::f32 || dst.dtype() == DType::i32,
                std::string("a non-zero fill needs an F32 or I32 tensor, not ") +
                    dtype_name(dst.dtype()));
  invalidate_claims(dst);
  if (dst.numel() > 0) do_fill(dst, value);
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
  check.disjoint("c", g.c, "a", g.a);
  check.disjoint("c", g.c, "b", g.b);
  check.disjoint("c", g.c, "bias", g.bias);
  invalidate_claims(g.c);
  if (g.m == 0 || g.n == 0) return;
  if (g.has_epilogue())
    do_gemm_fused(g);
  else
    do_gemm(g);
}

void Device::axpby(const Tensor& x, const Tensor& y, float a, float b) {
  OpCheck check(*this, "axpby");
  check.here("y", y);
  check.tensor("x", x, y.numel());
  check.dtype("y", y, DType::f32);
  check.disjoint("x", x, "y", y, true);
  invalidate_claims(y);
  if (y.numel() > 0) do_axpby(x, y, a, b);
}

// ---- elementwise -------------------------------------------------------------------------------

void Device::unary_forward(UnaryOp op, const Tensor& x, const Tensor& y, float alpha) {
  OpCheck check(*this, "unary_forward");
  check.here("x", x);
  check.dtype("x", x, DType::f32);
  check.tensor("y", y, x.numel());
  check.disjoint("x", x, "y", y, true);
  invalidate_claims(y);
  if (x.numel() > 0) do_unary_forward(op, x, y, alpha);
}

void Device::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                            const Tensor& dx, float alpha) {
  OpCheck check(*this, "unary_backward");
  check.here("dy", dy);
  check.dtype("dy", dy, DType::f32);
  const int64_t n = dy.numel();
  check.tensor("dx", dx, n);
  if (unary_backward_needs_input(op, alpha))
    check.tensor("x (the forward input)", x, n);
  else
    check.tensor("y (the forward output)", y, n);
  check.optional("x", x, n);
  check.optional("y", y, n);
  check.disjoint("dx", dx, "dy", dy, true);
  check.disjoint("dx", dx, "x", x);
  check.disjoint("dx", dx, "y", y);
  invalidate_claims(dx);
  if (n > 0) do_unary_backward(op, x, y, dy, dx, alpha);
}

void Device::dropout(const Tensor& x, const Tensor& y, int64_t group, int64_t group_offset,
                     float p, uint64_t seed, uint32_t stream, const Tensor& step_state) {
  OpCheck check(*this, "dropout");
  check.here("x", x);
  check.dtype("x", x, DType::f32);
  check.tensor("y", y, x.numel());
  check.tensor("step_state", step_state, kStepStateCount, DType::i32);
  check.positive("group", group);
  check.nonnegative("group_offset", group_offset);
  check.require(p >= 0.0f && p <= 1.0f, "p must be in [0, 1], got " + std::to_string(p));
  check.disjoint("x", x, "y", y, true);
  invalidate_claims(y);
  if (x.numel() > 0) do_dropout(x, y, group, group_offset, p, seed, stream, step_state);
}

// ---- per-channel broadcast and reduction ---------------------------------------------------------

void Device::channel_affine(const Tensor& x, const Tensor& scale, const Tensor& shift,
                            const Tensor& y, int64_t outer, int64_t channels, int64_t inner) {
  OpCheck check(*this, "channel_affine");
  check.nonnegative("outer", outer);
  check.positive("channels", channels);
  check.nonnegative("inner", inner);
  check.tensor("x", x, outer * channels * inner);
  check.tensor("y", y, x.numel());
  check.optional("scale", scale, channels);
  check.optional("shift", shift, channels);
  check.disjoint("x", x, "y", y, true);
  check.disjoint("y", y, "scale", scale);
  check.disjoint("y", y, "shift", shift);
  invalidate_claims(y);
  if (x.numel() > 0) do_channel_affine(x, scale, shift, y, outer, channels, inner);
}

void Device::channel_sums(const Tensor& x, const Tensor& y, const Tensor& out, int64_t outer,
                          int64_t channels, int64_t inner, float beta) {
  OpCheck check(*this, "channel_sums");
  check.nonnegative("outer", outer);
  check.positive("channels", channels);
  check.nonnegative("inner", inner);
  check.tensor("x", x, outer * channels * inner);
  check.optional("y", y, x.numel());
  check.tensor("out", out, channels);
  check.disjoint("out", out, "x", x);
  check.disjoint("out", out, "y", y);
  invalidate_claims(out);
  do_channel_sums(x, y, out, outer, channels, inner, beta);
}

void Device::sum_rows(const Tensor& dy, int64_t rows, int64_t cols, const Tensor& db,
                      float beta) {
  channel_sums(dy, Tensor(), db, rows, cols, 1, beta);
}

// ---- convolution -------------------------------------------------------------------------------

size_t Device::conv2d_workspace_bytes(const Conv2dShape& s) const {
  check_conv(OpCheck(*this, "conv2d_workspace_bytes"), s);
  return do_conv2d_workspace_bytes(s);
}

void Device::conv2d_forward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                            const Tensor& b, const Tensor& y, const Tensor& workspace) {
  OpCheck check(*this, "conv2d_forward");
  check_conv(check, s);
  check.tensor("x", x, s.input_numel());
  check.tensor("w", w, s.weight_numel());
  check.optional("b", b, s.out_channels);
  check.tensor("y", y, s.output_numel());
  const size_t ws_bytes = do_conv2d_workspace_bytes(s);
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
  const bool holds = do_conv2d_forward(s, x, w, b, y, workspace);
  if (holds && workspace.defined()) {
    std::lock_guard<std::mutex> lock(claims_mutex_);
    claims_.push_back({workspace.memory(), x.memory(), workspace.bytes(), x.bytes(), s});
  }
}

void Device::conv2d_backward(const Conv2dShape& s, const Tensor& x, const Tensor& w,
                             const Tensor& dy, const Tensor& dx, const Tensor& dw,
                             const Tensor& db, const Tensor& workspace) {
  OpCheck check(*this, "conv2d_backward");
  check_conv(check, s);
  check.tensor("x", x, s.input_numel());
  check.tensor("w", w, s.weight_numel());
  check.tensor("dy", dy, s.output_numel());
  check.optional("dx", dx, s.input_numel());
  check.tensor("dw", dw, s.weight_numel());
  check.optional("db", db, s.out_channels);
  const size_t ws_bytes = do_conv2d_workspace_bytes(s);
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
  // Was the workspace left by a forward of this x and shape, untouched since? Take the claim:
  // the backward may consume what it holds.
  bool valid = false;
  if (workspace.defined()) {
    std::lock_guard<std::mutex> lock(claims_mutex_);
    for (size_t i = 0; i < claims_.size(); ++i) {
      const WorkspaceClaim& c = claims_[i];
      if (c.workspace.handle == workspace.memory().handle &&
          c.workspace.offset == workspace.memory().offset &&
          c.input.handle == x.memory().handle && c.input.offset == x.memory().offset &&
          c.input_bytes == x.bytes() && same_shape(c.shape, s)) {
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
  const bool still_holds = do_conv2d_backward(s, x, w, dy, dx, dw, db, workspace, valid);
  if (valid && still_holds) {
    std::lock_guard<std::mutex> lock(claims_mutex_);
    claims_.push_back({workspace.memory(), x.memory(), workspace.bytes(), x.bytes(), s});
  }
}

void Device::im2col(const Conv2dShape& s, const Tensor& x, const Tensor& col) {
  OpCheck check(*this, "im2col");
  check_conv(check, s);
  check.tensor("x", x, s.in_channels * s.height * s.width);
  check.tensor("col", col, s.patch_size() * s.out_height() * s.out_width());
  check.disjoint("col", col, "x", x);
  invalidate_claims(col);
  do_im2col(s, x, col);
}

void Device::col2im(const Conv2dShape& s, const Tensor& col, const Tensor& dx) {
  OpCheck check(*this, "col2im");
  check_conv(check, s);
  check.tensor("col", col, s.patch_size() * s.out_height() * s.out_width());
  check.tensor("dx", dx, s.in_channels * s.height * s.width);
  check.disjoint("dx", dx, "col", col);
  invalidate_claims(dx);
  do_col2im(s, col, dx);
}

// ---- pooling -----------------------------------------------------------------------------------

void Device::maxpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y,
                               const Tensor& argmax) {
  OpCheck check(*this, "maxpool2d_forward");
  check_pool(check, s);
  check.require(s.height * s.width <= INT32_MAX,
                "a plane of " + std::to_string(s.height * s.width) +
                    " pixels does not fit the i32 argmax");
  check.tensor("x", x, s.input_numel());
  check.tensor("y", y, s.output_numel());
  check.tensor("argmax", argmax, s.output_numel(), DType::i32);
  check.disjoint("y", y, "x", x);
  check.disjoint("argmax", argmax, "x", x);
  check.disjoint("argmax", argmax, "y", y);
  invalidate_claims(y);
  invalidate_claims(argmax);
  if (s.output_numel() > 0) do_maxpool2d_forward(s, x, y, argmax);
}

void Device::maxpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                                const Tensor& dx) {
  OpCheck check(*this, "maxpool2d_backward");
  check_pool(check, s);
  check.tensor("dy", dy, s.output_numel());
  check.tensor("argmax", argmax, s.output_numel(), DType::i32);
  check.tensor("dx", dx, s.input_numel());
  check.disjoint("dx", dx, "dy", dy);
  check.disjoint("dx", dx, "argmax", argmax);
  invalidate_claims(dx);
  if (s.input_numel() > 0) do_maxpool2d_backward(s, dy, argmax, dx);
}

void Device::avgpool2d_forward(const Pool2dShape& s, const Tensor& x, const Tensor& y) {
  OpCheck check(*this, "avgpool2d_forward");
  check_pool(check, s);
  check.require(!s.relu, "relu is fused into max pooling only");
  check.tensor("x", x, s.input_numel());
  check.tensor("y", y, s.output_numel());
  check.disjoint("y", y, "x", x);
  invalidate_claims(y);
  if (s.output_numel() > 0) do_avgpool2d_forward(s, x, y);
}

void Device::avgpool2d_backward(const Pool2dShape& s, const Tensor& dy, const Tensor& dx) {
  OpCheck check(*this, "avgpool2d_backward");
  check_pool(check, s);
  check.require(!s.relu, "relu is fused into max pooling only");
  check.tensor("dy", dy, s.output_numel());
  check.tensor("dx", dx, s.input_numel());
  check.disjoint("dx", dx, "dy", dy);
  invalidate_claims(dx);
  if (s.input_numel() > 0) do_avgpool2d_backward(s, dy, dx);
}

// ---- normalisation -----------------------------------------------------------------------------

void Device::batchnorm_forward(const BatchNormShape& s, bool training, const Tensor& x,
                               const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var,
                               const Tensor& y, const Tensor& save_mean,
                               const Tensor& save_invstd) {
  OpCheck check(*this, "batchnorm_forward");
  check_batchnorm(check, s);
  const int64_t c = s.channels;
  check.tensor("x", x, s.numel());
  check.tensor("y", y, s.numel());
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
                                {"save_invstd", &save_invstd}})
    check.disjoint("y", y, name, *t);
  invalidate_claims(y);
  if (training) {
    invalidate_claims(running_mean);
    invalidate_claims(running_var);
    invalidate_claims(save_mean);
    invalidate_claims(save_invstd);
  }
  if (s.numel() == 0) return;
  do_batchnorm_forward(s, training, x, gamma, beta, running_mean, running_var, y, save_mean,
                       save_invstd);
}

void Device::batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                                const Tensor& gamma, const Tensor& save_mean,
                                const Tensor& save_invstd, const Tensor& dx,
                                const Tensor& dgamma, const Tensor& dbeta) {
  OpCheck check(*this, "batchnorm_backward");
  check_batchnorm(check, s);
  const int64_t c = s.channels;
  check.tensor("x", x, s.numel());
  check.tensor("dy", dy, s.numel());
  check.tensor("dx", dx, s.numel());
  check.optional("gamma", gamma, c);
  check.tensor("save_mean", save_mean, c);
  check.tensor("save_invstd", save_invstd, c);
  check.optional("dgamma", dgamma, c);
  check.optional("dbeta", dbeta, c);
  check.disjoint("dx", dx, "dy", dy, true);
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"x", &x}, {"gamma", &gamma},
        {"save_mean", &save_mean}, {"save_invstd", &save_invstd}, {"dgamma", &dgamma},
        {"dbeta", &dbeta}})
    check.disjoint("dx", dx, name, *t);
  check.disjoint("dgamma", dgamma, "dbeta", dbeta);
  check.disjoint("dgamma", dgamma, "dy", dy);
  check.disjoint("dbeta", dbeta, "dy", dy);
  invalidate_claims(dx);
  invalidate_claims(dgamma);
  invalidate_claims(dbeta);
  do_batchnorm_backward(s, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

// ---- losses and the classification head --------------------------------------------------------

void Device::log_softmax_forward(const Tensor& x, const Tensor& y) {
  OpCheck check(*this, "log_softmax_forward");
  int64_t rows = 0, cols = 0;
  head_shape(check, "x", x, rows, cols);
  check.tensor("y", y, rows * cols);
  check.disjoint("y", y, "x", x);
  invalidate_claims(y);
  if (rows > 0) do_log_softmax_forward(x, y.reshape({rows, cols}));
}

void Device::log_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  OpCheck check(*this, "log_softmax_backward");
  int64_t rows = 0, cols = 0;
  head_shape(check, "y", y, rows, cols);
  check.tensor("dy", dy, rows * cols);
  check.tensor("dx", dx, rows * cols);
  check.disjoint("dx", dx, "y", y);
  check.disjoint("dx", dx, "dy", dy, true);
  invalidate_claims(dx);
  if (rows > 0) do_log_softmax_backward(y, dy.reshape({rows, cols}), dx.reshape({rows, cols}));
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
  do_nll_loss_forward(logp, labels, loss, accumulate, label_smoothing);
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
  if (rows > 0) do_nll_loss_backward(labels, dlogp, scale, label_smoothing);
}

void Device::log_softmax_nll(const Tensor& x, const Tensor& labels, float grad_scale,
                             float label_smoothing, const Tensor& y, const Tensor& loss,
                             bool accumulate, const Tensor& dx) {
  OpCheck check(*this, "log_softmax_nll");
  int64_t rows = 0, cols = 0;
  head_shape(check, "x", x, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check.tensor("y", y, rows * cols);
  check.tensor("loss", loss, 1);
  check.tensor("dx", dx, rows * cols);
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
  do_log_softmax_nll(x, labels, grad_scale, label_smoothing, y.reshape({rows, cols}), loss,
                     accumulate, dx.reshape({rows, cols}));
}

void Device::mse_loss(const Tensor& x, const Tensor& labels, float grad_scale,
                      const Tensor& loss, bool accumulate, const Tensor& dx) {
  OpCheck check(*this, "mse_loss");
  int64_t rows = 0, cols = 0;
  head_shape(check, "x", x, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check.tensor("loss", loss, 1);
  check.optional("dx", dx, rows * cols);
  check.disjoint("dx", dx, "x", x);
  check.disjoint("loss", loss, "x", x);
  check.disjoint("loss", loss, "dx", dx);
  invalidate_claims(loss);
  invalidate_claims(dx);
  do_mse_loss(x, labels, grad_scale, loss, accumulate,
              dx.defined() ? dx.reshape({rows, cols}) : dx);
}

void Device::count_correct(const Tensor& scores, const Tensor& labels, const Tensor& correct) {
  OpCheck check(*this, "count_correct");
  int64_t rows = 0, cols = 0;
  head_shape(check, "scores", scores, rows, cols);
  check.tensor("labels", labels, rows, DType::i32);
  check.tensor("correct", correct, 1);
  check.disjoint("correct", correct, "scores", scores);
  invalidate_claims(correct);
  if (rows > 0) do_count_correct(scores, labels, correct);
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
  check.here("dst", dst);
  check.dtype("dst", dst, DType::f32);
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
  do_gather_samples(src, table, step_state, t, dst);
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
                        const Tensor& step_state) {
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
  invalidate_claims(params);
  invalidate_claims(momentum);
  if (n > 0) do_sgd_update(params, grads, momentum, hp, control, step_state);
}

void Device::adam_update(const Tensor& params, const Tensor& grads, const Tensor& m,
                         const Tensor& v, const AdamParams& hp, const UpdateControl& control,
                         const Tensor& step_state) {
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
  invalidate_claims(params);
  invalidate_claims(m);
  invalidate_claims(v);
  if (n > 0) do_adam_update(params, grads, m, v, hp, control, step_state);
}

}  // namespace trident
