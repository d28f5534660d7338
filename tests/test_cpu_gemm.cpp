// Tests for trident::cpu::sgemm: every transpose case, alpha/beta, epilogue, awkward size and
// leading dimension, on each kernel set this CPU can run, against a double-precision loop.
#include <catch2/catch.hpp>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "trident/kernels/cpu/gemm.h"

namespace {

using trident::cpu::BiasKind;
using trident::cpu::GemmEpilogue;
namespace detail = trident::cpu::detail;

struct Case {
  bool ta = false, tb = false;
  int64_t M = 1, N = 1, K = 1;
  float alpha = 1.f, beta = 0.f;
  BiasKind bias = BiasKind::none;
  bool relu = false;
  int64_t pad = 0;  // extra leading-dimension elements for A, B and C
};

std::string describe(const Case& c) {
  return "ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta) + " bias=" + std::to_string(int(c.bias)) +
         " relu=" + std::to_string(c.relu) + " pad=" + std::to_string(c.pad);
}

// Runs one case through `ks` (or the public sgemm when ks is null) and returns the number of
// C elements (including the padding, which must stay untouched) outside the tolerance.
int64_t run_case(const detail::KernelSet* ks, const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  std::vector<float> A(size_t(std::max<int64_t>(1, a_rows * lda))), B(size_t(std::max<int64_t>(1, b_rows * ldb)));
  std::vector<float> C(size_t(c.M * ldc)), bias(size_t(std::max(c.M, c.N)));
  for (auto& x : A) x = dist(rng);
  for (auto& x : B) x = dist(rng);
  for (auto& x : bias) x = dist(rng);
  for (auto& x : C) x = c.beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
  const std::vector<float> C0 = C;

  GemmEpilogue ep;
  ep.bias = c.bias == BiasKind::none ? nullptr : bias.data();
  ep.bias_kind = c.bias;
  ep.relu = c.relu;
  if (ks)
    detail::sgemm_with(*ks, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                       C.data(), ldc, ep);
  else
    trident::cpu::sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                        C.data(), ldc, ep);

  int64_t bad = 0;
  const double tol = 1e-5 * std::sqrt(double(c.K) + 1.0);
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = C[size_t(i * ldc + j)];
      if (j >= c.N) {  // padding must not be written
        const float old = C0[size_t(i * ldc + j)];
        bad += !(got == old || (std::isnan(got) && std::isnan(old)));
        continue;
      }
      double dot = 0, mag = 0;
      for (int64_t p = 0; p < c.K; ++p) {
        const double a = c.ta ? A[size_t(p * lda + i)] : A[size_t(i * lda + p)];
        const double b = c.tb ? B[size_t(j * ldb + p)] : B[size_t(p * ldb + j)];
        dot += a * b;
        mag += std::fabs(a * b);
      }
      double ref = double(c.alpha) * dot;
      mag *= std::fabs(c.alpha);
      if (c.beta != 0.f) {
        ref += double(c.beta) * C0[size_t(i * ldc + j)];
        mag += std::fabs(double(c.beta) * C0[size_t(i * ldc + j)]);
      }
      if (c.bias != BiasKind::none) {
        const double b = bias[size_t(c.bias == BiasKind::per_column ? j : i)];
        ref += b;
        mag += std::fabs(b);
      }
      if (c.relu) ref = std::max(ref, 0.0);
      bad += !(std::fabs(got - ref) <= tol * mag + 1e-30);  // NaN counts as bad
    }
  }
  return bad;
}

// The kernel sets this CPU can run: generic always, plus avx2 / avx512 when supported.
std::vector<const detail::KernelSet*> runnable_sets() {
  std::vector<const detail::KernelSet*> sets{detail::kernels_generic()};
  if (detail::cpu_has_avx2() && detail::kernels_avx2()) sets.push_back(detail::kernels_avx2());
  if (detail::cpu_has_avx512() && detail::kernels_avx512()) sets.push_back(detail::kernels_avx512());
  return sets;
}

struct Params {
  float alpha, beta;
  BiasKind bias;
  bool relu;
};
const Params kParams[] = {{1.f, 0.f, BiasKind::none, false},       {0.5f, -1.5f, BiasKind::none, false},
                          {-2.f, 1.f, BiasKind::per_column, false}, {1.f, 0.f, BiasKind::per_row, true},
                          {1.5f, 0.25f, BiasKind::per_column, true}, {1.f, 1.f, BiasKind::none, true}};

}  // namespace

TEST_CASE("cpu sgemm kernel choice is one of the known names", "[cpu][gemm]") {
  const std::string name = trident::cpu::sgemm_kernel_name();
  CHECK((name == "avx512" || name == "avx2" || name == "generic"));
  if (detail::cpu_has_avx512() && detail::kernels_avx512()) CHECK(name == "avx512");
  else if (detail::cpu_has_avx2() && detail::kernels_avx2()) CHECK(name == "avx2");
}

TEST_CASE("cpu sgemm matches a double loop: small and awkward sizes, all options", "[cpu][gemm]") {
  const int64_t sizes[] = {1, 2, 7, 16, 33};
  for (const auto* ks : runnable_sets()) {
    uint32_t seed = 1;
    for (int64_t M : sizes)
      for (int64_t N : sizes)
        for (int64_t K : sizes)
          for (int t = 0; t < 4; ++t) {
            const Params& p = kParams[seed % 6];
            Case c{bool(t & 1), bool(t & 2), M, N, K, p.alpha, p.beta, p.bias, p.relu, int64_t(seed % 3 == 0 ? 5 : 0)};
            INFO(ks->name << ": " << describe(c));
            CHECK(run_case(ks, c, seed++) == 0);
          }
  }
}

TEST_CASE("cpu sgemm matches a double loop: larger shapes, every transpose and epilogue", "[cpu][gemm]") {
  struct Shape { int64_t M, N, K; };
  // Non-multiples of every micro-tile, skinny shapes of the seed models (both packing choices
  // for A and B), a K that needs several K blocks, and N > the driver's column block.
  const Shape shapes[] = {{257, 33, 7}, {33, 257, 33}, {13, 17, 300}, {100, 70, 513}, {257, 257, 257},
                          {200, 10, 512}, {20, 600, 250}, {10, 512, 200}, {5, 40, 9}, {12, 32, 64},
                          {31, 1700, 40}, {200, 64, 1100}};
  for (const auto* ks : runnable_sets()) {
    uint32_t seed = 1000;
    for (const Shape& s : shapes)
      for (int t = 0; t < 4; ++t)
        for (int v = 0; v < 2; ++v) {
          const Params& p = kParams[(seed + v) % 6];
          Case c{bool(t & 1), bool(t & 2), s.M, s.N, s.K, p.alpha, p.beta, p.bias, p.relu, int64_t(v ? 3 : 0)};
          INFO(ks->name << ": " << describe(c));
          CHECK(run_case(ks, c, seed++) == 0);
        }
  }
}

TEST_CASE("cpu sgemm splits huge operands into super-blocks", "[cpu][gemm]") {
  // M * K and N * K above the packing cap (8M floats): several row and column super-blocks.
  Case c{false, true, 2100, 70, 4100, 1.f, 0.5f, BiasKind::per_row, true, 1};
  INFO(describe(c));
  CHECK(run_case(nullptr, c, 7) == 0);
  Case d{true, false, 40, 2100, 4100, 1.f, 0.f, BiasKind::per_column, false, 0};
  INFO(describe(d));
  CHECK(run_case(nullptr, d, 8) == 0);
}

TEST_CASE("cpu sgemm with K == 0 or alpha == 0 gives beta * C plus the epilogue", "[cpu][gemm]") {
  for (const auto* ks : runnable_sets())
    for (float beta : {0.f, 2.f})
      for (int64_t K : {0, 5}) {
        Case c{false, false, 9, 21, K, K ? 0.f : 1.f, beta, BiasKind::per_column, true, 2};
        INFO(ks->name << ": " << describe(c));
        CHECK(run_case(ks, c, 99) == 0);
        c.bias = BiasKind::per_row;
        CHECK(run_case(ks, c, 98) == 0);
      }
}

TEST_CASE("cpu sgemm runs inside task arenas and from concurrent tasks", "[cpu][gemm]") {
  tbb::task_arena one(1);
  one.execute([] {
    Case c{true, false, 130, 150, 170, 1.f, 0.f, BiasKind::none, false, 0};
    CHECK(run_case(nullptr, c, 5) == 0);
  });
  // Concurrent calls (each on whatever thread runs the task) share nothing but the code.
  std::vector<int64_t> bad(8, -1);
  tbb::parallel_for(0, 8, [&](int i) {
    Case c{bool(i & 1), bool(i & 2), 90 + i, 200 - i, 120 + 3 * i, 1.f, 0.5f, BiasKind::per_row, true, 0};
    bad[size_t(i)] = run_case(nullptr, c, uint32_t(i));
  });
  for (int64_t b : bad) CHECK(b == 0);
}
