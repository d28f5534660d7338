// Happens-before edges that ThreadSanitizer cannot see on its own: oneTBB (Debian's build) is not
// instrumented, so the fork and the join of a tbb::parallel_for (or a task_arena::execute that
// runs on another thread) look like no synchronisation at all, and every buffer the caller and
// the bodies share is reported as a race. TsanForkJoin makes both edges visible:
//
//   TsanForkJoin edges;                      // the caller's writes so far happen before each
//   tbb::parallel_for(range, edges.around(body));  // body, and each body before what the
//                                            // caller does after the loop
//
// Empty outside a TSan build. The CPU kernels, which a TSan build compiles uninstrumented (their
// memcpy and allocations are still seen), get TRIDENT_TSAN_ANNOTATIONS defined instead.
#pragma once

#include <utility>

#if defined(__SANITIZE_THREAD__) || defined(TRIDENT_TSAN_ANNOTATIONS)
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

class TsanForkJoin {
 public:
  // body wrapped in enter() and leave(), in the form a parallel loop takes; body must outlive
  // the loop (a temporary in the loop's own call does).
  template <class Body>
  auto around(const Body& body) {
    return [this, &body](auto&&... args) {
      enter();
      body(std::forward<decltype(args)>(args)...);
      leave();
    };
  }

#ifdef TRIDENT_TSAN
  TsanForkJoin() { __tsan_release(&token_); }
  ~TsanForkJoin() { __tsan_acquire(&token_); }
  void enter() { __tsan_acquire(&token_); }
  void leave() { __tsan_release(&token_); }

 private:
  char token_ = 0;
#else
  void enter() {}
  void leave() {}
#endif
};

}  // namespace trident
