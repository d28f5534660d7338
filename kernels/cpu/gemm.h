// The CPU backend's single-precision GEMM: a packed, cache-blocked, oneTBB-parallel SGEMM with
// fused bias/ReLU epilogue and a SIMD micro-kernel chosen at run time.
#pragma once
#include <cstdint>

namespace trident::cpu {

enum class BiasKind : uint8_t { none, per_column, per_row };

// What happens to each C element after the product, fused into the store:
// c = alpha * dot + beta * c_old (+ bias[col] or bias[row]) then max(c, 0) if relu.
struct GemmEpilogue {
  const float* bias = nullptr;
  BiasKind bias_kind = BiasKind::none;
  bool relu = false;
};

// Row-major C[M,N] = alpha * op(A) * op(B) + beta * C, then the epilogue.
// op(A) is [M,K]: A is stored [M,K] (lda >= K) or, if trans_a, [K,M] (lda >= M).
// op(B) is [K,N]: B is stored [K,N] (ldb >= N) or, if trans_b, [N,K] (ldb >= K).
// beta == 0 means C is not read (it may hold NaN). K == 0 gives beta*C (+ epilogue).
// Runs in parallel on the calling thread's oneTBB arena (tbb::parallel_for), so a caller
// inside a tbb::task_arena gets that arena's concurrency.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
           const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
           int64_t ldc, const GemmEpilogue& epilogue = {});

// Which kernel sgemm runs on this CPU: "avx512", "avx2" or "generic" (for logs and benches).
const char* sgemm_kernel_name();

namespace detail {

// One register-blocked micro-tile, as the shared driver (gemm.cpp) hands it to a kernel:
//   C[m x n] = alpha * sum_p A(i,p) * B(p,j) + beta * C_old, then bias and relu.
// A(i,p) is a[i*a_rs + p*a_cs] (a packed panel has a_rs = 1, a_cs = mr); row p of B is
// b + p*b_rs and is contiguous along j. load_c == false: C_old is not read (beta ignored).
// bias is already offset to the tile's first row or column.
struct MicroTile {
  int64_t k;
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t b_rs;
  float* c;
  int64_t ldc;
  int m, n;  // 1..mr, 1..nr
  bool a_packed;  // a_rs == 1 && a_cs == mr: the kernel may use compile-time offsets
  bool b_packed;  // rows of B are zero-padded to nr: no masked loads needed
  bool load_c, relu;
  float alpha, beta;
  const float* bias;
  BiasKind bias_kind;
};

// The per-instruction-set pieces the driver needs.
struct KernelSet {
  const char* name;
  int mr, nr;  // micro-tile rows and columns; nr is a multiple of 8
  void (*micro)(const MicroTile& t);
  // Packs op(A)[i0:i0+mc, k0:k0+kc] into panels of mr rows, each kc x mr (dst[p*mr + i]).
  void (*pack_a)(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                 int64_t kc, int mr, float* dst);
  // Packs op(B)[k0:k0+kc, j0:j0+nc] into panels of nr columns, each kc x nr (dst[p*nr + j]),
  // the last panel's missing columns set to zero.
  void (*pack_b)(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                 int64_t nc, int nr, float* dst);
};

// The kernel sets; nullptr when this build or CPU cannot run them.
const KernelSet* kernels_generic();
const KernelSet* kernels_avx2();
const KernelSet* kernels_avx512();
bool cpu_has_avx2();    // AVX2 and FMA
bool cpu_has_avx512();  // AVX-512 F/VL/BW/DQ (and the OS saves the zmm state)

// sgemm forced onto one kernel set (tests and benches); same contract as sgemm.
void sgemm_with(const KernelSet& ks, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                float* C, int64_t ldc, const GemmEpilogue& epilogue);

}  // namespace detail
}  // namespace trident::cpu
