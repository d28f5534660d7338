// Device's non-virtual parts: the caching pool every device owns.
#include "trident/core/device.h"

#include "trident/core/allocator.h"

namespace trident {

Device::Device() : allocator_(std::make_unique<CachingAllocator>(*this)) {}
Device::~Device() = default;

CachingAllocator& Device::allocator() { return *allocator_; }

void Device::release_pool() noexcept { allocator_->release_all(); }

}  // namespace trident
