// One GEMM case checked against trident::reference: shared by the op conformance suite and the
// backend-specific GEMM tests (e.g. the OpenCL tiled kernel at each tile shape).
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "trident/kernels/reference/reference_ops.h"
#include "tests/conformance.h"

namespace trident::testing {

struct GemmCase {
  int64_t m, n, k;
  float alpha = 1.0f, beta = 0.0f;
  BiasKind bias = BiasKind::none;
  bool relu = false;
  int64_t pad = 0;        // extra stored columns of A, B and C (lda > cols)
  size_t offset = 0;      // floats before each operand in its allocation
  UnaryOp activation = UnaryOp::identity;  // an epilogue other than ReLU (relu == false)
  bool packed_as_zero = false;  // pass lda/ldb/ldc = 0 (the front fills in the packed stride)
};

inline std::string describe(const GemmCase& c, bool ta, bool tb) {
  std::ostringstream s;
  s << "gemm ta=" << ta << " tb=" << tb << " m=" << c.m << " n=" << c.n << " k=" << c.k
    << " alpha=" << c.alpha << " beta=" << c.beta << " bias=" << int(c.bias) << " relu=" << c.relu
    << " pad=" << c.pad << " offset=" << c.offset << " activation="
    << unary_op_name(c.activation) << " packed_as_zero=" << c.packed_as_zero;
  return s.str();
}

// Runs one GEMM on the device (through Device::gemm, or the core default of the fused slot when
// `through_default`) and on the reference; C (padding included) must agree and the guard floats
// around every operand must be untouched.
inline void check_gemm(Device& d, const GemmCase& c, bool ta, bool tb, uint32_t seed,
                       bool through_default = false) {
  INFO(describe(c, ta, tb));
  const int64_t a_rows = ta ? c.k : c.m, a_cols = ta ? c.m : c.k;
  const int64_t b_rows = tb ? c.n : c.k, b_cols = tb ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  // max(.., 1): k == 0 leaves A or B empty, and an allocation of 0 floats has no guard to check.
  const std::vector<float> a = random_floats(size_t(std::max<int64_t>(a_rows * lda, 1)), seed);
  const std::vector<float> b = random_floats(size_t(std::max<int64_t>(b_rows * ldb, 1)), seed + 1);
  const std::vector<float> bias = random_floats(size_t(c.bias == BiasKind::per_row ? c.m : c.n),
                                                seed + 2);
  // beta == 0 means C is not read: NaN there must not leak into the result.
  std::vector<float> c0 = c.beta == 0.0f ? std::vector<float>(size_t(c.m * ldc), std::numeric_limits<float>::quiet_NaN())
                                         : random_floats(size_t(c.m * ldc), seed + 3);
  std::vector<float> want = c0;
  reference::HostGemmArgs h;
  h.trans_a = ta; h.trans_b = tb; h.m = c.m; h.n = c.n; h.k = c.k;
  h.alpha = c.alpha; h.beta = c.beta;
  h.a = a.data(); h.b = b.data(); h.c = want.data();
  h.lda = lda; h.ldb = ldb; h.ldc = ldc;
  h.bias = c.bias == BiasKind::none ? nullptr : bias.data();
  h.bias_kind = c.bias;
  h.activation = c.relu ? UnaryOp::relu : c.activation;
  reference::gemm(h);

  OffsetBuffer da(d, a, c.offset), db(d, b, c.offset + 1), dc(d, c0, c.offset + 2),
      dbias(d, bias, c.offset + 3);
  GemmArgs g;
  g.trans_a = ta; g.trans_b = tb; g.m = c.m; g.n = c.n; g.k = c.k;
  g.alpha = c.alpha; g.beta = c.beta;
  g.a = da.tensor(); g.b = db.tensor(); g.c = dc.tensor();
  if (!(c.packed_as_zero && c.pad == 0)) {
    g.lda = lda; g.ldb = ldb; g.ldc = ldc;
  }
  if (c.bias != BiasKind::none) g.bias = dbias.tensor();
  g.bias_kind = c.bias;
  g.activation = c.relu ? UnaryOp::relu : c.activation;
  if (through_default) {
    g.lda = lda; g.ldb = ldb; g.ldc = ldc;  // the front fills these before the slot runs
    defaults::gemm_fused(d, g);
  } else {
    d.gemm(g);
  }

  Tolerance tol = dot_tolerance(d, c.k);
  tol.abs *= std::abs(c.alpha) + std::abs(c.beta) + 1.0;
  TRIDENT_CHECK_CLOSE(dc.values(), want, tol);
  CHECK(dc.guard_damage() == 0);
  CHECK(da.guard_damage() + db.guard_damage() + dbias.guard_damage() == 0);
}

}  // namespace trident::testing
