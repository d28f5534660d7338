// CallStorage: the activation tensors of one op call brought to one storage type, the act_t of
// the main program variant its kernels run from (kernels/opencl/storage.cl).
//
// Tensors that share a type run in it. A call that mixes types (a float32 x into a bfloat16 y:
// the contract allows it for the elementwise, channel and head ops) runs in float32 instead,
// its 16-bit tensors staged through float32 scratch as the front stages the families a backend
// does not compute natively (core/device_ops.cpp): inputs converted before the kernel, outputs
// after it, so that results are rounded once, as on the CPU.
#pragma once
#include <initializer_list>
#include <vector>

#include "trident/core/device.h"

namespace trident::opencl {

class CallStorage {
 public:
  // `tensors`: every activation tensor of the call; null and undefined ones are ignored.
  CallStorage(Device& device, std::initializer_list<const Tensor*> tensors);
  ~CallStorage();
  CallStorage(const CallStorage&) = delete;
  CallStorage& operator=(const CallStorage&) = delete;

  // The storage type the kernels run in.
  DType type() const { return type_; }
  // What to pass for input t: t, or its float32 copy (converted now).
  Tensor in(const Tensor& t) { return stage(t, true, false); }
  // What to pass for output t (read: the op also reads its old value).
  Tensor out(const Tensor& t, bool read = false) { return stage(t, read, true); }
  // Converts the staged outputs back; call after the kernels are queued.
  void finish();

 private:
  struct Pair {
    Tensor original, staged;
    bool loaded = false, written = false;
  };
  Tensor stage(const Tensor& t, bool read, bool write);

  Device& device_;
  DType type_ = DType::f32;
  size_t mark_;
  std::vector<Pair> pairs_;
};

}  // namespace trident::opencl
