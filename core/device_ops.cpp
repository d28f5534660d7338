// The validating front of every Device op: arguments are checked here once, for every backend,
// with messages that name the device, the op and the argument; then the backend's slot runs.
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>

#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/half.h"

namespace trident {
namespace {

bool same_shape(const Conv2dShape& a, const Conv2dShape& b) {
  return a.batch == b.batch && a.in_channels == b.in_channels && a.height == b.height &&
         a.width == b.width && a.out_channels == b.out_channels && a.kernel_h == b.kernel_h &&
         a.kernel_w == b.kernel_w && a.stride_h == b.stride_h && a.stride_w == b.stride_w &&
         a.pad_h == b.pad_h && a.pad_w == b.pad_w && a.dtype == b.dtype;
}

// The ops that may be queued on a side queue (Device::queue_beside): elementwise ones, which use
// no scratch, reduction buffers or library handles that the main queue's ops share.
bool may_run_beside(const char* op) {
  for (const char* allowed :
       {"sgd_update", "adam_update", "convert", "fill", "scale", "axpby", "unary_forward"})
    if (std::strcmp(op, allowed) == 0) return true;
  return false;
}

// Argument checks of one op call; every failure is a ShapeError "<device>: <op>: <problem>"
// (queuing an op beside that may not run there: an Error).
class OpCheck {
 public:
  OpCheck(const Device& device, const char* op) : device_(device), op_(op) {
    if (device.queuing_beside() && !may_run_beside(op))
      throw Error(device.info().id() + ": " + op + " cannot be queued beside (queue_beside): "
                  "only the optimizer updates, convert, fill, scale, axpby and unary_forward can");
  }

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
  // A tensor of any float type this device holds (float32, and the 16-bit types it converts).
  void floating(const char* name, const Tensor& t, int64_t count) const {
    here(name, t);
    if (!is_float(t.dtype()))
      fail(std::string(name) + " is " + dtype_name(t.dtype()) + ", expected a float type");
    if (!device_.supports(t.dtype()))
      fail(std::string(name) + " is " + dtype_name(t.dtype()) + ", which this " +
           device_.info().backend + " device does not support (use float32)");
    if (count >= 0 && t.numel() != count)
      fail(std::string(name) + " has " + std::to_string(t.numel()) + " elements (shape " +
           shape_string(t.shape()) + "), expected " + std::to_string(count));
  }
  void optional_floating(const char* name, const Tensor& t, int64_t count) const {
    if (t.defined()) floating(name, t, count);
  }
  // A float tensor of exactly `want` (the op's compute type: conv2d's s.dtype, or x's type).
  void same_float(const char* name, const Tensor& t, int64_t count, DType want) const {
    floating(name, t, count);
    if (t.dtype() != want)
      fail(std::string(name) + " is " + dtype_name(t.dtype()) + ", expected " + dtype_name(want) +
           " like the op's other activations");
  }
  void optional_same_float(const char* name, const Tensor& t, int64_t count, DType want) const {
    if (t.defined()) same_float(name, t, count, want);
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

// 16-bit operands of a family the backend does not compute natively, staged through float32
// scratch: in() gives the float32 form of an input (converted now), out() the float32 form of an
// output (converted back by finish()). Tensors already float32, or native, pass through. The
// same memory staged twice (an op in place) gets one scratch copy.
class Staging {
 public:
  // operands: the call's tensors, where the family lets their float types differ: if they do
  // and the backend's native kernels want one type per call (native_mixed), every 16-bit
  // operand is staged.
  Staging(Device& device, OpFamily family, std::initializer_list<Tensor> operands = {})
      : device_(device), family_(family), mark_(device.scratch_mark()),
        stage_all_(!device.native_mixed(family) && mixes_types(operands)) {}
  ~Staging() { device_.release_scratch(mark_); }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  Tensor in(const Tensor& t) { return stage(t, true, false); }
  // read: the op also reads the output's old value (beta != 0, accumulation, in place).
  Tensor out(const Tensor& t, bool read = false) { return stage(t, read, true); }
  void finish() {
    for (const Pair& p : pairs_)
      if (p.written) device_.convert(p.staged, p.original);
  }

 private:
  struct Pair {
    Tensor original, staged;
    bool loaded = false, written = false;
  };
  static bool mixes_types(std::initializer_list<Tensor> operands) {
    const Tensor* first = nullptr;
    for (const Tensor& t : operands) {
      if (!t.defined()) continue;
      if (first && t.dtype() != first->dtype()) return true;
      if (!first) first = &t;
    }
    return false;
  }
  // Arguments are staged before the op runs, in any order (a call's arguments are evaluated in
  // an unspecified order): an output staged first and read later as an input is loaded then.
  Tensor stage(const Tensor& t, bool read, bool write) {
    if (!t.defined() || !is_half(t.dtype())) return t;
    if (!stage_all_ && device_.native(family_, t.dtype())) return t;
    Pair* pair = nullptr;
    for (Pair& p : pairs_)
      if (p.original.memory().handle == t.memory().handle &&
          p.original.memory().offset == t.memory().offset && p.original.bytes() == t.bytes())
        pair = &p;
    if (!pair) {
      pairs_.push_back({t, device_.scratch(DType::f32, t.shape())});
      pair = &pairs_.back();
    }
    if (read && !pair->loaded) {
      device_.convert(pair->original, pair->staged.reshape(pair->original.shape()));
      pair->loaded = true;
    }
    pair->written = pair->written || write;
    return pair->staged.reshape(t.shape());
  }
  Device& device_;
  OpFamily family_;
  size_t mark_;
  bool stage_all_;
  std::vector<Pair> pairs_;
};

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

void Device::axpby(const Tensor& x, const Tensor& y, float a, float b) {
  OpCheck check(*this, "axpby");
  check.floating("y", y, -1);
  check.floating("x", x, y.numel());
  check.disjoint("x", x, "y", y, true);
  invalidate_claims(y);
  if (y.numel() == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y});
  const Tensor xs = stage.in(x), ys = stage.out(y, b != 0.0f);
  do_axpby(xs, ys, a, b);
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
  invalidate_claims(dx);
  if (n == 0) return;
  Staging stage(*this, OpFamily::elementwise, {x, y, dy, dx});
  const Tensor xs = stage.in(x), ys = stage.in(y), dys = stage.in(dy), dxs = stage.out(dx);
  do_unary_backward(op, xs, ys, dys, dxs, alpha);
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
                             const Tensor& db, const Tensor& workspace) {
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
      if (c.workspace.handle == workspace.memory().handle &&
          c.workspace.offset == workspace.memory().offset &&
          c.input.handle == x.memory().handle && c.input.offset == x.memory().offset &&
          c.input_bytes == x.bytes() && c.weights.handle == w.memory().handle &&
          c.weights.offset == w.memory().offset && c.weights_bytes == w.bytes() &&
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
  const bool still_holds = do_conv2d_backward(cs, stage.in(x), stage.in(w), stage.in(dy),
                                              stage.out(dx), dw, db, workspace, valid);
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
  OpCheck check(*this, "batchnorm_forward");
  check_batchnorm(check, s);
  const int64_t c = s.channels;
  check.floating("x", x, s.numel());
  check.same_float("y", y, s.numel(), x.dtype());
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
  Staging stage(*this, OpFamily::batchnorm);
  do_batchnorm_forward(s, training, stage.in(x), gamma, beta, running_mean, running_var,
                       stage.out(y), save_mean, save_invstd);
  stage.finish();
}

void Device::batchnorm_backward(const BatchNormShape& s, const Tensor& x, const Tensor& dy,
                                const Tensor& gamma, const Tensor& save_mean,
                                const Tensor& save_invstd, const Tensor& dx,
                                const Tensor& dgamma, const Tensor& dbeta, const Tensor& y) {
  OpCheck check(*this, "batchnorm_backward");
  check_batchnorm(check, s);
  const int64_t c = s.channels;
  check.floating("x", x, s.numel());
  check.same_float("dy", dy, s.numel(), x.dtype());
  check.same_float("dx", dx, s.numel(), x.dtype());
  if (s.relu) {
    check.require(y.defined(), "a fused ReLU (relu set) needs y, the forward's output");
    check.same_float("y", y, s.numel(), x.dtype());
    check.disjoint("dx", dx, "y", y);
  } else {
    check.require(!y.defined(), "y is read only with a fused ReLU (relu set)");
  }
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
  Staging stage(*this, OpFamily::batchnorm);
  const Tensor staged_y = s.relu ? stage.in(y) : Tensor();
  do_batchnorm_backward(s, stage.in(x), stage.in(dy), gamma, save_mean, save_invstd,
                        stage.out(dx), dgamma, dbeta, staged_y);
  stage.finish();
}

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
