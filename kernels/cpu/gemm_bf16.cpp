// The bfloat16 GEMM on AVX-512 BF16 (gemm_bf16.h).
//
// op(A) [M,K] and op(B) [K,N] are packed whole, as 32-bit words that each hold a pair of
// consecutive K values (the lower half the even one), the layout VDPBF16PS multiplies:
//   A: strips of kMR rows, strip s = words [pairs][kMR]   (A(i, 2q) | A(i, 2q+1) << 16)
//   B: panels of kNR columns, panel p = words [pairs][kNR] (B(2q, j) | B(2q+1, j) << 16)
// with pairs = ceil(K / 2); an odd K's last high half, and rows or columns past the edges, are 0.
// A task multiplies a few strips by a few panels, the whole K at once in 24 zmm accumulators
// (12 rows x 32 columns: 2 x 16 float lanes), into a float tile that the plain store code then
// scales, adds beta * C, the bias and ReLU to, and writes as float32 or bfloat16. Only the
// micro-kernel is compiled for AVX-512 BF16 (a function target), so nothing else in this file
// can execute an instruction the CPU lacks.
//
// Where the CPU has AMX (Sapphire Rapids and later) and the kernel lets this process use its
// tile registers, a second micro-kernel runs instead: a 32 x 32 block of C in four 16 x 16 float
// tiles, fed by two A tiles (16 rows x 16 pairs, A packed row by row: words [32 rows][pairs]) and
// two B tiles (16 pairs x 16 columns of the same [pairs][32] panels), TDPBF16PS per 16 pairs; K
// padded with zero pairs to a multiple of 16. On a 2-core Xeon VM it ran bf16 GEMMs of n = 1024
// and 2048 4-5x faster than VDPBF16PS, which issues no faster there than sgemm's float32 FMAs.
#include "trident/kernels/cpu/gemm_bf16.h"

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "trident/core/env.h"
#include "trident/core/half.h"
#include "trident/core/thread_annotations.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TRIDENT_HAVE_BF16_KERNEL 1
#define TRIDENT_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define TRIDENT_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
#define TRIDENT_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#endif

namespace trident::cpu {
namespace {

constexpr int kMR = 12, kNR = 32;
using Tile = float[kMR][kNR];
constexpr int kAmxRows = 32, kAmxPairs = 16;  // an AMX block: 32 x kNR of C; K in 16-pair steps
using AmxTile = float[kAmxRows][kNR];

// Packs `width` lines of an operand from line0 on (rows of op(A), or columns of op(B)) into
// words [pairs][width]: element (line, p) is x[line * line_stride + p * k_stride]; lines past
// `lines`, an odd K's last high half and pairs past K (AMX pads K to 16-pair steps) are zero.
void pack_pairs(const uint16_t* x, int64_t line_stride, int64_t k_stride, int64_t lines,
                int64_t K, int64_t line0, int width, int64_t pairs, uint32_t* dst) {
  const int valid = int(std::min<int64_t>(width, lines - line0));
  if (k_stride == 1 && line_stride != 1) {  // each line's pairs are its 32-bit words: transpose
    const int64_t whole = K / 2, filled = (K + 1) / 2;  // pairs past `filled`: AMX's K padding
    for (int i = 0; i < valid; ++i) {
      const uint16_t* line = x + (line0 + i) * line_stride;
      for (int64_t q = 0; q < whole; ++q) {
        uint32_t word;
        std::memcpy(&word, line + 2 * q, sizeof word);  // little-endian: low half first
        dst[q * width + i] = word;
      }
      if (whole < filled) dst[whole * width + i] = line[K - 1];  // an odd K: high half 0
      for (int64_t q = filled; q < pairs; ++q) dst[q * width + i] = 0u;
    }
    for (int64_t q = 0; q < pairs; ++q)
      std::fill(dst + q * width + valid, dst + (q + 1) * width, 0u);
    return;
  }
  for (int64_t q = 0; q < pairs; ++q) {
    const int64_t p0 = 2 * q, p1 = 2 * q + 1;
    uint32_t* out = dst + q * width;
    if (line_stride == 1 && p1 < K) {  // two contiguous runs side by side (vectorised)
      const uint16_t* r0 = x + line0 + p0 * k_stride;
      const uint16_t* r1 = x + line0 + p1 * k_stride;
      for (int i = 0; i < valid; ++i) out[i] = uint32_t(r0[i]) | uint32_t(r1[i]) << 16;
      std::fill(out + valid, out + width, 0u);
      continue;
    }
    for (int i = 0; i < width; ++i) {
      uint32_t lo = 0, hi = 0;
      if (i < valid) {
        const uint16_t* line = x + (line0 + i) * line_stride;
        if (p0 < K) lo = line[p0 * k_stride];
        if (p1 < K) hi = line[p1 * k_stride];
      }
      out[i] = lo | hi << 16;
    }
  }
}

// The same lines packed line by line, words [width][pairs] (AMX's A tiles take rows of pairs).
void pack_pair_rows(const uint16_t* x, int64_t line_stride, int64_t k_stride, int64_t lines,
                    int64_t K, int64_t line0, int width, int64_t pairs, uint32_t* dst) {
  const int valid = int(std::min<int64_t>(width, lines - line0));
  for (int i = 0; i < width; ++i) {
    uint32_t* out = dst + i * pairs;
    if (i >= valid) {
      std::fill(out, out + pairs, 0u);
      continue;
    }
    const uint16_t* line = x + (line0 + i) * line_stride;
    if (k_stride == 1) {  // the line's pairs are its 32-bit words (little-endian: low half first)
      const int64_t whole = K / 2;
      std::memcpy(out, line, size_t(whole) * sizeof(uint32_t));
      int64_t q = whole;
      if (K % 2) out[q++] = line[K - 1];
      std::fill(out + q, out + pairs, 0u);
      continue;
    }
    for (int64_t q = 0; q < pairs; ++q) {
      const int64_t p0 = 2 * q, p1 = 2 * q + 1;
      const uint32_t lo = p0 < K ? line[p0 * k_stride] : 0u,
                     hi = p1 < K ? line[p1 * k_stride] : 0u;
      out[q] = lo | hi << 16;
    }
  }
}

#if TRIDENT_HAVE_BF16_KERNEL
// The tile registers' shapes: tiles 0-3 accumulate C (16 rows x 16 floats), 4-5 hold A (16 rows
// x 16 pairs), 6-7 hold B (16 pairs x 16 columns); each row 64 bytes.
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// tile = block a (32 rows, words [32][pairs]) x panel b (words [pairs][32]); pairs a multiple
// of 16. The caller has loaded AmxConfig.
TRIDENT_AMX_TARGET void micro_amx(const uint32_t* a, const uint32_t* b, int64_t pairs,
                                  AmxTile& tile) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int64_t a_stride = pairs * 4;
  for (int64_t q = 0; q < pairs; q += kAmxPairs) {
    _tile_loadd(4, a + q, a_stride);
    _tile_loadd(5, a + 16 * pairs + q, a_stride);
    _tile_loadd(6, b + q * kNR, kNR * 4);
    _tile_loadd(7, b + q * kNR + 16, kNR * 4);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, &tile[0][0], kNR * 4);
  _tile_stored(1, &tile[0][16], kNR * 4);
  _tile_stored(2, &tile[16][0], kNR * 4);
  _tile_stored(3, &tile[16][16], kNR * 4);
}

TRIDENT_AMX_TARGET void amx_begin(const AmxConfig& config) { _tile_loadconfig(&config); }
TRIDENT_AMX_TARGET void amx_end() { _tile_release(); }

// AMX's instructions exist (CPUID 7.0:EDX bits 22 and 24) and Linux lets this process keep tile
// data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; without it the first tile
// instruction faults).
bool amx_usable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// tile = strip a (kMR rows) x panel b (kNR columns) over `pairs` K pairs. The accumulators are
// named variables: GCC keeps an array of vectors in memory across the loop.
// clang-format off
TRIDENT_BF16_TARGET void micro(const uint32_t* a, const uint32_t* b, int64_t pairs, Tile& tile) {
#define TRIDENT_ACC(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
  TRIDENT_ACC(0) TRIDENT_ACC(1) TRIDENT_ACC(2) TRIDENT_ACC(3) TRIDENT_ACC(4) TRIDENT_ACC(5)
  TRIDENT_ACC(6) TRIDENT_ACC(7) TRIDENT_ACC(8) TRIDENT_ACC(9) TRIDENT_ACC(a) TRIDENT_ACC(b)
#undef TRIDENT_ACC
#pragma GCC unroll 2
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * kNR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + q * kNR + 16);
    const uint32_t* aq = a + q * kMR;
#define TRIDENT_ROW(i, r)                                                   \
  {                                                                         \
    const __m512bh av = (__m512bh)_mm512_set1_epi32(int(aq[i]));            \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                            \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                            \
  }
    TRIDENT_ROW(0, 0) TRIDENT_ROW(1, 1) TRIDENT_ROW(2, 2) TRIDENT_ROW(3, 3)
    TRIDENT_ROW(4, 4) TRIDENT_ROW(5, 5) TRIDENT_ROW(6, 6) TRIDENT_ROW(7, 7)
    TRIDENT_ROW(8, 8) TRIDENT_ROW(9, 9) TRIDENT_ROW(10, a) TRIDENT_ROW(11, b)
#undef TRIDENT_ROW
  }
#define TRIDENT_STORE(i, r)                      \
  _mm512_storeu_ps(&tile[i][0], c##r##0);        \
  _mm512_storeu_ps(&tile[i][16], c##r##1);
  TRIDENT_STORE(0, 0) TRIDENT_STORE(1, 1) TRIDENT_STORE(2, 2) TRIDENT_STORE(3, 3)
  TRIDENT_STORE(4, 4) TRIDENT_STORE(5, 5) TRIDENT_STORE(6, 6) TRIDENT_STORE(7, 7)
  TRIDENT_STORE(8, 8) TRIDENT_STORE(9, 9) TRIDENT_STORE(10, a) TRIDENT_STORE(11, b)
#undef TRIDENT_STORE
}
// clang-format on
#endif

struct Store {
  float alpha, beta;
  void* c;
  bool c_bf16;
  int64_t ldc;
  GemmEpilogue epilogue;

  // The valid rows x cols of a tile (rows of kNR floats) whose first element is C(row0, col0).
  // Both micro-kernels need AVX-512, so the stores use it too (store_avx512, the same results
  // bit for bit); scalar() is what it computes.
  void operator()(const float (*tile)[kNR], int rows, int cols, int64_t row0, int64_t col0) const;
  void scalar(const float (*tile)[kNR], int rows, int cols, int64_t row0, int64_t col0) const {
    for (int i = 0; i < rows; ++i) {
      const int64_t r = row0 + i;
      for (int j = 0; j < cols; ++j) {
        const int64_t at = r * ldc + col0 + j;
        float v = alpha * tile[i][j];
        if (beta != 0.0f)
          v += beta * (c_bf16 ? bf16_to_float(static_cast<const uint16_t*>(c)[at])
                              : static_cast<const float*>(c)[at]);
        if (epilogue.bias_kind == BiasKind::per_column)
          v += epilogue.bias[col0 + j];
        else if (epilogue.bias_kind == BiasKind::per_row)
          v += epilogue.bias[r];
        if (epilogue.relu && v < 0.0f) v = 0.0f;  // NaN stays NaN, as in sgemm
        if (c_bf16)
          static_cast<uint16_t*>(c)[at] = float_to_bf16(v);
        else
          static_cast<float*>(c)[at] = v;
      }
    }
  }
};

#if TRIDENT_HAVE_BF16_KERNEL
// GCC 12's AVX-512 headers build "undefined" vectors as x = x, which -Wmaybe-uninitialized
// reports inside the intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// float_to_bf16 (core/half.h) on 16 lanes: quiet NaNs, round to nearest even.
TRIDENT_AVX512_TARGET __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i rounding = _mm512_add_epi32(
      _mm512_set1_epi32(0x7fff),
      _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, rounding), 16);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
  return _mm512_cvtepi32_epi16(r);
}

// Store::scalar, 16 columns at a time: the same operations in the same order.
TRIDENT_AVX512_TARGET void store_avx512(const Store& st, const float (*tile)[kNR], int rows,
                                        int cols, int64_t row0, int64_t col0) {
  const __m512 alpha = _mm512_set1_ps(st.alpha), beta = _mm512_set1_ps(st.beta);
  const __m512 zero = _mm512_setzero_ps();
  const GemmEpilogue& e = st.epilogue;
  for (int i = 0; i < rows; ++i) {
    const int64_t r = row0 + i;
    for (int c0 = 0; c0 < cols; c0 += 16) {
      const int n = std::min(16, cols - c0);
      const __mmask16 m = n == 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
      const int64_t at = r * st.ldc + col0 + c0;
      __m512 v = _mm512_mul_ps(alpha, _mm512_loadu_ps(&tile[i][c0]));
      if (st.beta != 0.0f) {
        const __m512 old = st.c_bf16
                               ? _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
                                         m, static_cast<const uint16_t*>(st.c) + at)),
                                     16))
                               : _mm512_maskz_loadu_ps(m, static_cast<const float*>(st.c) + at);
        v = _mm512_add_ps(v, _mm512_mul_ps(beta, old));
      }
      if (e.bias_kind == BiasKind::per_column)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, e.bias + col0 + c0));
      else if (e.bias_kind == BiasKind::per_row)
        v = _mm512_add_ps(v, _mm512_set1_ps(e.bias[r]));
      if (e.relu) v = _mm512_max_ps(zero, v);  // (0 > v) ? 0 : v: NaN and -0 stay
      if (st.c_bf16)
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(st.c) + at, m, to_bf16(v));
      else
        _mm512_mask_storeu_ps(static_cast<float*>(st.c) + at, m, v);
    }
  }
}

#pragma GCC diagnostic pop

void Store::operator()(const float (*tile)[kNR], int rows, int cols, int64_t row0,
                       int64_t col0) const {
  store_avx512(*this, tile, rows, cols, row0, col0);
}
#else
void Store::operator()(const float (*tile)[kNR], int rows, int cols, int64_t row0,
                       int64_t col0) const {
  scalar(tile, rows, cols, row0, col0);
}
#endif

// The packed operands of one call, in a buffer kept per thread between calls (no page faults
// per GEMM). A thread may start another GEMM while one of its own still runs: waiting for its
// GEMM's tasks, oneTBB lets it take other work, such as the next piece of a convolution that
// calls gemm_bf16 from its own parallel loop. That call gets a buffer of its own, so that the
// running GEMM's operands stay intact.
class PackingLease {
 public:
  PackingLease() = default;
  PackingLease(const PackingLease&) = delete;
  PackingLease& operator=(const PackingLease&) = delete;
  ~PackingLease() {
    if (slot_) slot_->busy = false;
  }
  uint32_t* acquire(size_t words) {
    static thread_local Slot thread_slot;
    slot_ = thread_slot.busy ? &own_ : &thread_slot;
    slot_->busy = true;
    if (slot_->words.size() < words) slot_->words.resize(words);
    return slot_->words.data();
  }

 private:
  struct Slot {
    std::vector<uint32_t> words;
    bool busy = false;
  };
  Slot* slot_ = nullptr;
  Slot own_;
};

struct Packed {
  const uint32_t* a;  // blocks of a_words: rows of op(A), as the micro-kernel takes them
  const uint32_t* b;  // panels of kNR columns of op(B), words [pairs][kNR] each
};

// Both micro-kernels' operands, packed in parallel into the lease's buffer (valid while the
// lease lives): pack_a(block, dst) packs block `block` of op(A); the panels of op(B) are
// pack_pairs'. With pairs = 0 (K = 0) nothing is packed: A and B may be null.
template <class PackA>
Packed pack_operands(int64_t blocks, int64_t a_words, const PackA& pack_a, bool trans_b,
                     int64_t N, int64_t K, const uint16_t* B, int64_t ldb, int64_t pairs,
                     TsanForkJoin& edges, PackingLease& lease) {
  const int64_t panels = (N + kNR - 1) / kNR, panel_words = pairs * kNR;
  uint32_t* const packed_a = lease.acquire(size_t(blocks * a_words + panels * panel_words));
  uint32_t* const packed_b = packed_a + blocks * a_words;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, pairs > 0 ? blocks + panels : 0),
                    edges.around([&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t t = r.begin(); t != r.end(); ++t) {
                        if (t < blocks)
                          pack_a(t, packed_a + t * a_words);
                        else  // columns of op(B): B[p, j] or B[j, p]
                          pack_pairs(B, trans_b ? ldb : 1, trans_b ? 1 : ldb, N, K,
                                     (t - blocks) * kNR, kNR, pairs,
                                     packed_b + (t - blocks) * panel_words);
                      }
                    }));
  return {packed_a, packed_b};
}

}  // namespace

bool cpu_has_avx512_bf16() {
#if TRIDENT_HAVE_BF16_KERNEL
  static const bool has = detail::cpu_has_avx512() && __builtin_cpu_supports("avx512bf16") &&
                          env_flag("TRIDENT_CPU_BF16_DOT", true);
  return has;
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() {
#if TRIDENT_HAVE_BF16_KERNEL
  static const bool has = cpu_has_avx512_bf16() && env_flag("TRIDENT_CPU_AMX", true) &&
                          amx_usable();
  return has;
#else
  return false;
#endif
}

namespace {

#if TRIDENT_HAVE_BF16_KERNEL
void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                   int64_t lda, const uint16_t* B, int64_t ldb, const Store& store) {
  const int64_t pairs = (K + 2 * kAmxPairs - 1) / (2 * kAmxPairs) * kAmxPairs;
  const int64_t blocks = (M + kAmxRows - 1) / kAmxRows, panels = (N + kNR - 1) / kNR;
  const int64_t block_words = pairs * kAmxRows, panel_words = pairs * kNR;
  TsanForkJoin edges;  // (both loops)
  PackingLease lease;
  const Packed packed = pack_operands(
      blocks, block_words,
      [&](int64_t t, uint32_t* dst) {  // rows of op(A), each a run of pairs
        pack_pair_rows(A, trans_a ? 1 : lda, trans_a ? lda : 1, M, K, t * kAmxRows, kAmxRows,
                       pairs, dst);
      },
      trans_b, N, K, B, ldb, pairs, edges, lease);
  tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, blocks, 2, 0, panels, 4),
                    edges.around([&](const tbb::blocked_range2d<int64_t>& r) {
                      alignas(64) AmxTile tile;
                      const AmxConfig config;
                      amx_begin(config);  // per task: the tile configuration is the thread's
                      for (int64_t p = r.cols().begin(); p != r.cols().end(); ++p)
                        for (int64_t s = r.rows().begin(); s != r.rows().end(); ++s) {
                          micro_amx(packed.a + s * block_words, packed.b + p * panel_words, pairs,
                                    tile);
                          store(tile, int(std::min<int64_t>(kAmxRows, M - s * kAmxRows)),
                                int(std::min<int64_t>(kNR, N - p * kNR)), s * kAmxRows, p * kNR);
                        }
                      amx_end();
                    }));
}
#endif

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
               void* C, bool c_bf16, int64_t ldc, const GemmEpilogue& epilogue,
               Bf16Kernel kernel) {
#if TRIDENT_HAVE_BF16_KERNEL
  if (M <= 0 || N <= 0) return;
  if (kernel == Bf16Kernel::amx || (kernel == Bf16Kernel::best && cpu_has_amx_bf16()))
    return gemm_bf16_amx(trans_a, trans_b, M, N, K, A, lda, B, ldb,
                         Store{alpha, beta, C, c_bf16, ldc, epilogue});
  const int64_t pairs = (K + 1) / 2;
  const int64_t strips = (M + kMR - 1) / kMR, panels = (N + kNR - 1) / kNR;
  const int64_t strip_words = pairs * kMR, panel_words = pairs * kNR;
  TsanForkJoin edges;  // (both loops)
  PackingLease lease;
  const Packed packed = pack_operands(
      strips, strip_words,
      [&](int64_t t, uint32_t* dst) {  // rows of op(A): A[i, p] or A[p, i]
        pack_pairs(A, trans_a ? 1 : lda, trans_a ? lda : 1, M, K, t * kMR, kMR, pairs, dst);
      },
      trans_b, N, K, B, ldb, pairs, edges, lease);
  const Store store{alpha, beta, C, c_bf16, ldc, epilogue};
  // Tasks of up to 4 strips x 4 panels: a panel stays in L2 while the strips pass over it.
  tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, strips, 4, 0, panels, 4),
                    edges.around([&](const tbb::blocked_range2d<int64_t>& r) {
                      alignas(64) Tile tile;
                      for (int64_t p = r.cols().begin(); p != r.cols().end(); ++p)
                        for (int64_t s = r.rows().begin(); s != r.rows().end(); ++s) {
                          micro(packed.a + s * strip_words, packed.b + p * panel_words, pairs,
                                tile);
                          store(tile, int(std::min<int64_t>(kMR, M - s * kMR)),
                                int(std::min<int64_t>(kNR, N - p * kNR)), s * kMR, p * kNR);
                        }
                    }));
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
  (void)B, (void)ldb, (void)beta, (void)C, (void)c_bf16, (void)ldc, (void)epilogue, (void)kernel;
#endif
}

}  // namespace trident::cpu
