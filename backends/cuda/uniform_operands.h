// The float operands of one CUDA elementwise or channel op in one type: the kernels are templates
// over a single storage type, so an op whose operands mix types (a float32 gradient scaled into
// a float16 one, say) gets float32 copies of its 16-bit operands in the device's scratch arena,
// as the front stages a family a backend does not compute natively. Operands of one type (every
// op of a model's step) pass through untouched.
#pragma once
#include <initializer_list>
#include <vector>

#include "trident/core/device.h"
#include "trident/core/half.h"

namespace trident::cuda {

class UniformOperands {
 public:
  // The op's float operands (undefined ones are ignored).
  UniformOperands(Device& device, std::initializer_list<const Tensor*> operands)
      : device_(device), mark_(device.scratch_mark()) {
    bool first = true;
    for (const Tensor* t : operands) {
      if (!t->defined()) continue;
      if (!first && t->dtype() != dtype_) mixed_ = true;
      if (first) dtype_ = t->dtype(), first = false;
    }
    if (mixed_) dtype_ = DType::f32;
  }
  ~UniformOperands() { device_.release_scratch(mark_); }
  UniformOperands(const UniformOperands&) = delete;
  UniformOperands& operator=(const UniformOperands&) = delete;

  // The type every operand has after in() / out().
  DType dtype() const { return dtype_; }
  Tensor in(const Tensor& t) { return stage(t, true, false); }
  // read: the op also reads the output's old value.
  Tensor out(const Tensor& t, bool read = false) { return stage(t, read, true); }
  // Rounds the staged outputs back into their tensors.
  void finish() {
    for (const auto& [original, staged] : outputs_) device_.convert(staged, original);
  }

 private:
  Tensor stage(const Tensor& t, bool read, bool write) {
    if (!mixed_ || !t.defined() || t.dtype() == DType::f32) return t;
    Tensor staged = device_.scratch(DType::f32, t.shape());
    if (read) device_.convert(t, staged);
    if (write) outputs_.push_back({t, staged});
    return staged;
  }
  Device& device_;
  size_t mark_;
  DType dtype_ = DType::f32;
  bool mixed_ = false;
  std::vector<std::pair<Tensor, Tensor>> outputs_;
};

}  // namespace trident::cuda
