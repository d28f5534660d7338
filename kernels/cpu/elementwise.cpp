// CPU elementwise ops: plain loops the compiler vectorises, split over the arena when large. The
// float ops are templates over the storage type X (float, or bfloat16 bits: storage.h).
#include "trident/kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstring>

#include "trident/core/half.h"
#include "trident/core/philox.h"
#include "trident/core/unary_math.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

// One loop per op, the op a compile-time constant so that its formula inlines and vectorises.
template <UnaryOp kOp, class X>
void forward_loop(const X* x, X* y, int64_t n, float alpha) {
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      store_value(y, i, unary_apply<float>(kOp, load_value(x, i), alpha));
  });
}

template <UnaryOp kOp, class X>
void backward_loop(const X* x, const X* y, const X* dy, X* dx, int64_t n, float alpha) {
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      store_value(dx, i,
                  unary_derivative<float>(kOp, x ? load_value(x, i) : 0.f,
                                          y ? load_value(y, i) : 0.f, load_value(dy, i), alpha));
  });
}

template <class X>
void unary_forward_of(UnaryOp op, const X* x, X* y, int64_t n, float alpha) {
  switch (op) {
#define TRIDENT_CPU_UNARY_FORWARD(name, module) \
  case UnaryOp::name: return forward_loop<UnaryOp::name>(x, y, n, alpha);
    TRIDENT_UNARY_OPS(TRIDENT_CPU_UNARY_FORWARD)
#undef TRIDENT_CPU_UNARY_FORWARD
  }
}

template <class X>
void unary_backward_of(UnaryOp op, const X* x, const X* y, const X* dy, X* dx, int64_t n,
                       float alpha) {
  switch (op) {
#define TRIDENT_CPU_UNARY_BACKWARD(name, module) \
  case UnaryOp::name: return backward_loop<UnaryOp::name>(x, y, dy, dx, n, alpha);
    TRIDENT_UNARY_OPS(TRIDENT_CPU_UNARY_BACKWARD)
#undef TRIDENT_CPU_UNARY_BACKWARD
  }
}

template <class X>
void axpby_of(const X* x, X* y, int64_t n, float a, float b) {
  parallel_ranges(n, kElementwiseGrain, [=](int64_t lo, int64_t hi) {
    if (b == 0.f) {
      for (int64_t i = lo; i < hi; ++i) store_value(y, i, a * load_value(x, i));
    } else if (b == 1.f) {
      for (int64_t i = lo; i < hi; ++i) store_value(y, i, load_value(y, i) + a * load_value(x, i));
    } else {
      for (int64_t i = lo; i < hi; ++i)
        store_value(y, i, a * load_value(x, i) + b * load_value(y, i));
    }
  });
}

// y = kOp(a * x + b * y): a residual sum and its activation in one pass over memory, in blocks
// of float sums on the stack (y rounded once). As one loop GCC 12 did not vectorise it ("control
// flow in loop"): 2.6 ms against 1.4 for axpby and the activation as two passes (6.4M floats).
template <UnaryOp kOp, class X>
void axpby_activation_loop(const X* x, X* y, int64_t n, float a, float b, float alpha) {
  parallel_ranges(n, kElementwiseGrain, [=](int64_t lo, int64_t hi) {
    constexpr int64_t kBlock = 1024;
    float sum[kBlock];
    for (int64_t b0 = lo; b0 < hi; b0 += kBlock) {
      const int64_t count = std::min(kBlock, hi - b0);
      if (b == 0.f) {
        for (int64_t i = 0; i < count; ++i) sum[i] = a * load_value(x, b0 + i);
      } else {
        for (int64_t i = 0; i < count; ++i)
          sum[i] = a * load_value(x, b0 + i) + b * load_value(y, b0 + i);
      }
      for (int64_t i = 0; i < count; ++i)
        store_value(y, b0 + i, unary_apply<float>(kOp, sum[i], alpha));
    }
  });
}

template <class X>
void axpby_activation_of(const X* x, X* y, int64_t n, float a, float b, UnaryOp op,
                         float alpha) {
  switch (op) {
#define TRIDENT_CPU_AXPBY(name, module) \
  case UnaryOp::name: return axpby_activation_loop<UnaryOp::name>(x, y, n, a, b, alpha);
    TRIDENT_UNARY_OPS(TRIDENT_CPU_AXPBY)
#undef TRIDENT_CPU_AXPBY
  }
}

template <class X>
void scale_of(const X* x, float factor, X* y, int64_t n) {
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) store_value(y, i, load_value(x, i) * factor);
  });
}

}  // namespace

void unary_forward(UnaryOp op, const float* x, float* y, int64_t n, float alpha) {
  unary_forward_of(op, x, y, n, alpha);
}
void unary_forward(UnaryOp op, const uint16_t* x, uint16_t* y, int64_t n, float alpha) {
  unary_forward_of(op, x, y, n, alpha);
}

void unary_backward(UnaryOp op, const float* x, const float* y, const float* dy, float* dx,
                    int64_t n, float alpha) {
  unary_backward_of(op, x, y, dy, dx, n, alpha);
}
void unary_backward(UnaryOp op, const uint16_t* x, const uint16_t* y, const uint16_t* dy,
                    uint16_t* dx, int64_t n, float alpha) {
  unary_backward_of(op, x, y, dy, dx, n, alpha);
}

void axpby(const float* x, float* y, int64_t n, float a, float b) { axpby_of(x, y, n, a, b); }
void axpby(const uint16_t* x, uint16_t* y, int64_t n, float a, float b) {
  axpby_of(x, y, n, a, b);
}

void axpby(const float* x, float* y, int64_t n, float a, float b, UnaryOp activation,
           float alpha) {
  axpby_activation_of(x, y, n, a, b, activation, alpha);
}
void axpby(const uint16_t* x, uint16_t* y, int64_t n, float a, float b, UnaryOp activation,
           float alpha) {
  axpby_activation_of(x, y, n, a, b, activation, alpha);
}

void scale(const float* x, float factor, float* y, int64_t n) { scale_of(x, factor, y, n); }
void scale(const uint16_t* x, float factor, uint16_t* y, int64_t n) {
  scale_of(x, factor, y, n);
}

void fill(float* dst, int64_t n, float value) {
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    if (value == 0.f) {
      std::memset(dst + b, 0, size_t(e - b) * sizeof(float));  // also the int32 zero
    } else {
      for (int64_t i = b; i < e; ++i) dst[i] = value;
    }
  });
}

void fill_bf16(uint16_t* dst, int64_t n, float value) {
  const uint16_t bits = float_to_bf16(value);
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = bits;
  });
}

void fill_i32(int32_t* dst, int64_t n, int32_t value) {
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = value;
  });
}

void fill_zero_bytes(void* dst, size_t bytes) {
  constexpr int64_t kGrain = int64_t(1) << 20;
  parallel_ranges(int64_t(bytes), kGrain, [=](int64_t b, int64_t e) {
    std::memset(static_cast<char*>(dst) + b, 0, size_t(e - b));
  });
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  constexpr int64_t kGrain = int64_t(1) << 20;
  parallel_ranges(int64_t(bytes), kGrain, [=](int64_t b, int64_t e) {
    std::memmove(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, size_t(e - b));
  });
}

namespace {
template <class X>
void dropout_of(const X* x, X* y, int64_t n, int64_t group, int64_t group_offset, float p,
                uint64_t seed, uint32_t stream, uint32_t step) {
  if (p <= 0.f) return copy_bytes(y, x, size_t(n) * sizeof(X));
  const float scale = 1.0f / (1.0f - p);  // p == 1: never used, every draw is < 1
  parallel_ranges(n, kElementwiseGrain, [=](int64_t b, int64_t e) {
    // Philox yields four draws per counter block; keep the last block for the next group.
    uint64_t cached_block = ~uint64_t(0);
    Philox4 words{};
    for (int64_t i = b; i < e;) {
      const int64_t local = i / group;
      const uint64_t g = uint64_t(group_offset + local);
      const int64_t run_end = std::min(e, (local + 1) * group);  // the rest of this group
      if ((g >> 2) != cached_block) {
        cached_block = g >> 2;
        words = philox4x32_10(uint32_t(cached_block), uint32_t(cached_block >> 32), stream, step,
                              uint32_t(seed), uint32_t(seed >> 32));
      }
      // The same expression as philox_uniform, so the mask matches it bit for bit.
      const float u = static_cast<float>(words.v[g & 3] >> 8) * (1.0f / 16777216.0f);
      if (u >= p) {
        for (; i < run_end; ++i) store_value(y, i, load_value(x, i) * scale);
      } else {
        for (; i < run_end; ++i) y[i] = X(0);  // +0 in both types
      }
    }
  });
}
}  // namespace

void dropout(const float* x, float* y, int64_t n, int64_t group, int64_t group_offset, float p,
             uint64_t seed, uint32_t stream, uint32_t step) {
  dropout_of(x, y, n, group, group_offset, p, seed, stream, step);
}
void dropout(const uint16_t* x, uint16_t* y, int64_t n, int64_t group, int64_t group_offset,
             float p, uint64_t seed, uint32_t stream, uint32_t step) {
  dropout_of(x, y, n, group, group_offset, p, seed, stream, step);
}

}  // namespace trident::cpu
