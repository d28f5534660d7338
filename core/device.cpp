// Device's non-virtual parts that are not op checks: the caching pool, the memory entry points,
// the workspace claims of the convolution, and the device-side error flag.
#include "core/device.h"

#include <string>

#include "core/allocator.h"
#include "core/error.h"

namespace trident {
namespace {

bool overlaps(DeviceMemory a, size_t a_bytes, DeviceMemory b, size_t b_bytes) {
  return a.handle == b.handle && a.offset < b.offset + b_bytes && b.offset < a.offset + a_bytes;
}

}  // namespace

Device::Device() : allocator_(std::make_unique<CachingAllocator>(*this)) {}
Device::~Device() = default;

CachingAllocator& Device::allocator() { return *allocator_; }

void Device::release_pool() noexcept {
  error_flag_ = Tensor();
  allocator_->release_all();
}

const Tensor& Device::error_flag() {
  if (!error_flag_.defined()) error_flag_ = Tensor::zeros(*this, {2}, DType::i32);
  return error_flag_;
}

void Device::check_error_flag() {
  if (!error_flag_.defined()) return;
  int32_t flag[2] = {0, 0};
  do_copy_to_host(flag, error_flag_.memory(), sizeof(flag));
  if (flag[0] == 0) return;
  do_fill(error_flag_, 0.0f);
  const std::string value = std::to_string(flag[1]);
  switch (static_cast<DeviceErrorCode>(flag[0])) {
    case DeviceErrorCode::gather_index:
      throw BackendError(info().id() + ": gather_rows / gather_samples met index " + value +
                         " in its index table, outside the source's rows; the row was not read");
    case DeviceErrorCode::table_position:
      throw BackendError(info().id() + ": gather_rows / gather_samples: batch position " + value +
                         " (step_state[0]) runs past the end of the index table");
    case DeviceErrorCode::label:
      throw BackendError(info().id() + ": a loss or accuracy op met label " + value +
                         ", outside [0, classes) of its scores; the row was skipped");
    default:
      throw BackendError(info().id() + ": a kernel raised unknown error code " +
                         std::to_string(flag[0]) + " (value " + value + ")");
  }
}

// ---- memory and ordering ---------------------------------------------------------------------

void Device::copy_from_host(DeviceMemory dst, const void* host, size_t bytes) {
  if (bytes == 0) return;
  if (!dst || !host)
    throw ShapeError(info().id() + ": copy_from_host of " + std::to_string(bytes) +
                     " bytes with a null " + (dst ? "host pointer" : "device buffer"));
  invalidate_claims(dst, bytes);
  do_copy_from_host(dst, host, bytes);
}

void Device::copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  if (bytes == 0) return;
  if (!src || !host)
    throw ShapeError(info().id() + ": copy_to_host of " + std::to_string(bytes) +
                     " bytes with a null " + (src ? "host pointer" : "device buffer"));
  do_copy_to_host(host, src, bytes);
  check_error_flag();
}

void Device::copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  if (bytes == 0) return;
  if (!dst || !src)
    throw ShapeError(info().id() + ": copy_on_device of " + std::to_string(bytes) +
                     " bytes with a null buffer");
  if (overlaps(dst, bytes, src, bytes))
    throw ShapeError(info().id() + ": copy_on_device: source and destination overlap");
  invalidate_claims(dst, bytes);
  do_copy_on_device(dst, src, bytes);
}

void Device::synchronize() {
  do_synchronize();
  check_error_flag();
}

std::unique_ptr<CapturedWork> Device::capture(const std::function<void()>& step) {
  error_flag();  // allocate now: nothing may allocate while a step is being recorded
  return do_capture(step);
}

std::unique_ptr<CapturedWork> Device::do_capture(const std::function<void()>&) { return nullptr; }

// ---- workspace claims ------------------------------------------------------------------------

void Device::invalidate_claims(DeviceMemory memory, size_t bytes) {
  std::lock_guard<std::mutex> lock(claims_mutex_);
  if (claims_.empty()) return;
  for (size_t i = claims_.size(); i-- > 0;) {
    const WorkspaceClaim& c = claims_[i];
    if (overlaps(memory, bytes, c.workspace, c.workspace_bytes) ||
        overlaps(memory, bytes, c.input, c.input_bytes))
      claims_.erase(claims_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void Device::invalidate_claims(const Tensor& written) {
  if (written.defined()) invalidate_claims(written.memory(), written.bytes());
}

}  // namespace trident
