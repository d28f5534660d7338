// The AVX2/FMA kernel set for sgemm: a 6 x 16 register-blocked micro-kernel and vectorised
// packing (8x8 transposes); the packing routines are also used by the AVX-512 set.
#include "trident/kernels/cpu/gemm.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace trident::cpu::detail {
namespace {

// 6 rows x 2 ymm: 12 accumulators + 2 B vectors + 1 broadcast fit the 16 ymm registers, and
// 12 independent FMA chains cover the 2-pipe x 4-cycle FMA latency.
constexpr int kMR = 6, kNR = 16;

// Lane mask with the first n (1..8) lanes set, for the partial last vector of a tile.
inline __m256i lane_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Scales, adds beta * C_old and the bias, applies relu and stores the MM x (NV*8) tile (the last
// vector holds t.n - 8*(NV-1) valid lanes).
template <int MM, int NV>
__attribute__((always_inline)) inline void store_tile(const MicroTile& t, const __m256 (&acc)[kMR][2]) {
  const int last = t.n - 8 * (NV - 1);
  const __m256i mask = lane_mask(last);
  const __m256 va = _mm256_set1_ps(t.alpha), vb = _mm256_set1_ps(t.beta);
  const __m256 zero = _mm256_setzero_ps();
  for (int i = 0; i < MM; ++i) {
    float* c = t.c + i * t.ldc;
    for (int v = 0; v < NV; ++v) {
      const bool part = v == NV - 1 && last < 8;
      __m256 r = _mm256_mul_ps(acc[i][v], va);
      if (t.load_c) {
        const __m256 old = part ? _mm256_maskload_ps(c + 8 * v, mask) : _mm256_loadu_ps(c + 8 * v);
        r = _mm256_fmadd_ps(vb, old, r);
      }
      if (t.bias_kind == BiasKind::per_column)
        r = _mm256_add_ps(r, part ? _mm256_maskload_ps(t.bias + 8 * v, mask)
                                  : _mm256_loadu_ps(t.bias + 8 * v));
      else if (t.bias_kind == BiasKind::per_row)
        r = _mm256_add_ps(r, _mm256_set1_ps(t.bias[i]));
      if (t.relu) r = _mm256_max_ps(zero, r);  // NaN stays NaN (max returns its 2nd operand)
      if (part)
        _mm256_maskstore_ps(c + 8 * v, mask, r);
      else
        _mm256_storeu_ps(c + 8 * v, r);
    }
  }
}

// The micro-kernel for an MM x (NV*8) tile. APK: A is a packed panel (constant offsets).
// BMASK: B is read in place and its last vector must not read past column n. The accumulators
// are named variables, not an array: GCC keeps an array of vectors in memory across the loop.
template <int MM, int NV, bool APK, bool BMASK>
void micro(const MicroTile& t) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 c00 = zero, c01 = zero, c10 = zero, c11 = zero, c20 = zero, c21 = zero;
  __m256 c30 = zero, c31 = zero, c40 = zero, c41 = zero, c50 = zero, c51 = zero;
  const float* a = t.a;
  const float* b = t.b;
  const int64_t k = t.k;
  const int64_t ars = APK ? 1 : t.a_rs, acs = APK ? kMR : t.a_cs, brs = t.b_rs;
  const __m256i bmask = lane_mask(t.n - 8 * (NV - 1));
#define TRIDENT_GEMM_ROW(i)                                           \
  if constexpr (MM > i) {                                             \
    const __m256 av = _mm256_broadcast_ss(a + i * ars);               \
    c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);                       \
    if constexpr (NV > 1) c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1); \
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = BMASK && NV == 1 ? _mm256_maskload_ps(b, bmask) : _mm256_loadu_ps(b);
    __m256 b1 = zero;
    if constexpr (NV > 1) b1 = BMASK ? _mm256_maskload_ps(b + 8, bmask) : _mm256_loadu_ps(b + 8);
    TRIDENT_GEMM_ROW(0) TRIDENT_GEMM_ROW(1) TRIDENT_GEMM_ROW(2)
    TRIDENT_GEMM_ROW(3) TRIDENT_GEMM_ROW(4) TRIDENT_GEMM_ROW(5)
    a += acs;
    b += brs;
  }
#undef TRIDENT_GEMM_ROW
  const __m256 acc[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  store_tile<MM, NV>(t, acc);
}

using MicroFn = void (*)(const MicroTile&);

template <int NV, bool APK, bool BMASK>
constexpr MicroFn kByRows[kMR] = {micro<1, NV, APK, BMASK>, micro<2, NV, APK, BMASK>,
                                  micro<3, NV, APK, BMASK>, micro<4, NV, APK, BMASK>,
                                  micro<5, NV, APK, BMASK>, micro<6, NV, APK, BMASK>};

void micro_avx2(const MicroTile& t) {
  const bool bmask = !t.b_packed && (t.n & 7);
  const int r = t.m - 1;
  if (t.n > 8) {
    if (t.a_packed) return (bmask ? kByRows<2, true, true> : kByRows<2, true, false>)[r](t);
    return (bmask ? kByRows<2, false, true> : kByRows<2, false, false>)[r](t);
  }
  if (t.a_packed) return (bmask ? kByRows<1, true, true> : kByRows<1, true, false>)[r](t);
  return (bmask ? kByRows<1, false, true> : kByRows<1, false, false>)[r](t);
}

// ---- Packing.

// In-register transpose of an 8x8 block: r[q] becomes column q.
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], s[8];
  for (int q = 0; q < 8; q += 2) {
    t[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);
    t[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);
  }
  for (int q = 0; q < 8; q += 4) {
    s[q] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x20);
    r[q + 4] = _mm256_permute2f128_ps(s[q], s[q + 4], 0x31);
  }
}

// Stores the first cnt (1..8) lanes of v; never writes past d[cnt-1] (panels are packed in
// parallel, so a spill into the neighbour would race).
inline void store_n(float* d, __m256 v, int cnt) {
  if (cnt == 8) return _mm256_storeu_ps(d, v);
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  if (cnt == 4) return _mm_storeu_ps(d, lo);
  if (cnt == 6) {
    _mm_storeu_ps(d, lo);
    return _mm_storel_pi(reinterpret_cast<__m64*>(d + 4), hi);
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int q = 0; q < cnt; ++q) d[q] = tmp[q];
}

inline void copy_n(float* d, const float* s, int64_t cnt) {
  int64_t q = 0;
  for (; q + 8 <= cnt; q += 8) _mm256_storeu_ps(d + q, _mm256_loadu_ps(s + q));
  if (q + 4 <= cnt) _mm_storeu_ps(d + q, _mm_loadu_ps(s + q)), q += 4;
  for (; q < cnt; ++q) d[q] = s[q];
}

// Gathers `rows` (<= 8) strided rows src + r*ld, columns [0, kc), into dst[p*dst_ld + r]: 8x8
// transposes, scalar tail.
void transpose_rows(const float* src, int64_t ld, int rows, int64_t kc, float* dst, int64_t dst_ld,
                    bool zero_fill) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    __m256 r[8];
    for (int q = 0; q < 8; ++q) r[q] = q < rows ? _mm256_loadu_ps(src + q * ld + p) : _mm256_setzero_ps();
    transpose8(r);
    for (int q = 0; q < 8; ++q) store_n(dst + (p + q) * dst_ld, r[q], zero_fill ? 8 : rows);
  }
  for (; p < kc; ++p) {
    for (int q = 0; q < rows; ++q) dst[p * dst_ld + q] = src[q * ld + p];
    if (zero_fill)
      for (int q = rows; q < 8; ++q) dst[p * dst_ld + q] = 0.f;
  }
}

void pack_a_avx2(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                 int64_t kc, int mr, float* dst) {
  for (int64_t ip = 0; ip < mc; ip += mr, dst += kc * mr) {
    const int m = int(mc - ip < mr ? mc - ip : mr);
    if (trans_a) {  // A is [K, M]: each k holds the panel's m values contiguously
      const float* src = A + k0 * lda + i0 + ip;
      for (int64_t p = 0; p < kc; ++p) copy_n(dst + p * mr, src + p * lda, m);
    } else {  // A is [M, K]: transpose groups of up to 8 rows
      for (int g = 0; g < m; g += 8)
        transpose_rows(A + (i0 + ip + g) * lda + k0, lda, m - g < 8 ? m - g : 8, kc, dst + g, mr, false);
    }
  }
}

void pack_b_avx2(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                 int64_t nc, int nr, float* dst) {
  for (int64_t jp = 0; jp < nc; jp += nr, dst += kc * nr) {
    const int n = int(nc - jp < nr ? nc - jp : nr);
    if (!trans_b) {  // B is [K, N]: copy rows, zero the padding
      const float* src = B + k0 * ldb + j0 + jp;
      for (int64_t p = 0; p < kc; ++p) {
        copy_n(dst + p * nr, src + p * ldb, n);
        for (int j = n; j < nr; ++j) dst[p * nr + j] = 0.f;
      }
    } else {  // B is [N, K]: transpose groups of 8 columns (missing ones become zeros)
      for (int g = 0; g < nr; g += 8) {
        const int cols = n - g >= 8 ? 8 : n - g > 0 ? n - g : 0;
        transpose_rows(B + (j0 + jp + g) * ldb + k0, ldb, cols, kc, dst + g, nr, true);
      }
    }
  }
}

const KernelSet kAvx2Set = {"avx2", kMR, kNR, micro_avx2, pack_a_avx2, pack_b_avx2};

}  // namespace

const KernelSet* kernels_avx2() { return &kAvx2Set; }

}  // namespace trident::cpu::detail

#else  // built without AVX2/FMA code generation (not x86, or flags missing): no such kernel set

namespace trident::cpu::detail {
const KernelSet* kernels_avx2() { return nullptr; }
}  // namespace trident::cpu::detail

#endif
