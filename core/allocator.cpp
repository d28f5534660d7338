// Caching pool: best fit among cached blocks no more than twice the request, else a new block.
#include "trident/core/allocator.h"

#include "trident/core/error.h"

#include <string>

namespace trident {

CachingAllocator::~CachingAllocator() { release_all(); }

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes < kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_blocks_.lower_bound(size);
  if (it != free_blocks_.end() && it->first <= 2 * size) {
    void* handle = it->second;
    const size_t block = it->first;
    free_blocks_.erase(it);
    bytes_cached_ -= block;
    used_blocks_.emplace(handle, block);
    bytes_in_use_ += block;
    return handle;
  }
  void* handle = nullptr;
  try {
    handle = device_.do_allocate(size);
  } catch (const OutOfMemory&) {
    const size_t was_cached = bytes_cached_;
    for (auto& [block, h] : free_blocks_) device_.do_free(h);
    free_blocks_.clear();
    bytes_cached_ = 0;
    try {
      handle = device_.do_allocate(size);
    } catch (const OutOfMemory& e) {
      // The device's message names the requested and free bytes; add what the pool held.
      throw OutOfMemory(std::string(e.what()) + " (Trident's pool had " +
                        std::to_string(was_cached) + " bytes cached, released before a retry; " +
                        std::to_string(bytes_in_use_) + " bytes are in use by live tensors)");
    }
  }
  ++driver_allocations_;
  used_blocks_.emplace(handle, size);
  bytes_in_use_ += size;
  return handle;
}

void CachingAllocator::deallocate(void* handle) noexcept {
  if (!handle) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = used_blocks_.find(handle);
  if (it == used_blocks_.end()) return;  // already released with release_all()
  bytes_in_use_ -= it->second;
  bytes_cached_ += it->second;
  free_blocks_.emplace(it->second, handle);
  used_blocks_.erase(it);
}

void CachingAllocator::empty_cache() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [block, h] : free_blocks_) device_.do_free(h);
  free_blocks_.clear();
  bytes_cached_ = 0;
}

void CachingAllocator::release_all() noexcept {
  empty_cache();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [h, block] : used_blocks_) device_.do_free(h);
  used_blocks_.clear();
  bytes_in_use_ = 0;
}

size_t CachingAllocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_in_use_;
}
size_t CachingAllocator::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_cached_;
}
size_t CachingAllocator::driver_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return driver_allocations_;
}

}  // namespace trident
