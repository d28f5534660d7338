// The AVX-512 kernel set for sgemm: a 12 x 32 register-blocked micro-kernel (packing is shared
// with the AVX2 set, whose routines take the panel width as a parameter).
#include "trident/kernels/cpu/gemm.h"

#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#include <immintrin.h>

namespace trident::cpu::detail {
namespace {

// 12 rows x 2 zmm: 24 accumulators + 2 B vectors (A is broadcast straight from memory into the
// FMA) leave registers spare, and 24 chains cover the FMA latency on both ports.
constexpr int kMR = 12, kNR = 32;

inline __mmask16 lane_mask(int n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// Scales, adds beta * C_old and the bias, applies relu and stores the MM x (NV*16) tile (the
// last vector holds t.n - 16*(NV-1) valid lanes).
template <int MM, int NV>
__attribute__((always_inline)) inline void store_tile(const MicroTile& t, const __m512 (&acc)[kMR][2]) {
  const __mmask16 last = lane_mask(t.n - 16 * (NV - 1));
  const __m512 va = _mm512_set1_ps(t.alpha), vb = _mm512_set1_ps(t.beta);
  const __m512 zero = _mm512_setzero_ps();
  for (int i = 0; i < MM; ++i) {
    float* c = t.c + i * t.ldc;
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : __mmask16(0xFFFF);
      __m512 r = _mm512_mul_ps(acc[i][v], va);
      if (t.load_c) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c + 16 * v), r);
      if (t.bias_kind == BiasKind::per_column)
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, t.bias + 16 * v));
      else if (t.bias_kind == BiasKind::per_row)
        r = _mm512_add_ps(r, _mm512_set1_ps(t.bias[i]));
      if (t.relu) r = _mm512_maskz_max_ps(0xFFFF, zero, r);  // NaN stays NaN (max returns its 2nd operand)
      _mm512_mask_storeu_ps(c + 16 * v, m, r);
    }
  }
}

// The micro-kernel for an MM x (NV*16) tile. APK: A is a packed panel (constant offsets).
// BMASK: B is read in place and its last vector must not read past column n. The accumulators
// are named variables, not an array: GCC keeps an array of vectors in memory across the loop.
template <int MM, int NV, bool APK, bool BMASK>
void micro(const MicroTile& t) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 c00 = zero, c01 = zero, c10 = zero, c11 = zero, c20 = zero, c21 = zero, c30 = zero, c31 = zero;
  __m512 c40 = zero, c41 = zero, c50 = zero, c51 = zero, c60 = zero, c61 = zero, c70 = zero, c71 = zero;
  __m512 c80 = zero, c81 = zero, c90 = zero, c91 = zero, ca0 = zero, ca1 = zero, cb0 = zero, cb1 = zero;
  const float* a = t.a;
  const float* b = t.b;
  const int64_t k = t.k;
  const int64_t ars = APK ? 1 : t.a_rs, acs = APK ? kMR : t.a_cs, brs = t.b_rs;
  const __mmask16 bmask = lane_mask(t.n - 16 * (NV - 1));
#define TRIDENT_GEMM_ROW(i, r)                                        \
  if constexpr (MM > i) {                                             \
    const __m512 av = _mm512_set1_ps(a[i * ars]);                     \
    c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                       \
    if constexpr (NV > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1); \
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < k; ++p) {
    const __m512 b0 = BMASK && NV == 1 ? _mm512_maskz_loadu_ps(bmask, b) : _mm512_loadu_ps(b);
    __m512 b1 = zero;
    if constexpr (NV > 1) b1 = BMASK ? _mm512_maskz_loadu_ps(bmask, b + 16) : _mm512_loadu_ps(b + 16);
    TRIDENT_GEMM_ROW(0, 0) TRIDENT_GEMM_ROW(1, 1) TRIDENT_GEMM_ROW(2, 2) TRIDENT_GEMM_ROW(3, 3)
    TRIDENT_GEMM_ROW(4, 4) TRIDENT_GEMM_ROW(5, 5) TRIDENT_GEMM_ROW(6, 6) TRIDENT_GEMM_ROW(7, 7)
    TRIDENT_GEMM_ROW(8, 8) TRIDENT_GEMM_ROW(9, 9) TRIDENT_GEMM_ROW(10, a) TRIDENT_GEMM_ROW(11, b)
    a += acs;
    b += brs;
  }
#undef TRIDENT_GEMM_ROW
  const __m512 acc[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51},
                              {c60, c61}, {c70, c71}, {c80, c81}, {c90, c91}, {ca0, ca1}, {cb0, cb1}};
  store_tile<MM, NV>(t, acc);
}

using MicroFn = void (*)(const MicroTile&);

template <int NV, bool APK, bool BMASK>
constexpr MicroFn kByRows[kMR] = {
    micro<1, NV, APK, BMASK>, micro<2, NV, APK, BMASK>,  micro<3, NV, APK, BMASK>,
    micro<4, NV, APK, BMASK>, micro<5, NV, APK, BMASK>,  micro<6, NV, APK, BMASK>,
    micro<7, NV, APK, BMASK>, micro<8, NV, APK, BMASK>,  micro<9, NV, APK, BMASK>,
    micro<10, NV, APK, BMASK>, micro<11, NV, APK, BMASK>, micro<12, NV, APK, BMASK>};

void micro_avx512(const MicroTile& t) {
  const bool bmask = !t.b_packed && (t.n & 15);
  const int r = t.m - 1;
  if (t.n > 16) {
    if (t.a_packed) return (bmask ? kByRows<2, true, true> : kByRows<2, true, false>)[r](t);
    return (bmask ? kByRows<2, false, true> : kByRows<2, false, false>)[r](t);
  }
  if (t.a_packed) return (bmask ? kByRows<1, true, true> : kByRows<1, true, false>)[r](t);
  return (bmask ? kByRows<1, false, true> : kByRows<1, false, false>)[r](t);
}

}  // namespace

const KernelSet* kernels_avx512() {
  // Every AVX-512 CPU has AVX2, so the AVX2 packing routines (any panel width) are reused.
  static const KernelSet set = [] {
    const KernelSet* avx2 = kernels_avx2();
    return KernelSet{"avx512", kMR, kNR, micro_avx512, avx2 ? avx2->pack_a : nullptr,
                     avx2 ? avx2->pack_b : nullptr};
  }();
  return set.pack_a && set.pack_b ? &set : nullptr;
}

}  // namespace trident::cpu::detail

#else  // built without AVX-512 code generation: no such kernel set

namespace trident::cpu::detail {
const KernelSet* kernels_avx512() { return nullptr; }
}  // namespace trident::cpu::detail

#endif
