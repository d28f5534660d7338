// CPU convolution: per sample, im2col then one GEMM whose output is already NCHW; samples are
// split into `slots` contiguous pieces that run in parallel, each with its own workspace slice.
//
// Forward:  y_n[OC, P] = w[OC, CKK] * col_n[CKK, P] + b        (P = OH*OW, CKK = C*KH*KW)
// Backward: dw += dy_n[OC, P] * col_n[CKK, P]^T               (the GEMM's packing transposes
//           col_n 8x8 in registers: 8% faster for the ResNet than writing the transposed patch
//           matrix element by element)
//           dcol[CKK, P] = w^T * dy_n, dx_n = col2im(dcol)
//           db[OC] = sum over n and P of dy, in double
// One template serves float32 (sgemm) and bfloat16 (gemm_bf16: bfloat16 patch matrices, float
// products and sums; dcol, dw and db in float, and dx summed in float and rounded once).
#include "trident/kernels/cpu/conv2d.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "trident/kernels/cpu/convert.h"
#include "trident/kernels/cpu/gemm.h"
#include "trident/kernels/cpu/gemm_bf16.h"
#include "trident/kernels/cpu/im2col.h"
#include "trident/kernels/cpu/parallel.h"

namespace trident::cpu {
namespace {

size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// One slot's slice of the workspace: [col | dcol | dw partial | db partial (double) | dx rows].
// col holds the element type (float or bfloat16); dcol is float; dx rows (float, one sample's
// C*H*W, bfloat16 only) gather col2im's sums before they are rounded to bfloat16.
struct SlotLayout {
  int64_t ckk, p, oc;
  size_t col_bytes, dcol_bytes, dw_bytes, db_bytes, dx_bytes;
  explicit SlotLayout(const Conv2dShape& s)
      : ckk(s.in_channels * s.kernel_h * s.kernel_w),
        p(s.out_height() * s.out_width()),
        oc(s.out_channels),
        col_bytes(round64(size_t(ckk * p) * (s.dtype == DType::bf16 ? 2 : 4))),
        dcol_bytes(round64(size_t(ckk * p) * sizeof(float))),
        dw_bytes(round64(size_t(oc * ckk) * sizeof(float))),
        db_bytes(round64(size_t(oc) * sizeof(double))),
        dx_bytes(s.dtype == DType::bf16
                     ? round64(size_t(s.in_channels * s.height * s.width) * sizeof(float))
                     : 0) {}
  size_t slot_bytes() const { return col_bytes + dcol_bytes + dw_bytes + db_bytes + dx_bytes; }
  char* slot(void* workspace, int t) const {
    return static_cast<char*>(workspace) + size_t(t) * slot_bytes();
  }
  template <class T>
  T* col(void* ws, int t) const {
    return reinterpret_cast<T*>(slot(ws, t));
  }
  float* dcol(void* ws, int t) const { return reinterpret_cast<float*>(slot(ws, t) + col_bytes); }
  float* dw(void* ws, int t) const {
    return reinterpret_cast<float*>(slot(ws, t) + col_bytes + dcol_bytes);
  }
  double* db(void* ws, int t) const {
    return reinterpret_cast<double*>(slot(ws, t) + col_bytes + dcol_bytes + dw_bytes);
  }
  float* dx_rows(void* ws, int t) const {
    return reinterpret_cast<float*>(slot(ws, t) + col_bytes + dcol_bytes + dw_bytes + db_bytes);
  }
};

// A 1x1 kernel with stride 1 and no padding: the patch matrix is the input itself.
bool pointwise(const Conv2dShape& s) {
  return s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_h == 0 && s.pad_w == 0;
}

int pieces(const Conv2dShape& s, int slots) {
  return int(std::max<int64_t>(1, std::min<int64_t>(slots, s.batch)));
}

// C = op(A) * op(B) + beta * C (alpha 1) in float32, or from bfloat16 operands into a float32
// or bfloat16 C.
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
             const GemmEpilogue& epilogue = {}) {
  sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc, epilogue);
}
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
             const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc,
             const GemmEpilogue& epilogue = {}) {
  gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, false, ldc, epilogue);
}
void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
             const uint16_t* B, int64_t ldb, float beta, uint16_t* C, int64_t ldc,
             const GemmEpilogue& epilogue = {}) {
  gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, true, ldc, epilogue);
}

template <class T>
void forward(const Conv2dShape& s, const T* x, const T* w, const float* b, T* y,
             void* workspace, int slots) {
  const SlotLayout L(s);
  const int64_t in_size = s.in_channels * s.height * s.width, out_size = s.out_channels * L.p;
  const GemmEpilogue bias{b, b ? BiasKind::per_row : BiasKind::none, false};
  parallel_pieces(pieces(s, slots), s.batch, [&](int t, int64_t n0, int64_t n1) {
    T* col = L.col<T>(workspace, t);
    for (int64_t n = n0; n < n1; ++n) {
      const T* x_n = x + n * in_size;
      if (!pointwise(s)) im2col(s, x_n, col);
      product(false, false, L.oc, L.p, L.ckk, w, L.ckk, pointwise(s) ? x_n : col, L.p, 0.f,
              y + n * out_size, L.p, bias);
    }
  });
}

template <class T>
void backward(const Conv2dShape& s, const T* x, const T* w, const T* dy, T* dx, float* dw,
              float* db, void* workspace, int slots) {
  const SlotLayout L(s);
  const int64_t in_size = s.in_channels * s.height * s.width, out_size = s.out_channels * L.p;
  const int T_pieces = pieces(s, slots);
  if (s.batch == 0) {  // nothing to sum: the gradients are zero
    std::memset(dw, 0, size_t(L.oc * L.ckk) * sizeof(float));
    if (db) std::memset(db, 0, size_t(L.oc) * sizeof(float));
    return;
  }
  parallel_pieces(T_pieces, s.batch, [&](int t, int64_t n0, int64_t n1) {
    T* col = L.col<T>(workspace, t);
    float* dcol = L.dcol(workspace, t);
    float* dw_part = t == 0 ? dw : L.dw(workspace, t);  // piece 0 writes dw directly
    double* db_part = L.db(workspace, t);
    std::fill(db_part, db_part + L.oc, 0.0);
    for (int64_t n = n0; n < n1; ++n) {
      const T* x_n = x + n * in_size;
      const T* dy_n = dy + n * out_size;
      if (!pointwise(s)) im2col(s, x_n, col);
      product(false, true, L.oc, L.ckk, L.p, dy_n, L.p, pointwise(s) ? x_n : col, L.p,
              n == n0 ? 0.f : 1.f, dw_part, L.ckk);
      if (db)
        for (int64_t o = 0; o < L.oc; ++o) db_part[o] += sum_values(dy_n + o * L.p, L.p);
      if (!dx) continue;
      T* dx_n = dx + n * in_size;
      if (pointwise(s)) {
        product(true, false, L.ckk, L.p, L.oc, w, L.ckk, dy_n, L.p, 0.f, dx_n, L.p);
        continue;
      }
      product(true, false, L.ckk, L.p, L.oc, w, L.ckk, dy_n, L.p, 0.f, dcol, L.p);
      if constexpr (std::is_same_v<T, float>) {
        col2im(s, dcol, dx_n);
      } else {
        float* rows = L.dx_rows(workspace, t);
        col2im(s, dcol, rows);
        convert(rows, DType::f32, dx_n, DType::bf16, in_size);
      }
    }
  });
  // Fixed-order combination of the pieces' partials.
  const int64_t dw_size = L.oc * L.ckk;
  for (int t = 1; t < T_pieces; ++t) {
    const float* part = L.dw(workspace, t);
    for (int64_t i = 0; i < dw_size; ++i) dw[i] += part[i];
  }
  for (int64_t o = 0; db && o < L.oc; ++o) {
    double total = 0.0;
    for (int t = 0; t < T_pieces; ++t) total += L.db(workspace, t)[o];
    db[o] = float(total);
  }
}

}  // namespace

size_t conv2d_workspace_bytes(const Conv2dShape& s, int slots) {
  return size_t(std::max(slots, 1)) * SlotLayout(s).slot_bytes();
}

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y, void* workspace, int slots) {
  forward(s, x, w, b, y, workspace, slots);
}

void conv2d_forward(const Conv2dShape& s, const uint16_t* x, const uint16_t* w, const float* b,
                    uint16_t* y, void* workspace, int slots) {
  forward(s, x, w, b, y, workspace, slots);
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db, void* workspace, int slots) {
  backward(s, x, w, dy, dx, dw, db, workspace, slots);
}

void conv2d_backward(const Conv2dShape& s, const uint16_t* x, const uint16_t* w,
                     const uint16_t* dy, uint16_t* dx, float* dw, float* db, void* workspace,
                     int slots) {
  backward(s, x, w, dy, dx, dw, db, workspace, slots);
}

}  // namespace trident::cpu
