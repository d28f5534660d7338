// OpenClDevice's memory, copies, ordering and capture slots, handed to its ClQueue.
#include "trident/backends/opencl/opencl_device.h"

#include <cstring>
#include <limits>

#include "trident/core/env.h"
#include "trident/core/error.h"

namespace trident::opencl {
namespace {

// Floats of the per-channel reduction scratch (1 MiB): partials of up to 2^18 (piece, channel)
// pairs; ChannelSplit uses fewer pieces where channels are many.
constexpr size_t kReduceScratchFloats = size_t(1) << 18;

}  // namespace

OpenClDevice::OpenClDevice(cl_platform_id platform, cl_device_id device, DeviceInfo info)
    : info_(std::move(info)), queue_(platform, device, info_), gemm_(queue_, info_) {
  // The kernels index one tensor with 32-bit integers (uint element indices, int in the own
  // GEMM); the front refuses larger tensors with a message.
  info_.limits.max_elements = std::numeric_limits<int32_t>::max();
  queue_.grow_pair(reduce_scratch_, kReduceScratchFloats * sizeof(float));
  winograd_ = winograd_available();
  winograd_16bit_ = env_flag("TRIDENT_OPENCL_WINOGRAD", false);  // and winograd_ (winograd_conv)
  // A second queue pays where kernels leave parts of a GPU idle; a CPU device's work-groups
  // already spread over every core, and Ubuntu 24.04's PoCL 5.0 gave a wrong result with it in
  // one run of a test out of several (PoCL 3.1 and NVIDIA's driver pass every run; the suite's
  // ctest run sets TRIDENT_OPENCL_SIDE_QUEUE=1, as for the Winograd kernels).
  side_queue_ = env_flag("TRIDENT_OPENCL_SIDE_QUEUE", info_.type == "gpu");
}

OpenClDevice::~OpenClDevice() { release_pool(); }

void* OpenClDevice::do_allocate(size_t bytes) { return queue_.allocate(bytes); }

void OpenClDevice::do_free(void* handle) noexcept { queue_.release(static_cast<cl_mem>(handle)); }

void OpenClDevice::do_copy_from_host(DeviceMemory dst, const void* host, size_t bytes) {
  queue_.write(dst, host, bytes);
}

void OpenClDevice::do_copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  queue_.read(host, src, bytes);
}

void OpenClDevice::do_copy_on_device(DeviceMemory dst, DeviceMemory src, size_t bytes) {
  queue_.copy(dst, src, bytes);
}

void OpenClDevice::do_fill(const Tensor& dst, float value) {
  const DeviceMemory m = dst.memory();
  const size_t bytes = dst.bytes();
  if (value == 0.0f) {  // any dtype's zero; whole words where the range allows
    const uint32_t zero = 0;
    const size_t unit = m.offset % 4 == 0 && bytes % 4 == 0 ? 4 : 1;
    return queue_.fill(m, &zero, unit, bytes);
  }
  switch (dst.dtype()) {
    case DType::f32: return queue_.fill(m, &value, sizeof value, bytes);
    case DType::i32: {
      const int32_t word = static_cast<int32_t>(value);
      return queue_.fill(m, &word, sizeof word, bytes);
    }
    case DType::f16:
    case DType::bf16: {  // the value rounded once, as convert() rounds it
      const uint16_t bits = float_to_half_bits(dst.dtype(), value);
      return queue_.fill(m, &bits, sizeof bits, bytes);
    }
    default:
      throw ShapeError(info_.id() + ": fill with a non-zero value supports F32, F16, BF16 and " +
                       "I32, not " + dtype_name(dst.dtype()));
  }
}

void OpenClDevice::do_synchronize() { queue_.finish(); }

std::unique_ptr<CapturedWork> OpenClDevice::do_capture(const std::function<void()>& step) {
  return queue_.capture(step);
}

BufferArg OpenClDevice::error_flag_arg() { return queue_.buffer(error_flag(), "error flag"); }

}  // namespace trident::opencl
