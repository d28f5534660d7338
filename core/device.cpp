// Device's non-virtual parts that are not op checks: the caching pool, the memory entry points,
// the workspace claims of the convolution, and the device-side error flag.
#include "trident/core/device.h"

#include <string>

#include "trident/core/allocator.h"
#include "trident/core/error.h"
#include "trident/core/half.h"

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
  scratch_blocks_.clear();
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
  join_beside();
  do_copy_from_host(dst, host, bytes);
}

void Device::copy_to_host(void* host, DeviceMemory src, size_t bytes) {
  if (bytes == 0) return;
  if (!src || !host)
    throw ShapeError(info().id() + ": copy_to_host of " + std::to_string(bytes) +
                     " bytes with a null " + (src ? "host pointer" : "device buffer"));
  join_beside();
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
  join_beside();
  do_synchronize();
  check_error_flag();
}

void Device::queue_beside(const std::function<void()>& work) {
  if (beside_)
    throw Error(info().id() + ": queue_beside inside queue_beside (side work does not nest)");
  if (!do_has_side_queue()) return work();
  // The error flag exists before any op that may raise it is queued beside (allocating there
  // is refused).
  if (do_side_queue_runs_every_op()) error_flag();
  do_begin_beside();
  beside_ = true;
  beside_pending_ = true;
  try {
    work();
  } catch (...) {
    beside_ = false;
    do_end_beside();
    throw;
  }
  beside_ = false;
  do_end_beside();
}

void Device::join_last_beside() {
  if (beside_) throw Error(info().id() + ": join_last_beside inside queue_beside's work");
  if (beside_pending_) do_join_last_beside();
}

void Device::join_beside() {
  if (beside_) throw Error(info().id() + ": join_beside inside queue_beside's work");
  if (!beside_pending_) return;
  beside_pending_ = false;
  do_join_beside();
}

std::unique_ptr<CapturedWork> Device::capture(const std::function<void()>& step) {
  error_flag();  // allocate now: nothing may allocate while a step is being recorded
  join_beside();
  capturing_ = true;
  try {
    // A captured step must end on the main queue (a CUDA graph joins every forked stream).
    auto work = do_capture([this, step] {  // a copy: a test device replays it later
      step();
      join_beside();
    });
    capturing_ = false;
    return work;
  } catch (...) {
    capturing_ = false;
    throw;
  }
}

std::unique_ptr<CapturedWork> Device::do_capture(const std::function<void()>&) { return nullptr; }

// ---- dtypes and scratch --------------------------------------------------------------------------

bool Device::supports(DType dtype) const {
  return !is_half(dtype) || do_native(OpFamily::convert, dtype);
}

bool Device::do_native(OpFamily, DType) const { return false; }

bool Device::do_native_mixed(OpFamily) const { return true; }

void Device::do_convert(const Tensor& src, const Tensor&) {
  throw UsageError(info().id() + " (" + info().backend + " backend) does not support " +
                   dtype_name(src.dtype()) + " tensors: use float32 here");
}

void Device::do_update_loss_scale(const Tensor&, const Tensor&, const LossScaleParams&) {
  throw UsageError(info().id() + " (" + info().backend + " backend) does not train in float16 "
                   "(no loss scaling): use --precision fp32 or bf16");
}

Tensor Device::scratch(DType dtype, const Shape& shape) {
  if (beside_)  // a region handed out here could be handed out again to the main queue at once
    throw Error(info().id() + ": an op queued beside (queue_beside) asked for scratch memory; "
                "only elementwise ops on natively supported types may run beside");
  constexpr size_t kAlign = 256;
  const size_t bytes = (static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype) + kAlign - 1) /
                       kAlign * kAlign;
  // Walk the blocks in order: scratch_used_ counts bytes from the first block's start, a
  // request never straddling two blocks.
  size_t begin = 0;
  for (const Tensor& block : scratch_blocks_) {
    const size_t end = begin + block.bytes();
    if (scratch_used_ < end) {
      const size_t start = std::max(scratch_used_, begin);
      if (start + bytes <= end) {
        scratch_used_ = start + bytes;
        return block.reinterpret(dtype, shape, start - begin);
      }
    }
    begin = end;
  }
  if (capturing_)
    throw Error(info().id() + ": a captured step needs more scratch than the eager step before it "
                "(" + std::to_string(bytes) + " bytes more); run the step once eagerly first");
  const size_t block_bytes = std::max<size_t>(bytes, size_t(64) << 20);
  scratch_blocks_.push_back(Tensor::empty(*this, {static_cast<int64_t>(block_bytes)}, DType::u8));
  scratch_used_ = begin + bytes;
  return scratch_blocks_.back().reinterpret(dtype, shape, 0);
}

// ---- workspace claims ------------------------------------------------------------------------

void Device::invalidate_claims(DeviceMemory memory, size_t bytes) {
  std::lock_guard<std::mutex> lock(claims_mutex_);
  if (claims_.empty()) return;
  for (size_t i = claims_.size(); i-- > 0;) {
    const WorkspaceClaim& c = claims_[i];
    if (overlaps(memory, bytes, c.workspace, c.workspace_bytes) ||
        overlaps(memory, bytes, c.input, c.input_bytes) ||
        overlaps(memory, bytes, c.weights, c.weights_bytes))
      claims_.erase(claims_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void Device::invalidate_claims(const Tensor& written) {
  if (written.defined()) invalidate_claims(written.memory(), written.bytes());
}

}  // namespace trident
