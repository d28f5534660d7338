// Tensor: shape, dtype, the device it lives on, and a shared handle to a block of that device's
// memory. No host pointer leaks through it: values reach the host only through to_host().
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trident/core/device_types.h"
#include "trident/core/dtype.h"

namespace trident {

class Device;

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[200, 784]"

class Tensor {
 public:
  Tensor() = default;
  // Uninitialized memory from the device's caching pool.
  static Tensor empty(Device& device, const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(Device& device, const Shape& shape, DType dtype = DType::f32);
  static Tensor from_host(Device& device, const Shape& shape, const std::vector<float>& values);
  // The values rounded on the host to dtype (f32, f16 or bf16; round to nearest even).
  static Tensor from_host(Device& device, const Shape& shape, const std::vector<float>& values,
                          DType dtype);
  static Tensor from_host(Device& device, const Shape& shape, const std::vector<int32_t>& values);
  static Tensor from_host(Device& device, const Shape& shape, const std::vector<uint8_t>& values);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device& device() const;
  // Where the data starts, for the Device ops.
  DeviceMemory memory() const;

  // A tensor sharing this one's memory: `shape` starting `element_offset` elements in (used for
  // parameters that are views into one flat buffer, and for batch slices). Bounds are checked.
  Tensor view(int64_t element_offset, const Shape& shape) const;
  // Same memory, new shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  // The same bytes read as another dtype: `shape` of `dtype` starting `byte_offset` bytes in
  // (scratch buffers allocated as bytes and used as floats). Bounds are checked.
  Tensor reinterpret(DType dtype, const Shape& shape, size_t byte_offset = 0) const;

  void copy_from_host(const void* host, size_t bytes) const;
  void copy_from(const Tensor& other) const;  // same device, same byte size
  std::vector<float> to_host() const;  // f32, f16, bf16 (widened on the host); waits for queued work
  std::vector<int32_t> to_host_i32() const;
  void to_host(void* host, size_t bytes) const;

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace trident
