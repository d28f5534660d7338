// Tests for trident::cpu::gemm_bf16 (AVX-512 BF16, and AMX where the CPU has it): every
// transpose case, alpha/beta, bias, ReLU, odd K, edges of the 12 x 32 and 32 x 32 tiles and of
// AMX's 16-pair K steps, padded leading dimensions, float32 and bfloat16 C,
// against a double-precision loop over the same bfloat16 inputs; and the CPU device taking
// bfloat16 GEMMs natively. Where the CPU lacks AVX-512 BF16 the cases say so and check that
// the device stages bfloat16 GEMMs instead.
#include <catch2/catch.hpp>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "trident/core/half.h"
#include "trident/core/registry.h"
#include "trident/kernels/cpu/gemm_bf16.h"

namespace {

using trident::cpu::Bf16Kernel;
using trident::cpu::BiasKind;

struct Case {
  bool ta = false, tb = false, c_bf16 = false;
  int64_t M = 1, N = 1, K = 1;
  float alpha = 1.f, beta = 0.f;
  BiasKind bias = BiasKind::none;
  bool relu = false;
  int64_t pad = 0;
  Bf16Kernel kernel = Bf16Kernel::avx512;
};

std::string describe(const Case& c) {
  return "ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) +
         " c_bf16=" + std::to_string(c.c_bf16) + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         " bias=" + std::to_string(int(c.bias)) + " relu=" + std::to_string(c.relu) +
         " pad=" + std::to_string(c.pad) +
         (c.kernel == Bf16Kernel::amx ? " kernel=amx" : " kernel=avx512");
}

// Elements of C (padding included, which must stay untouched) outside the tolerance: each
// product of two bfloat16 values is exact in float, so the error is the float sum's, bounded by
// (K + 2) u32 sum |a b| (+ one bfloat16 rounding of the result for a bfloat16 C).
int64_t mismatches(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  auto bf16 = [&] { return trident::float_to_bf16(dist(rng)); };
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  std::vector<uint16_t> A(size_t(a_rows * lda)), B(size_t(b_rows * ldb));
  for (auto& v : A) v = bf16();
  for (auto& v : B) v = bf16();
  std::vector<float> c0(size_t(c.M * ldc)), bias(size_t(std::max(c.M, c.N)));
  for (auto& v : c0) v = trident::bf16_to_float(bf16());
  for (auto& v : bias) v = dist(rng);
  std::vector<float> cf = c0;
  std::vector<uint16_t> cb(c0.size());
  for (size_t i = 0; i < c0.size(); ++i) cb[i] = trident::float_to_bf16(c0[i]);
  trident::cpu::GemmEpilogue epilogue{bias.data(), c.bias, c.relu};
  trident::cpu::gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb,
                          c.beta, c.c_bf16 ? static_cast<void*>(cb.data()) : cf.data(), c.c_bf16,
                          ldc, epilogue, c.kernel);
  auto a = [&](int64_t i, int64_t p) {
    return double(trident::bf16_to_float(c.ta ? A[size_t(p * lda + i)] : A[size_t(i * lda + p)]));
  };
  auto b = [&](int64_t p, int64_t j) {
    return double(trident::bf16_to_float(c.tb ? B[size_t(j * ldb + p)] : B[size_t(p * ldb + j)]));
  };
  int64_t bad = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j);
      const double got = c.c_bf16 ? trident::bf16_to_float(cb[at]) : cf[at];
      if (j >= c.N) {  // padding: untouched
        bad += c.c_bf16 ? cb[at] != trident::float_to_bf16(c0[at]) : cf[at] != c0[at];
        continue;
      }
      double dot = 0, magnitude = 0;
      for (int64_t p = 0; p < c.K; ++p)
        dot += a(i, p) * b(p, j), magnitude += std::fabs(a(i, p) * b(p, j));
      const double old = c.c_bf16 ? trident::bf16_to_float(trident::float_to_bf16(c0[at]))
                                  : c0[at];
      double want = c.alpha * dot + (c.beta != 0.f ? c.beta * old : 0.0);
      if (c.bias == BiasKind::per_column) want += bias[size_t(j)];
      if (c.bias == BiasKind::per_row) want += bias[size_t(i)];
      if (c.relu && want < 0) want = 0;
      double tol = double(c.K + 2) * 6e-8 *
                   (std::fabs(c.alpha) * magnitude + std::fabs(c.beta * old) + 2.0);
      if (c.c_bf16) tol += std::fabs(want) / 256.0;
      bad += !(std::fabs(got - want) <= tol);
    }
  return bad;
}

}  // namespace

TEST_CASE("cpu bf16 gemm: every case against a double loop (AVX-512 BF16)", "[cpu][gemm][half]") {
  if (!trident::cpu::cpu_has_avx512_bf16()) {
    WARN("this CPU has no AVX-512 BF16 (or TRIDENT_CPU_BF16_DOT=0): the kernel is not run");
    return;
  }
  const int64_t sizes[][3] = {{1, 1, 1},    {1, 1, 2},     {12, 32, 2},    {13, 33, 3},
                              {11, 31, 64}, {25, 70, 129}, {100, 10, 784}, {130, 200, 511},
                              {32, 32, 32}, {33, 31, 33},  {64, 96, 65},   {40, 8, 1000}};
  std::vector<Bf16Kernel> kernels{Bf16Kernel::avx512};
  if (trident::cpu::cpu_has_amx_bf16())
    kernels.push_back(Bf16Kernel::amx);
  else
    WARN("this CPU (or process) has no AMX, or TRIDENT_CPU_AMX=0: its kernel is not run");
  uint32_t seed = 1;
  for (const Bf16Kernel kernel : kernels)
    for (const auto& size : sizes)
      for (int variant = 0; variant < 8; ++variant) {
        Case c;
        c.kernel = kernel;
        c.M = size[0], c.N = size[1], c.K = size[2];
        c.ta = variant & 1, c.tb = (variant >> 1) & 1, c.c_bf16 = (variant >> 2) & 1;
        c.alpha = variant % 3 == 0 ? 1.f : 0.75f;
        c.beta = variant % 2 == 0 ? 0.f : 0.5f;
        c.bias = BiasKind(seed % 3);
        c.relu = seed % 2 == 0;
        c.pad = variant % 3;
        INFO(describe(c));
        CHECK(mismatches(c, seed++) == 0);
      }
}

TEST_CASE("cpu bf16 gemm: K = 0 gives beta * C plus the epilogue; empty M or N touch nothing",
          "[cpu][gemm][half]") {
  if (!trident::cpu::cpu_has_avx512_bf16()) {
    WARN("this CPU has no AVX-512 BF16 (or TRIDENT_CPU_BF16_DOT=0): the kernel is not run");
    return;
  }
  Case c;
  c.M = 5, c.N = 40, c.K = 0, c.beta = 0.5f, c.bias = BiasKind::per_row, c.relu = true;
  CHECK(mismatches(c, 7) == 0);
  if (trident::cpu::cpu_has_amx_bf16()) {
    c.kernel = Bf16Kernel::amx;
    CHECK(mismatches(c, 7) == 0);
  }
  std::vector<float> C(4, 3.f);
  trident::cpu::gemm_bf16(false, false, 0, 2, 3, 1.f, nullptr, 3, nullptr, 2, 0.f, C.data(),
                          false, 2);
  CHECK(C == std::vector<float>(4, 3.f));
}

TEST_CASE("cpu bf16 gemm: GEMMs one after another and started inside a parallel loop (a "
          "convolution's pieces) keep their own packed operands",
          "[cpu][gemm][half]") {
  // A thread waiting for its GEMM's tasks may run another iteration of the outer loop, which
  // starts a GEMM on the same thread: the first one's packed operands must survive it.
  if (!trident::cpu::cpu_has_avx512_bf16()) {
    WARN("this CPU has no AVX-512 BF16 (or TRIDENT_CPU_BF16_DOT=0): the kernel is not run");
    return;
  }
  std::vector<Bf16Kernel> kernels = {Bf16Kernel::avx512};
  if (trident::cpu::cpu_has_amx_bf16()) kernels.push_back(Bf16Kernel::amx);
  // Sixteen threads even on a 2-core machine: the more threads, the more such hand-overs.
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 16);
  tbb::task_arena arena(16);
  for (Bf16Kernel kernel : kernels) {
    // First one after another on this thread: each call packs into the buffer the one before
    // left (AMX pads K to 16-pair steps: the padding must be written as zeros each time).
    int64_t bad_in_turn = 0;
    for (int i = 63; i >= 0; --i) {
      Case c;
      c.M = 20 + i % 7, c.N = 70 + 3 * i, c.K = 33 + i, c.tb = i % 2 == 1, c.kernel = kernel;
      bad_in_turn += mismatches(c, uint32_t(100 + i));
    }
    CHECK(bad_in_turn == 0);
    std::atomic<int64_t> bad{0};
    arena.execute([&] {
      tbb::parallel_for(0, 64, [&](int i) {
        Case c;
        c.M = 20 + i % 7, c.N = 70 + 3 * i, c.K = 33 + i, c.tb = i % 2 == 1, c.kernel = kernel;
        bad += mismatches(c, uint32_t(100 + i));
      });
    });
    CHECK(bad.load() == 0);
  }
}

TEST_CASE(
    "cpu bf16 gemm: the CPU device takes bfloat16 GEMMs and convolutions natively exactly "
    "where the CPU has AVX-512 BF16",
    "[cpu][gemm][half]") {
  trident::Device& cpu = trident::DeviceRegistry::global().device("cpu:0");
  CHECK(cpu.native(trident::OpFamily::gemm, trident::DType::bf16) ==
        trident::cpu::cpu_has_avx512_bf16());
  CHECK_FALSE(cpu.native(trident::OpFamily::gemm, trident::DType::f16));
  CHECK(cpu.native(trident::OpFamily::conv2d, trident::DType::bf16) ==
        trident::cpu::cpu_has_avx512_bf16());
  CHECK_FALSE(cpu.native(trident::OpFamily::conv2d, trident::DType::f16));
}
