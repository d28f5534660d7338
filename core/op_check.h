// The argument checks and the 16-bit staging that the validating fronts of Device's ops share
// (core/device_ops.cpp: memory, GEMM, elementwise, channel, data and optimizer ops;
// core/device_ops_nn.cpp: convolution, pooling, normalisation; core/device_ops_head.cpp: the
// losses and the head). Internal to core.
#pragma once
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/error.h"
#include "trident/core/half.h"

namespace trident::op_check {

// The ops that may be queued on a side queue (Device::queue_beside): elementwise ones, which use
// no scratch, reduction buffers or library handles that the main queue's ops share.
inline bool may_run_beside(const char* op) {
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
    if (device.queuing_beside() && !device.side_queue_runs_every_op() && !may_run_beside(op))
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

}  // namespace trident::op_check
