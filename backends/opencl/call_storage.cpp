// CallStorage (call_storage.h): the common storage type of a call, or float32 with staging.
#include "trident/backends/opencl/call_storage.h"

namespace trident::opencl {

CallStorage::CallStorage(Device& device, std::initializer_list<const Tensor*> tensors)
    : device_(device), mark_(device.scratch_mark()) {
  bool first = true, mixed = false;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (first) type_ = t->dtype();
    mixed = mixed || t->dtype() != type_;
    first = false;
  }
  if (mixed) type_ = DType::f32;
}

CallStorage::~CallStorage() { device_.release_scratch(mark_); }

Tensor CallStorage::stage(const Tensor& t, bool read, bool write) {
  if (!t.defined() || t.dtype() == type_) return t;
  // The same memory staged twice (an op in place) shares one scratch copy.
  Pair* pair = nullptr;
  for (Pair& p : pairs_)
    if (p.original.memory().handle == t.memory().handle &&
        p.original.memory().offset == t.memory().offset && p.original.bytes() == t.bytes())
      pair = &p;
  if (!pair) {
    pairs_.push_back({t, device_.scratch(type_, t.shape())});
    pair = &pairs_.back();
  }
  if (read && !pair->loaded) {
    device_.convert(pair->original, pair->staged);
    pair->loaded = true;
  }
  pair->written = pair->written || write;
  return pair->staged.reshape(t.shape());
}

void CallStorage::finish() {
  for (const Pair& p : pairs_)
    if (p.written) device_.convert(p.staged, p.original);
}

}  // namespace trident::opencl
