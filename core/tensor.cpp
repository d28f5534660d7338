// Tensor storage is a block of the device's caching pool, returned to it when the last view goes.
#include "trident/core/tensor.h"

#include "trident/core/half.h"

#include "trident/core/allocator.h"
#include "trident/core/device.h"
#include "trident/core/error.h"

namespace trident {

struct Tensor::Storage {
  Device* device = nullptr;
  void* handle = nullptr;
  size_t bytes = 0;
  ~Storage() { device->allocator().deallocate(handle); }
};

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ShapeError("negative dimension in shape " + shape_string(shape));
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor Tensor::empty(Device& device, const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  auto storage = std::make_shared<Storage>();
  storage->device = &device;
  storage->bytes = t.bytes();
  storage->handle = device.allocator().allocate(storage->bytes);
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::zeros(Device& device, const Shape& shape, DType dtype) {
  Tensor t = empty(device, shape, dtype);
  if (t.numel() > 0) device.fill(t, 0.0f);
  return t;
}

Tensor Tensor::from_host(Device& device, const Shape& shape, const std::vector<float>& values) {
  Tensor t = empty(device, shape, DType::f32);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw ShapeError("from_host: " + std::to_string(values.size()) + " values for shape " +
                     shape_string(shape));
  t.copy_from_host(values.data(), t.bytes());
  return t;
}

Tensor Tensor::from_host(Device& device, const Shape& shape, const std::vector<float>& values,
                         DType dtype) {
  if (dtype == DType::f32) return from_host(device, shape, values);
  if (!is_half(dtype))
    throw ShapeError(std::string("from_host: float values cannot make a ") + dtype_name(dtype) +
                     " tensor");
  Tensor t = empty(device, shape, dtype);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw ShapeError("from_host: " + std::to_string(values.size()) + " values for shape " +
                     shape_string(shape));
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_to_half_bits(dtype, values[i]);
  t.copy_from_host(bits.data(), t.bytes());
  return t;
}

Tensor Tensor::from_host(Device& device, const Shape& shape, const std::vector<int32_t>& values) {
  Tensor t = empty(device, shape, DType::i32);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw ShapeError("from_host: " + std::to_string(values.size()) + " values for shape " +
                     shape_string(shape));
  t.copy_from_host(values.data(), t.bytes());
  return t;
}

Tensor Tensor::from_host(Device& device, const Shape& shape, const std::vector<uint8_t>& values) {
  Tensor t = empty(device, shape, DType::u8);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw ShapeError("from_host: " + std::to_string(values.size()) + " values for shape " +
                     shape_string(shape));
  t.copy_from_host(values.data(), t.bytes());
  return t;
}

Device& Tensor::device() const {
  if (!storage_) throw Error("Tensor::device() on an undefined tensor");
  return *storage_->device;
}

DeviceMemory Tensor::memory() const {
  if (!storage_) return {};
  return {storage_->handle, byte_offset_};
}

Tensor Tensor::view(int64_t element_offset, const Shape& shape) const {
  const size_t esize = dtype_size(dtype_);
  const size_t begin = byte_offset_ + static_cast<size_t>(element_offset) * esize;
  const size_t size = static_cast<size_t>(shape_numel(shape)) * esize;
  if (!storage_ || element_offset < 0 || begin + size > byte_offset_ + bytes())
    throw ShapeError("view of " + shape_string(shape) + " at element " +
                     std::to_string(element_offset) + " runs past a tensor of shape " +
                     shape_string(shape_));
  Tensor t = *this;
  t.byte_offset_ = begin;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape_numel(shape) != numel())
    throw ShapeError("cannot reshape " + shape_string(shape_) + " to " + shape_string(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::reinterpret(DType dtype, const Shape& shape, size_t byte_offset) const {
  const size_t size = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  if (!storage_ || byte_offset + size > bytes())
    throw ShapeError("reinterpreting " + std::to_string(bytes()) + " bytes as " +
                     shape_string(shape) + " " + dtype_name(dtype) + " at byte " +
                     std::to_string(byte_offset) + " runs past the end");
  Tensor t = *this;
  t.byte_offset_ = byte_offset_ + byte_offset;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

void Tensor::copy_from_host(const void* host, size_t size) const {
  if (size != bytes())
    throw ShapeError("copy_from_host: " + std::to_string(size) + " bytes into a tensor of " +
                     std::to_string(bytes()));
  if (size) device().copy_from_host(memory(), host, size);
}

void Tensor::copy_from(const Tensor& other) const {
  if (other.bytes() != bytes() || &other.device() != &device())
    throw ShapeError("copy_from: " + shape_string(other.shape()) + " into " +
                     shape_string(shape_) + " (sizes and devices must match)");
  if (bytes()) device().copy_on_device(memory(), other.memory(), bytes());
}

void Tensor::to_host(void* host, size_t size) const {
  if (size != bytes())
    throw ShapeError("to_host: " + std::to_string(size) + " bytes from a tensor of " +
                     std::to_string(bytes()));
  if (size) device().copy_to_host(host, memory(), size);
}

std::vector<float> Tensor::to_host() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (is_half(dtype_)) {
    std::vector<uint16_t> bits(out.size());
    to_host(bits.data(), bytes());
    for (size_t i = 0; i < bits.size(); ++i) out[i] = half_bits_to_float(dtype_, bits[i]);
    return out;
  }
  if (dtype_ != DType::f32)
    throw ShapeError(std::string("to_host(): tensor is ") + dtype_name(dtype_) +
                     ", not a float type (use to_host_i32() or the byte copy)");
  to_host(out.data(), bytes());
  return out;
}

std::vector<int32_t> Tensor::to_host_i32() const {
  if (dtype_ != DType::i32) throw ShapeError("to_host_i32(): tensor is not int32");
  std::vector<int32_t> out(static_cast<size_t>(numel()));
  to_host(out.data(), bytes());
  return out;
}

}  // namespace trident
