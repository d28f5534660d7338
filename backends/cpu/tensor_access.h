// How CpuDevice's op slots (cpu_device.cpp, cpu_device_training.cpp) reach a tensor's host
// data and pick the storage type of the float kernels. Internal to the CPU backend.
#pragma once
#include <cstdint>

#include "trident/core/tensor.h"

namespace trident::cpu {

// The host address of a tensor's data (an undefined tensor gives null: optional operands).
template <class T = float>
T* at(DeviceMemory m) {
  if (!m.handle) return nullptr;
  return reinterpret_cast<T*>(static_cast<char*>(m.handle) + m.offset);
}
template <class T = float>
T* at(const Tensor& t) {
  return at<T>(t.memory());
}

// Calls f with a zero of the storage type of dtype's float kernels (f takes its type as the
// element type X): uint16_t for bfloat16 bits, float otherwise (the front passes only types
// do_native accepts).
template <class F>
void with_storage(DType dtype, const F& f) {
  if (dtype == DType::bf16) return f(uint16_t{0});
  f(0.0f);
}

}  // namespace trident::cpu
