// SGEMM driver shared by every instruction set: run-time kernel choice, packing plan, cache
// blocking and oneTBB parallelism, plus the portable (plain C++) kernel set.
#include "trident/kernels/cpu/gemm.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "trident/core/thread_annotations.h"

namespace trident::cpu {
namespace detail {
namespace {

// Blocking, sized for ~32 KiB L1 / 1 MiB L2 per core: a kc x nr B micro-panel stays in L1 while
// the ir loop streams mc x kc of packed A out of L2; a task's kc x nc slab of B stays in L2/L3.
constexpr int64_t kKC = 256;
constexpr int64_t kMC = 144;
constexpr int64_t kNC = 1536;
// Below this many flops one thread does it all: a parallel_for costs a few microseconds.
constexpr double kSerialFlops = 3.0e6;
// Packed copies of A and of B are capped at this many floats each (larger problems are cut
// into super-blocks of C that are packed and computed one after the other).
constexpr int64_t kPackCap = int64_t(8) << 20;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// ---- Portable kernel set: a 4 x 8 tile of plain C++ that compilers vectorise for the baseline.

constexpr int kGenMR = 4, kGenNR = 8;

void micro_generic(const MicroTile& t) {
  float acc[kGenMR][kGenNR] = {};
  const float* a = t.a;
  const float* b = t.b;
  if (t.n == kGenNR) {
    for (int64_t p = 0; p < t.k; ++p, a += t.a_cs, b += t.b_rs)
      for (int i = 0; i < t.m; ++i)
        for (int j = 0; j < kGenNR; ++j) acc[i][j] += a[i * t.a_rs] * b[j];
  } else {
    for (int64_t p = 0; p < t.k; ++p, a += t.a_cs, b += t.b_rs)
      for (int i = 0; i < t.m; ++i)
        for (int j = 0; j < t.n; ++j) acc[i][j] += a[i * t.a_rs] * b[j];
  }
  for (int i = 0; i < t.m; ++i) {
    float* c = t.c + i * t.ldc;
    for (int j = 0; j < t.n; ++j) {
      float r = t.alpha * acc[i][j];
      if (t.load_c) r += t.beta * c[j];
      if (t.bias_kind == BiasKind::per_column) r += t.bias[j];
      if (t.bias_kind == BiasKind::per_row) r += t.bias[i];
      if (t.relu) r = r > 0.f ? r : (r == r ? 0.f : r);  // keeps NaN visible
      c[j] = r;
    }
  }
}

void pack_a_generic(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                    int64_t kc, int mr, float* dst) {
  for (int64_t ip = 0; ip < mc; ip += mr, dst += kc * mr) {
    const int64_t m = std::min<int64_t>(mr, mc - ip);
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t i = 0; i < m; ++i)
        dst[p * mr + i] = trans_a ? A[(k0 + p) * lda + i0 + ip + i] : A[(i0 + ip + i) * lda + k0 + p];
  }
}

void pack_b_generic(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                    int64_t nc, int nr, float* dst) {
  for (int64_t jp = 0; jp < nc; jp += nr, dst += kc * nr) {
    const int64_t n = std::min<int64_t>(nr, nc - jp);
    for (int64_t p = 0; p < kc; ++p)
      for (int64_t j = 0; j < nr; ++j)
        dst[p * nr + j] = j >= n ? 0.f
                          : trans_b ? B[(j0 + jp + j) * ldb + k0 + p]
                                    : B[(k0 + p) * ldb + j0 + jp + j];
  }
}

const KernelSet kGenericSet = {"generic", kGenMR, kGenNR, micro_generic, pack_a_generic,
                               pack_b_generic};

// ---- Packing scratch: one growable buffer per calling thread, reused across calls.

struct Scratch {
  float* data = nullptr;
  size_t floats = 0;
  bool busy = false;
  ~Scratch() { std::free(data); }
};

// Holds packing memory for one sgemm call: the thread's buffer, or a private one if a nested
// call on this thread already holds it.
class ScratchLease {
 public:
  explicit ScratchLease(size_t floats) {
    static thread_local Scratch tls;
    if (!tls.busy) {
      s_ = &tls;
      s_->busy = true;
    } else {
      own_ = std::make_unique<Scratch>();
      s_ = own_.get();
    }
    if (s_->floats < floats) {
      std::free(s_->data);
      s_->data = static_cast<float*>(std::aligned_alloc(64, round_up(floats * 4 + 256, 64)));
      if (!s_->data) throw std::bad_alloc();
      s_->floats = floats;
    }
  }
  ~ScratchLease() { s_->busy = false; }
  float* get() const { return s_->data; }

 private:
  Scratch* s_;
  std::unique_ptr<Scratch> own_;
};

// ---- The driver.

struct Problem {
  const KernelSet* ks;
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float* C;
  int64_t ldc;
  GemmEpilogue ep;
  bool pack_a = false, pack_b = false;  // else the kernel reads A (any strides) / B (rows along N) in place
  int64_t kcb = 0;      // depth of a K block
};

// Where the packed slices of the current super-block live; rows [m0, m0+Ms) and columns
// [n0, n0+Ns) of C. Packed block kb starts at k0 * Mspad (A) or k0 * Nspad (B).
struct Slice {
  int64_t m0, Ms, Mspad, n0, Ns, Nspad;
  float* Ap;
  float* Bp;
};

// Computes C[r0:r1, c0:c1] (slice-relative rows/columns, r0 % mr == 0, c0 % nr == 0).
void compute_region(const Problem& P, const Slice& S, int64_t r0, int64_t r1, int64_t c0,
                    int64_t c1) {
  const KernelSet& ks = *P.ks;
  const int mr = ks.mr, nr = ks.nr;
  const int64_t a_rs = P.ta ? 1 : P.lda, a_cs = P.ta ? P.lda : 1;
  MicroTile t{};
  t.ldc = P.ldc;
  t.alpha = P.alpha;
  t.a_packed = P.pack_a;
  // B read in place but reused by several row tiles gets each kc x nr micro-panel copied into
  // a small per-thread buffer first: B's rows may lie a power-of-two stride apart and evict
  // each other from L1/L2, and the copy is cheap next to the tiles' work.
  static thread_local Scratch panel_tls;
  float* panel = nullptr;
  if (!P.pack_b && r1 - r0 > mr) {
    const size_t need = size_t(P.kcb * nr);
    if (panel_tls.floats < need) {
      std::free(panel_tls.data);
      panel_tls.data = static_cast<float*>(std::aligned_alloc(64, round_up(need * 4, 64)));
      if (!panel_tls.data) throw std::bad_alloc();
      panel_tls.floats = need;
    }
    panel = panel_tls.data;
  }
  for (int64_t jc = c0; jc < c1; jc += kNC) {
    const int64_t jc1 = std::min(c1, jc + kNC);
    for (int64_t k0 = 0; k0 < P.K; k0 += P.kcb) {
      const int64_t kc = std::min(P.kcb, P.K - k0);
      const bool first = k0 == 0, last = k0 + kc == P.K;
      t.k = kc;
      t.load_c = !first || P.beta != 0.f;
      t.beta = first ? P.beta : 1.f;
      t.relu = last && P.ep.relu;
      t.bias_kind = last && P.ep.bias ? P.ep.bias_kind : BiasKind::none;
      for (int64_t ic = r0; ic < r1; ic += kMC) {
        const int64_t ic1 = std::min(r1, ic + kMC);
        for (int64_t jr = jc; jr < jc1; jr += nr) {
          const int64_t col = S.n0 + jr;
          t.n = int(std::min<int64_t>(nr, P.N - col));
          t.b_packed = P.pack_b || (panel && ic1 - ic > mr);
          if (P.pack_b) {
            t.b = S.Bp + k0 * S.Nspad + jr * kc;
          } else if (t.b_packed) {
            ks.pack_b(false, P.B, P.ldb, k0, kc, col, t.n, nr, panel);
            t.b = panel;
          } else {
            t.b = P.B + k0 * P.ldb + col;
          }
          t.b_rs = t.b_packed ? nr : P.ldb;
          for (int64_t ir = ic; ir < ic1; ir += mr) {
            const int64_t row = S.m0 + ir;
            t.m = int(std::min<int64_t>(mr, P.M - row));
            if (P.pack_a) {
              t.a = S.Ap + k0 * S.Mspad + ir * kc;
              t.a_rs = 1;
              t.a_cs = mr;
            } else {
              t.a = P.A + row * a_rs + k0 * a_cs;
              t.a_rs = a_rs;
              t.a_cs = a_cs;
            }
            t.c = P.C + row * P.ldc + col;
            t.bias = t.bias_kind == BiasKind::per_column ? P.ep.bias + col
                     : t.bias_kind == BiasKind::per_row  ? P.ep.bias + row
                                                          : nullptr;
            ks.micro(t);
          }
        }
      }
    }
  }
}

// Packs the slice's A and B panels; items are (K block, run of panels) of roughly equal size.
void pack_slice(const Problem& P, const Slice& S, bool parallel) {
  const KernelSet& ks = *P.ks;
  const int64_t nkb = ceil_div(P.K, P.kcb);
  const int64_t rows_per = P.pack_a ? round_up(std::max<int64_t>(1, 32768 / P.kcb), ks.mr) : 0;
  const int64_t cols_per = P.pack_b ? round_up(std::max<int64_t>(1, 32768 / P.kcb), ks.nr) : 0;
  const int64_t na = P.pack_a ? ceil_div(S.Ms, rows_per) : 0;
  const int64_t nb = P.pack_b ? ceil_div(S.Ns, cols_per) : 0;
  auto item = [&](int64_t it) {
    const int64_t kb = it / (na + nb), r = it % (na + nb);
    const int64_t k0 = kb * P.kcb, kc = std::min(P.kcb, P.K - k0);
    if (r < na) {
      const int64_t i = r * rows_per, mc = std::min(rows_per, S.Ms - i);
      ks.pack_a(P.ta, P.A, P.lda, S.m0 + i, mc, k0, kc, ks.mr, S.Ap + k0 * S.Mspad + i * kc);
    } else {
      const int64_t j = (r - na) * cols_per, nc = std::min(cols_per, S.Ns - j);
      ks.pack_b(P.tb, P.B, P.ldb, k0, kc, S.n0 + j, nc, ks.nr, S.Bp + k0 * S.Nspad + j * kc);
    }
  };
  const int64_t items = nkb * (na + nb);
  if (!parallel || items < 2) {
    for (int64_t it = 0; it < items; ++it) item(it);
    return;
  }
  TsanForkJoin edges;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, items, 1), edges.around([&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t it = r.begin(); it != r.end(); ++it) item(it);
  }));
}

// Splits the slice into T regions (gm x gn grid of mr/nr-aligned blocks) with the smallest
// largest region, then computes them in parallel.
void compute_slice(const Problem& P, const Slice& S, int T) {
  const int mr = P.ks->mr, nr = P.ks->nr;
  int best_gm = 1;
  int64_t best_cost = INT64_MAX;
  for (int gm = 1; gm <= T; ++gm) {
    if (T % gm) continue;
    const int gn = T / gm;
    const int64_t rm = round_up(ceil_div(S.Ms, gm), mr), rn = round_up(ceil_div(S.Ns, gn), nr);
    if (ceil_div(S.Ms, rm) < gm || ceil_div(S.Ns, rn) < gn) continue;  // would leave one idle
    const int64_t cost = rm * rn + rm * nr + rn * mr;  // work of the largest; thin ones cost more
    if (cost < best_cost) best_cost = cost, best_gm = gm;
  }
  if (best_cost == INT64_MAX) T = 1;
  const int gm = best_cost == INT64_MAX ? 1 : best_gm, gn = T / gm;
  const int64_t rm = round_up(ceil_div(S.Ms, gm), mr), rn = round_up(ceil_div(S.Ns, gn), nr);
  auto region = [&](int64_t r) {
    const int64_t i = r / gn, j = r % gn;
    compute_region(P, S, i * rm, std::min(S.Ms, (i + 1) * rm), j * rn, std::min(S.Ns, (j + 1) * rn));
  };
  if (T == 1) return region(0);
  TsanForkJoin edges;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, T, 1), edges.around([&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i != r.end(); ++i) region(i);
  }), tbb::simple_partitioner());
}

// C = beta * C (+ epilogue): what is left when the product term vanishes (K == 0, alpha == 0).
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc, const GemmEpilogue& ep) {
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) {
      float r = beta == 0.f ? 0.f : beta * c[j];
      if (ep.bias && ep.bias_kind == BiasKind::per_column) r += ep.bias[j];
      if (ep.bias && ep.bias_kind == BiasKind::per_row) r += ep.bias[i];
      if (ep.relu) r = r > 0.f ? r : (r == r ? 0.f : r);
      c[j] = r;
    }
  }
}

const KernelSet* pick_kernels() {
  if (cpu_has_avx512() && kernels_avx512()) return kernels_avx512();
  if (cpu_has_avx2() && kernels_avx2()) return kernels_avx2();
  return kernels_generic();
}

}  // namespace

const KernelSet* kernels_generic() { return &kGenericSet; }

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && cpu_has_avx2();
#else
  return false;
#endif
}

void sgemm_with(const KernelSet& ks, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                float* C, int64_t ldc, const GemmEpilogue& epilogue) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.f) return scale_c(M, N, beta, C, ldc, epilogue);
  Problem P{&ks, trans_a, trans_b, M, N, K, alpha, beta, A, lda, B, ldb, C, ldc, epilogue};
  // Packing costs a pass over the operand; it pays when the panel is reused many times. Each
  // A element is reused once per nr columns, each B element once per mr rows. The kernel can
  // read A in place with any strides, B only along rows (not transposed).
  P.pack_a = N > 2 * ks.nr;
  P.pack_b = trans_b || M > 4 * ks.mr;
  P.kcb = round_up(ceil_div(K, ceil_div(K, kKC)), 8);  // equal blocks, no thin tail block
  if (P.kcb > K) P.kcb = K;

  const double flops = 2.0 * double(M) * double(N) * double(K);
  const int threads = flops < kSerialFlops ? 1 : tbb::this_task_arena::max_concurrency();
  // Super-blocks keep the packed copies under kPackCap floats each.
  const int64_t Ms = P.pack_a ? std::min(round_up(M, ks.mr), std::max<int64_t>(kMC, kPackCap / K / kMC * kMC)) : M;
  const int64_t Ns = P.pack_b ? std::min(round_up(N, ks.nr), std::max<int64_t>(kNC, kPackCap / K / kNC * kNC)) : N;
  const size_t a_floats = P.pack_a ? size_t(round_up(Ms, ks.mr) * K) : 0;
  const size_t b_floats = P.pack_b ? size_t(round_up(Ns, ks.nr) * K) : 0;
  ScratchLease scratch(a_floats + b_floats + 16);

  // The calling thread waits only on its own tasks, so no other sgemm can run nested on it.
  tbb::this_task_arena::isolate([&] {
    for (int64_t n0 = 0; n0 < N; n0 += Ns) {
      for (int64_t m0 = 0; m0 < M; m0 += Ms) {
        Slice S;
        S.m0 = m0, S.Ms = std::min(Ms, M - m0), S.Mspad = round_up(S.Ms, ks.mr);
        S.n0 = n0, S.Ns = std::min(Ns, N - n0), S.Nspad = round_up(S.Ns, ks.nr);
        S.Ap = scratch.get();
        S.Bp = scratch.get() + a_floats;
        Problem Q = P;
        Q.pack_b = P.pack_b && m0 == 0;  // B's slice is packed once per column super-block
        if (Q.pack_a || Q.pack_b) pack_slice(Q, S, threads > 1);
        compute_slice(P, S, threads);
      }
    }
  });
}

}  // namespace detail

namespace {
const detail::KernelSet& active_kernels() {
  static const detail::KernelSet* ks = detail::pick_kernels();
  return *ks;
}
}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const GemmEpilogue& epilogue) {
  detail::sgemm_with(active_kernels(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                     ldc, epilogue);
}

const char* sgemm_kernel_name() { return active_kernels().name; }

}  // namespace trident::cpu
