// Happens-before edges that ThreadSanitizer cannot see on its own: oneTBB (Debian's build) is not
// instrumented, so the join at the end of a tbb::parallel_for looks like no synchronisation at
// all. A body that hands data to the caller calls tsan_release(&x) last, the caller
// tsan_acquire(&x) after the loop (and the reverse for what the caller hands to the bodies).
// Both are no-ops outside a TSan build.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TRIDENT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TRIDENT_TSAN 1
#endif
#endif

#ifdef TRIDENT_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace trident {

inline void tsan_release([[maybe_unused]] void* addr) {
#ifdef TRIDENT_TSAN
  __tsan_release(addr);
#endif
}

inline void tsan_acquire([[maybe_unused]] void* addr) {
#ifdef TRIDENT_TSAN
  __tsan_acquire(addr);
#endif
}

}  // namespace trident
