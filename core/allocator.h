// A caching pool over a device's raw allocations: freed blocks are kept and reused, so that a
// training step makes no driver allocation once its buffers exist.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include "trident/core/device.h"

namespace trident {

class CachingAllocator {
 public:
  explicit CachingAllocator(Device& device) : device_(device) {}
  ~CachingAllocator();  // blocks still cached must have been released through release_all()

  // A block of at least `bytes`; throws OutOfMemory after emptying the cache and retrying once.
  void* allocate(size_t bytes);
  // Puts a block obtained from allocate back into the cache.
  void deallocate(void* handle) noexcept;
  // Hands every cached (free) block back to the device.
  void empty_cache() noexcept;
  // empty_cache, and forgets blocks still in use (the device is going away).
  void release_all() noexcept;

  size_t bytes_in_use() const;
  size_t bytes_cached() const;
  size_t driver_allocations() const;  // raw_allocate calls so far: flat once a step is warm

 private:
  static size_t round_size(size_t bytes);

  Device& device_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_blocks_;        // size -> handle
  std::unordered_map<void*, size_t> used_blocks_;   // handle -> size
  size_t bytes_in_use_ = 0, bytes_cached_ = 0, driver_allocations_ = 0;
};

}  // namespace trident
