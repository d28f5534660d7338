// The plain values that describe a device and a place in its memory (no behaviour): what a Tensor
// and the registry need without knowing the Device class.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trident {

// A place in device memory: the backend's opaque handle (a pointer on CPU and CUDA, a cl_mem on
// OpenCL) plus a byte offset, so that sub-ranges of one buffer need no extra driver objects.
struct DeviceMemory {
  void* handle = nullptr;
  size_t offset = 0;
  DeviceMemory at(size_t extra_bytes) const { return {handle, offset + extra_bytes}; }
  explicit operator bool() const { return handle != nullptr; }
};

// What a device can take in one op; the validating front (core/device_ops.cpp) refuses larger
// requests with a message instead of letting a kernel overflow its index arithmetic.
struct DeviceLimits {
  // Elements one tensor argument may hold (OpenCL kernels index with 32-bit integers).
  int64_t max_elements = INT64_MAX;
};

struct DeviceInfo {
  std::string backend;         // "cpu", "cuda", "opencl"
  int index = 0;               // position within its backend
  std::string name;            // "NVIDIA H100 80GB HBM3", "AMD EPYC 9R14 (2 threads)"
  std::string vendor;
  std::string type;            // "gpu", "cpu", "accelerator"
  std::string driver;          // driver / runtime version
  std::string detail;          // backend-specific: compute capability, OpenCL version, ISA ...
  uint64_t memory_bytes = 0;
  int compute_units = 0;       // SMs, OpenCL compute units, CPU threads
  DeviceLimits limits;
  std::string id() const { return backend + ":" + std::to_string(index); }
};

}  // namespace trident
